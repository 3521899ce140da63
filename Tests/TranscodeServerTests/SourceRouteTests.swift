import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// `GET /v1/{signature}/{options}/{source}.{ext}`: signed URLs, freshness, purge and takedown, CORS and
/// absolute URLs, against the real application and a local origin.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct SourceRouteTests {
    static let key = String(repeating: "a1", count: 32)
    static let salt = "5a5b5c"
    static let token = "purge-token-0123456789"
    static let signer = URLSigner(hexKeys: [key], hexSalts: [salt])!

    /// The signed path of `url`'s file.
    static func signed(_ url: String, background: String? = nil, _ fileExtension: String = "mp4") -> String {
        Self.signer.signedPath(
            SourcePath(
                sourceURL: url, background: background.flatMap(RGBColor.init(hex:)), fileExtension: fileExtension
            )
            .path)
    }

    func withSigningHarness(
        configure: @escaping (inout ServerConfiguration) -> Void = { _ in },
        _ body: @Sendable (Harness) async throws -> Void
    ) async throws {
        try await withHarness(
            configure: {
                $0.signing.keys = [Self.key]
                $0.signing.salts = [Self.salt]
                $0.authTokens = [Self.token]
                configure(&$0)
            }, body)
    }

    var auth: [(String, String)] { [("Authorization", "Bearer \(Self.token)")] }

    /// The route serves what `/media` serves, with the route's caching headers, ranges, 304 and HEAD.
    @Test func servesTheVideoPosterAndMetadata() async throws {
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let video = try await harness.request(.GET, Self.signed(url))
            #expect(video.status == 200, "\(video.text)")
            #expect(video.headers.first(name: "Content-Type") == "video/mp4")
            #expect(video.headers.first(name: "Cache-Control") == "public, max-age=3600")
            #expect(video.headers.first(name: "Vary") == nil)
            let etag = try #require(video.headers.first(name: "ETag"))
            let key = String(etag.dropFirst().prefix(64))
            let media = try await harness.request(.GET, "/media/\(key).mp4")
            #expect(media.body == video.body)
            #expect(media.headers.first(name: "Cache-Control") == "public, max-age=31536000, immutable")

            let poster = try await harness.request(.GET, Self.signed(url, "jpg"))
            #expect(poster.status == 200 && poster.headers.first(name: "Content-Type") == "image/jpeg")
            #expect(Array(poster.body.prefix(2)) == [0xFF, 0xD8])
            let metadata = try await harness.request(.GET, Self.signed(url, "json"))
            #expect(try metadata.json()["mp4Bytes"] as? Int == video.body.count)

            let head = try await harness.request(.HEAD, Self.signed(url))
            #expect(head.status == 200 && head.body.isEmpty)
            #expect(head.headers.first(name: "Content-Length") == String(video.body.count))
            let range = try await harness.request(.GET, Self.signed(url), headers: [("Range", "bytes=0-99")])
            #expect(range.status == 206 && range.body == Array(video.body.prefix(100)))
            let notModified = try await harness.request(.GET, Self.signed(url), headers: [("If-None-Match", etag)])
            #expect(notModified.status == 304)
            #expect(notModified.headers.first(name: "Cache-Control") == "public, max-age=3600")

            #expect(harness.origin.count("/corpus/cartoon_hotdog.gif") == 1)
            #expect(harness.services.transcodes.counters.transcodes == 1)
        }
    }

    /// A rendition by box (`w:`, `h:`): fits inside, aspect kept, even sizes, never upscaled; a box the GIF fits in,
    /// or no smaller than the configured one, is the plain result (the same key, converted once).
    @Test func renditionsByBox() async throws {
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")  // 200 x 150
            func metadata(_ width: Int?, _ height: Int?) async throws -> [String: Any] {
                let path = Self.signer.signedPath(
                    SourcePath(sourceURL: url, width: width, height: height, fileExtension: "json").path)
                let reply = try await harness.request(.GET, path)
                #expect(reply.status == 200, "\(reply.text)")
                return try reply.json()
            }
            func size(_ object: [String: Any]) -> [Int] {
                [object["outputWidth"] as? Int ?? 0, object["outputHeight"] as? Int ?? 0]
            }
            let plain = try await metadata(nil, nil)
            #expect(size(plain) == [200, 150])
            #expect(size(try await metadata(100, nil)) == [100, 76])  // 75, to even
            #expect(size(try await metadata(nil, 60)) == [80, 60])
            #expect(size(try await metadata(161, 1000)) == [160, 120])  // an odd box: even inside it
            #expect(harness.services.transcodes.counters.transcodes == 4)
            #expect(harness.origin.count("/corpus/cartoon_hotdog.gif") == 4)
            // At or above the GIF's size: never upscaled, so the plain object itself, with no download and no
            // conversion while the plain URL is fresh (each such box was once a download, a conversion and a copy).
            for (width, height) in [(400, nil), (600, nil), (601, 602), (200, 150)] as [(Int?, Int?)] {
                let same = try await metadata(width, height)
                #expect(same["mp4Sha256"] as? String == plain["mp4Sha256"] as? String, "\(width ?? 0)")
            }
            // Larger than the configured box (1920 x 1080): the plain result itself.
            let huge = try await metadata(5000, 5000)
            #expect(huge["mp4Sha256"] as? String == plain["mp4Sha256"] as? String)
            #expect(harness.services.transcodes.counters.transcodes == 4)
            #expect(harness.origin.count("/corpus/cartoon_hotdog.gif") == 4)
            // A box odd by one pixel is not held (the video pads 199 to 200): its own rendition.
            #expect(size(try await metadata(199, nil)) != [200, 150])
            #expect(harness.services.transcodes.counters.transcodes == 5)
        }
    }

    /// A preview (`preview:2`): the first 2 s of the GIF, its video at most 50,000 bytes (this GIF's comes out in a
    /// smaller box), a result of its own beside the plain one; a length out of range is refused before the origin
    /// is asked.
    @Test func previewRendition() async throws {
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/photo_cats_4frames.gif")  // 482 x 700, 945 KB, 4 frames over 2 s
            func path(_ fileExtension: String, preview: Int? = 2) -> String {
                Self.signer.signedPath(SourcePath(sourceURL: url, preview: preview, fileExtension: fileExtension).path)
            }
            let reply = try await harness.request(.GET, path("json"))
            #expect(reply.status == 200, "\(reply.text)")
            let object = try reply.json()
            let bytes = try #require(object["mp4Bytes"] as? Int)
            #expect(bytes <= 50_000)
            #expect(object["durationMs"] as? Int == 2000)
            #expect((object["outputWidth"] as? Int ?? .max) < 482, "\(object)")
            let preview = try #require(object["preview"] as? [String: Any], "\(object)")
            #expect(preview["seconds"] as? Int == 2 && preview["maxBytes"] as? Int == 50_000)
            let video = try await harness.request(.GET, path("mp4"))
            #expect(video.status == 200 && video.body.count == bytes)
            #expect(video.headers.first(name: "Content-Type") == "video/mp4")
            #expect(try await harness.request(.GET, path("jpg")).status == 200)
            #expect(harness.services.transcodes.counters.transcodes == 1)
            // The plain object is another, converted on its own request.
            let plain = try await harness.request(.GET, path("json", preview: nil)).json()
            #expect(plain["preview"] == nil && plain["durationMs"] as? Int ?? 0 > 2000)
            #expect(plain["mp4Sha256"] as? String != object["mp4Sha256"] as? String)
            #expect(harness.services.transcodes.counters.transcodes == 2)
            let encoded = URLSigner.base64URL(Array(url.utf8))
            let refused = try await harness.request(.GET, Self.signer.signedPath("/preview:5/\(encoded).mp4"))
            #expect(refused.status == 400 && refused.errorCode == "bad-request", "\(refused.text)")
            #expect(harness.origin.count("/corpus/photo_cats_4frames.gif") == 2)
        }
    }

    /// `.webp`: an animated WebP that keeps transparency, made with its object's video and poster in one job,
    /// served with ranges, its size and digest the manifest's; `POST /transcode` with `formats` answers its URL;
    /// an unknown format is refused before the origin is asked.
    @Test func animatedWebP() async throws {
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/cartoon_dancing_banana.gif")  // 365 x 360, transparent
            let path = Self.signed(url, "webp")
            let reply = try await harness.request(.GET, path)
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.headers.first(name: "Content-Type") == "image/webp")
            #expect(Array(reply.body.prefix(4)) == Array("RIFF".utf8))
            #expect(Array(reply.body[8..<12]) == Array("WEBP".utf8))
            // VP8X announces alpha (0x10) and animation (0x02); ANIM follows it.
            #expect(Array(reply.body[12..<16]) == Array("VP8X".utf8))
            #expect(reply.body[20] & 0x12 == 0x12)
            #expect(Array(reply.body[30..<34]) == Array("ANIM".utf8))
            let range = try await harness.request(.GET, path, headers: [("Range", "bytes=0-99")])
            #expect(range.status == 206)
            #expect(range.body == Array(reply.body.prefix(100)))
            #expect(harness.services.transcodes.counters.transcodes == 1)
            #expect(try await harness.request(.GET, path).body == reply.body)
            #expect(harness.services.transcodes.counters.transcodes == 1)

            // The same object through POST /transcode: its URL in the answer, its entry in the manifest.
            let body = try JSONSerialization.data(
                withJSONObject: ["url": url, "formats": ["mp4", "webp"]] as [String: Any])
            let answer = try await harness.request(
                .POST, "/transcode",
                headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(Self.token)")],
                body: Array(body))
            #expect(answer.status == 200, "\(answer.text)")
            let json = try answer.json()
            let webpURL = try #require(json["webp"] as? String)
            #expect(webpURL.hasSuffix(".webp") && webpURL.hasPrefix("/media/"))
            let signed = try #require(json["signed"] as? [String: String])
            #expect(signed["webp"]?.contains(".webp") == true)
            // Its signed video names the same object (`also:webp`): served with no new conversion.
            let signedVideo = try #require(signed["mp4"])
            #expect(signedVideo.contains("/also:webp/"), "\(signedVideo)")
            let video = try await harness.request(.GET, try #require(URL(string: signedVideo)?.path))
            #expect(video.status == 200, "\(video.text)")
            #expect(video.headers.first(name: "Content-Type") == "video/mp4")
            let artifacts = try #require(json["artifacts"] as? [[String: Any]])
            let entry = try #require(artifacts.first { $0["format"] as? String == "webp" })
            #expect(entry["bytes"] as? Int == reply.body.count)
            #expect(entry["width"] as? Int == 365 && entry["height"] as? Int == 360)
            let media = try await harness.request(.GET, webpURL)
            #expect(media.status == 200)
            #expect(media.body == reply.body)
            #expect(harness.services.transcodes.counters.transcodes == 1)

            // A format the service does not make: 400 before any download.
            let before = harness.origin.total
            let unknown = try JSONSerialization.data(withJSONObject: ["url": url, "formats": ["gif"]] as [String: Any])
            let refused = try await harness.request(
                .POST, "/transcode",
                headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(Self.token)")],
                body: Array(unknown))
            #expect(refused.status == 400)
            #expect(refused.errorCode == "bad-request")
            #expect(refused.text.contains("unknown format"))
            #expect(harness.origin.total == before)
        }
    }

    /// Any change to any part of the path breaks the signature: 403 before the origin is asked.
    @Test func tamperedPathsAreRefused() async throws {
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let good = Self.signed(url, background: "#000000")
            let parts = good.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            // "", "v1", signature, "bg:000000", "<source>.mp4"
            #expect(parts.count == 5)
            var tampered: [String] = []
            var signature = Array(parts[2])
            signature[5] = signature[5] == "A" ? "B" : "A"
            tampered.append(["", "v1", String(signature), parts[3], parts[4]].joined(separator: "/"))
            tampered.append(["", "v1", parts[2], "bg:000001", parts[4]].joined(separator: "/"))
            tampered.append(["", "v1", parts[2], parts[4]].joined(separator: "/"))  // option removed
            let otherSource = SourcePath(sourceURL: harness.originURL("/copy/cartoon_hotdog.gif")).path
            tampered.append("/v1/\(parts[2])/\(parts[3])\(otherSource)")
            tampered.append(good.replacingOccurrences(of: ".mp4", with: ".jpg"))
            tampered.append("/v1/" + parts[3] + "/" + parts[4])  // no signature
            tampered.append("/v1/_/" + parts[3] + "/" + parts[4])  // unsigned
            tampered.append("/v1/" + parts[2])  // nothing signed
            for path in tampered {
                let reply = try await harness.request(.GET, path)
                #expect(reply.status == 403, "\(path): \(reply.status) \(reply.text)")
                #expect(reply.errorCode == "invalid-signature", "\(path)")
                #expect(reply.headers.first(name: "Cache-Control") == "no-store", "\(path)")
            }
            #expect(harness.origin.total == 0)
            #expect(try await harness.request(.GET, good).status == 200)
        }
    }

    /// Unsigned URLs work only when signing is switched off.
    @Test func unsignedURLsOnlyWhenSigningIsOff() async throws {
        try await withHarness { harness in
            let path = "/v1/_" + SourcePath(sourceURL: harness.originURL("/corpus/cartoon_hotdog.gif")).path
            let reply = try await harness.request(.GET, path)
            #expect(reply.status == 403)
        }
        try await withHarness(configure: { $0.signing.disabled = true }) { harness in
            let path = "/v1/_" + SourcePath(sourceURL: harness.originURL("/corpus/cartoon_hotdog.gif")).path
            let reply = try await harness.request(.GET, path)
            #expect(reply.status == 200)
        }
    }

    /// 50 concurrent GETs for one new URL: one download, one transcode, 50 identical videos.
    @Test func fiftyConcurrentGETsOneDownloadOneTranscode() async throws {
        try await withSigningHarness { harness in
            let path = Self.signed(harness.originURL("/delayed/500/cartoon_hotdog.gif"))
            let replies = try await withThrowingTaskGroup(of: Reply.self) { group in
                for _ in 0..<50 { group.addTask { try await harness.request(.GET, path) } }
                var replies: [Reply] = []
                for try await reply in group { replies.append(reply) }
                return replies
            }
            #expect(replies.allSatisfy { $0.status == 200 })
            #expect(Set(replies.map(\.body)).count == 1)
            #expect(replies[0].body.count > 1000)
            #expect(harness.origin.count("/delayed/500/cartoon_hotdog.gif") == 1)
            #expect(harness.services.transcodes.counters.downloads == 1)
            #expect(harness.services.transcodes.counters.transcodes == 1)
        }
    }

    /// `http.sourceAnswer: redirect`: a 302 to the immutable `/media` file, cacheable like the route.
    @Test func redirectAnswer() async throws {
        try await withSigningHarness(configure: { $0.http.sourceAnswer = .redirect }) { harness in
            let reply = try await harness.request(.GET, Self.signed(harness.originURL("/corpus/cartoon_hotdog.gif")))
            #expect(reply.status == 302)
            let location = try #require(reply.headers.first(name: "Location"))
            #expect(location.hasPrefix("/media/") && location.hasSuffix(".mp4"))
            #expect(reply.headers.first(name: "Cache-Control") == "public, max-age=3600")
            #expect(try await harness.request(.GET, location).status == 200)
        }
    }

    /// Past `cache.urlTTLSeconds` the origin is asked again with the stored validators: a 304 keeps the
    /// object, new bytes make a new object and move the link, a 404 ends it.
    @Test func revalidation() async throws {
        try await withSigningHarness(configure: { $0.cache.urlTTLSeconds = 0 }) { harness in
            harness.origin.setVersion("clip.gif", "cartoon_hotdog.gif")
            let url = harness.originURL("/versioned/clip.gif")
            let first = try await harness.request(.GET, Self.signed(url))
            #expect(first.status == 200)
            let firstTag = first.headers.first(name: "ETag")

            let second = try await harness.request(.GET, Self.signed(url))
            #expect(second.status == 200 && second.headers.first(name: "ETag") == firstTag)
            var sent = harness.origin.conditionalHeaders
            #expect(sent.count == 2)
            #expect(sent.first?.ifNoneMatch == nil)
            #expect(sent.last?.ifNoneMatch == "\"v-cartoon_hotdog.gif\"")
            #expect(sent.last?.ifModifiedSince == "Sun, 22 Nov 2026 10:00:00 GMT")
            #expect(harness.services.transcodes.counters.revalidations["not-modified"] == 1)
            #expect(harness.services.transcodes.counters.transcodes == 1)

            harness.origin.setVersion("clip.gif", "cartoon_flag_delaware.gif")
            let changed = try await harness.request(.GET, Self.signed(url))
            #expect(changed.status == 200 && changed.headers.first(name: "ETag") != firstTag)
            #expect(harness.services.transcodes.counters.revalidations["changed"] == 1)
            #expect(harness.services.transcodes.counters.transcodes == 2)
            // POST /transcode follows the link too.
            let posted = try await harness.transcode(url: url, headers: self.auth)
            #expect(
                try posted.json()["key"] as? String
                    == String(changed.headers.first(name: "ETag")!.dropFirst().prefix(64)))
            sent = harness.origin.conditionalHeaders
            #expect(sent.last?.ifNoneMatch == "\"v-cartoon_flag_delaware.gif\"")

            harness.origin.setVersion("clip.gif", "no-such-file.gif")
            let gone = try await harness.request(.GET, Self.signed(url))
            #expect(gone.status == 404 && gone.errorCode == "origin-not-found")
        }
    }

    /// An origin that fails leaves the stored result in service, asked again at most once a minute, until the
    /// grace (`cache.staleIfErrorSeconds`) past the TTL runs out; then its error is the answer.
    @Test func staleIfErrorWithBackoffAndGrace() async throws {
        try await withSigningHarness(configure: {
            $0.cache.urlTTLSeconds = 3600; $0.cache.staleIfErrorSeconds = 7200
        }) {
            harness in
            harness.origin.setVersion("clip.gif", "cartoon_hotdog.gif")
            let url = harness.originURL("/versioned/clip.gif")
            let first = try await harness.request(.GET, Self.signed(url))
            #expect(first.status == 200)
            let cache = harness.services.cache
            let urlKey = SourceKeys(
                url: URL(string: url)!, options: harness.services.transcodes.options(background: nil)
            )
            .urlKey
            // An hour and a bit later the origin fails: the stored video is served, the origin asked once.
            cache.links.renewLink(urlKey: urlKey, age: 3700)
            harness.origin.setVersion("clip.gif", "status:503")
            for _ in 0..<3 {
                let reply = try await harness.request(.GET, Self.signed(url))
                #expect(reply.status == 200 && reply.body == first.body)
            }
            #expect(harness.origin.count("/versioned/clip.gif") == 2)
            #expect(harness.services.transcodes.counters.revalidations["failed"] == 1)
            // Past the grace (last validated more than TTL + grace ago): the origin's error.
            var record = try #require(cache.links.sourceRecord(urlKey: urlKey))
            record.validatedAt = Date().timeIntervalSince1970 - 3600 - 7200 - 10
            let etag = try #require(first.headers.first(name: "ETag"))
            let key = try #require(ObjectKey(etag.dropFirst().prefix(64)))
            try cache.links.writeSource(record, urlKey: urlKey, key: key)
            cache.links.renewLink(urlKey: urlKey, age: 3700)
            let late = try await harness.request(.GET, Self.signed(url))
            #expect(late.status == 502 && late.errorCode == "origin-error", "\(late.status) \(late.text)")
        }
    }

    /// Within the TTL nothing is asked of the origin.
    @Test func freshURLsAreNotRevalidated() async throws {
        try await withSigningHarness { harness in
            harness.origin.setVersion("clip.gif", "cartoon_hotdog.gif")
            let url = harness.originURL("/versioned/clip.gif")
            for _ in 0..<3 {
                let reply = try await harness.request(.GET, Self.signed(url))
                #expect(reply.status == 200)
            }
            #expect(harness.origin.count("/versioned/clip.gif") == 1)
        }
    }

    /// A purge deletes the files (the next request converts again); a takedown leaves tombstones that
    /// answer 451 for the URL, the object, the same bytes uploaded or at another URL.
    @Test func purgeAndTakedown() async throws {
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let first = try await harness.request(.GET, Self.signed(url))
            let etag = try #require(first.headers.first(name: "ETag"))
            let key = try #require(ObjectKey(etag.dropFirst().prefix(64)))
            let cache = harness.services.cache
            #expect(FileManager.default.fileExists(atPath: cache.objects.objectPath(key, "mp4")))

            #expect(try await harness.request(.DELETE, "/v1/objects/\(key)").status == 401)
            let purged = try await harness.request(.DELETE, "/v1/objects/\(key)", headers: self.auth)
            #expect(purged.status == 200, "\(purged.text)")
            #expect(try purged.json()["objects"] as? [String] == [key.rawValue])
            for fileExtension in ["mp4", "jpg", "json"] {
                #expect(!FileManager.default.fileExists(atPath: cache.objects.objectPath(key, fileExtension)))
            }
            #expect(try await harness.request(.GET, "/media/\(key).mp4").status == 404)
            #expect(try await harness.request(.GET, Self.signed(url)).status == 200)
            #expect(harness.services.transcodes.counters.transcodes == 2)

            let encoded = url.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let takedown = try await harness.request(
                .DELETE, "/v1/sources?url=\(encoded)&takedown=true&reason=dmca-123", headers: self.auth)
            #expect(takedown.status == 200, "\(takedown.text)")
            #expect(try takedown.json()["objects"] as? [String] == [key.rawValue])
            #expect(try takedown.json()["links"] as? Int == 1)
            #expect(!FileManager.default.fileExists(atPath: cache.objects.objectPath(key, "mp4")))

            let downloads = harness.services.transcodes.counters.downloads
            for reply in [
                try await harness.request(.GET, Self.signed(url)),
                try await harness.request(.GET, Self.signed(url, background: "#000000")),
                try await harness.request(.GET, "/media/\(key).mp4"),
                try await harness.transcode(url: url, headers: self.auth),
            ] {
                #expect(reply.status == 451 && reply.errorCode == "taken-down", "\(reply.status) \(reply.text)")
                #expect(reply.headers.first(name: "Cache-Control") == "no-store")
            }
            #expect(harness.services.transcodes.counters.downloads == downloads)
            // The same bytes, uploaded or at another URL, are refused too (after the download: only then
            // are they known), and nothing is converted.
            #expect(try await harness.upload(try corpusBytes("cartoon_hotdog.gif"), headers: self.auth).status == 451)
            #expect(
                try await harness.request(.GET, Self.signed(harness.originURL("/copy/cartoon_hotdog.gif"))).status
                    == 451)
            #expect(harness.services.transcodes.counters.transcodes == 2)
            // Other GIFs are not affected.
            #expect(
                try await harness.request(.GET, Self.signed(harness.originURL("/corpus/cartoon_flag_delaware.gif")))
                    .status == 200)
        }
    }

    /// A takedown by object key holds even when the metadata does not name the GIF's hash (written before it
    /// was recorded): the same bytes converted again are refused by their key.
    @Test func objectTakedownWithoutTheGIFHash() async throws {
        try await withSigningHarness { harness in
            let gif = try corpusBytes("cartoon_hotdog.gif")
            let first = try await harness.upload(gif, headers: self.auth)
            let key = try #require(ObjectKey(try first.json()["key"] as? String ?? ""))
            // Rewrite the metadata as an older version wrote it: no source hash under either name (and no ledger
            // of sources, which came later).
            unlink(harness.services.cache.objects.ledgerPath)
            let path = harness.services.cache.objects.objectPath(key, "json")
            var metadata = try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
            metadata["gifSha256"] = nil
            metadata["sourceSha256"] = nil
            let rewritten = path + ".new"
            try JSONSerialization.data(withJSONObject: metadata).write(to: URL(fileURLWithPath: rewritten))
            #expect(rename(rewritten, path) == 0)
            let takedown = try await harness.request(.DELETE, "/v1/objects/\(key)?takedown=true", headers: self.auth)
            #expect(try takedown.json()["tombstones"] as? [String] == ["object-\(key)"])
            #expect(try await harness.upload(gif, headers: self.auth).status == 451)
            #expect(try await harness.request(.GET, "/media/\(key).mp4").status == 451)
            #expect(!FileManager.default.fileExists(atPath: harness.services.cache.objects.objectPath(key, "mp4")))
        }
    }

    /// A takedown by URL after its object is gone (purged here; evicted alike) still buries the bytes the URL was
    /// fetched as, from the URL's record: the same bytes uploaded or found at another URL answer 451.
    @Test func urlTakedownAfterTheObjectIsGone() async throws {
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let first = try await harness.request(.GET, Self.signed(url))
            let etag = try #require(first.headers.first(name: "ETag"))
            let key = try #require(ObjectKey(etag.dropFirst().prefix(64)))
            #expect(try await harness.request(.DELETE, "/v1/objects/\(key)", headers: self.auth).status == 200)
            let encoded = url.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let takedown = try await harness.request(
                .DELETE, "/v1/sources?url=\(encoded)&takedown=true", headers: self.auth)
            #expect(takedown.status == 200, "\(takedown.text)")
            let digest = ObjectKey.derive(source: try corpusBytes("cartoon_hotdog.gif"), options: TranscodeOptions())
                .source
            #expect((try takedown.json()["tombstones"] as? [String] ?? []).contains("gif-\(digest)"))
            #expect(try await harness.upload(try corpusBytes("cartoon_hotdog.gif"), headers: self.auth).status == 451)
            #expect(
                try await harness.request(.GET, Self.signed(harness.originURL("/copy/cartoon_hotdog.gif"))).status
                    == 451)
        }
    }

    /// A box the GIF fits in, asked first of a URL never seen: one download and the plain object's key, so the
    /// plain URL and every such box afterwards convert nothing more (issue 56: `w:600`, `w:601` and `w:602` of a
    /// 366-px GIF were three downloads, three conversions and three copies of the same bytes).
    @Test func aBoxTheGIFFitsInIsThePlainObject() async throws {
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/cartoon_dancing_banana.gif")  // 365 x 360
            var keys: Set<String> = []
            for width in [600, 601, 602] {
                let path = Self.signer.signedPath(SourcePath(sourceURL: url, width: width).path)
                let reply = try await harness.request(.GET, path)
                #expect(reply.status == 200)
                keys.insert(String(try #require(reply.headers.first(name: "ETag")).dropFirst().prefix(64)))
            }
            let plain = try await harness.request(.GET, Self.signed(url))
            keys.insert(String(try #require(plain.headers.first(name: "ETag")).dropFirst().prefix(64)))
            #expect(keys.count == 1, "\(keys)")
            #expect(harness.services.transcodes.counters.transcodes == 1)
            // The first box downloaded it; the others and the plain URL found the plain object.
            #expect(harness.origin.count("/corpus/cartoon_dancing_banana.gif") == 1)
        }
    }

    /// A takedown by URL that follows a purge of the same URL buries the bytes it was fetched as: the purge once
    /// removed the URL's whole index, and the same bytes then answered 200 by upload, from another URL, and by a
    /// signed GET of another URL (issue 56).
    @Test func urlTakedownAfterAPurgeOfTheURL() async throws {
        // `.auto`'s conversion is queued as an upgrade (the harness queues none by default): it finds the bytes
        // buried before any encode.
        try await withSigningHarness(configure: { $0.transcode.upgradeQueueLength = 4 }) { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            #expect(try await harness.request(.GET, Self.signed(url)).status == 200)
            let encoded = url.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let purge = try await harness.request(.DELETE, "/v1/sources?url=\(encoded)", headers: self.auth)
            #expect(purge.status == 200, "\(purge.text)")
            let takedown = try await harness.request(
                .DELETE, "/v1/sources?url=\(encoded)&takedown=true", headers: self.auth)
            #expect(takedown.status == 200, "\(takedown.text)")
            let digest = ObjectKey.derive(source: try corpusBytes("cartoon_hotdog.gif"), options: TranscodeOptions())
                .source
            #expect((try takedown.json()["tombstones"] as? [String] ?? []).contains("gif-\(digest)"))
            let other = harness.originURL("/copy/cartoon_hotdog.gif")
            var answers: [String: Int] = [:]
            answers["upload"] = try await harness.upload(try corpusBytes("cartoon_hotdog.gif"), headers: self.auth)
                .status
            answers["POST other URL"] = try await harness.transcode(url: other, headers: self.auth).status
            answers["the URL itself"] = try await harness.request(.GET, Self.signed(url)).status
            answers["the URL itself, another background"] = try await harness.request(
                .GET, Self.signed(url, background: "#102030")
            ).status
            answers["POST other URL, another background"] =
                try await harness.transcode(url: other, background: "#203040", headers: self.auth).status
            answers["upload, another background"] =
                try await harness.request(
                    .POST, "/transcode?background=%23304050",
                    headers: [("Content-Type", "image/gif")] + self.auth, body: try corpusBytes("cartoon_hotdog.gif")
                ).status
            for file in ["mp4", "jpg", "json", "webp", "avif"] {
                answers["signed other URL .\(file)"] = try await harness.request(
                    .GET, Self.signed(other, file)
                ).status
            }
            // `.auto` of a URL never fetched: a redirect to the source while its conversion is queued (none of the
            // service's bytes), then, once that conversion found the bytes buried, 451.
            let auto = Self.signed(other, SourcePath.negotiated)
            var status = try await harness.request(.GET, auto).status
            #expect([302, 451].contains(status))
            for _ in 0..<200 where status == 302 {
                try await Task.sleep(for: .milliseconds(50))
                status = try await harness.request(.GET, auto).status
            }
            answers["signed other URL .auto"] = status
            // The count: twelve spellings of the same bytes, none answered.
            #expect(answers.count == 12)
            #expect(answers.values.allSatisfy { $0 == 451 }, "\(answers)")
        }
    }

    /// A takedown by object key after the object is gone still buries the bytes it was made from (the ledger of
    /// sources): the same GIF uploaded again, with other options too, answers 451.
    @Test func objectTakedownAfterTheObjectIsGone() async throws {
        try await withSigningHarness { harness in
            let gif = try corpusBytes("cartoon_hotdog.gif")
            let first = try await harness.upload(gif, headers: self.auth)
            let key = try #require(ObjectKey(try first.json()["key"] as? String ?? ""))
            #expect(try await harness.request(.DELETE, "/v1/objects/\(key)", headers: self.auth).status == 200)
            #expect(!harness.services.cache.objects.contains(key))
            let takedown = try await harness.request(.DELETE, "/v1/objects/\(key)?takedown=true", headers: self.auth)
            #expect(takedown.status == 200)
            let digest = ObjectKey.derive(source: gif, options: TranscodeOptions()).source
            #expect((try takedown.json()["tombstones"] as? [String] ?? []).contains("gif-\(digest)"))
            #expect(try await harness.upload(gif, headers: self.auth).status == 451)
            let other = try await harness.request(
                .POST, "/transcode?background=%23102030", headers: [("Content-Type", "image/gif")] + self.auth,
                body: gif)
            #expect(other.status == 451)
        }
    }

    /// A takedown by URL reaches every object the URL led to, also the ones a revalidation moved it off.
    @Test func urlTakedownAfterTheContentChanged() async throws {
        try await withSigningHarness(configure: { $0.cache.urlTTLSeconds = 0 }) { harness in
            harness.origin.setVersion("clip.gif", "cartoon_hotdog.gif")
            let url = harness.originURL("/versioned/clip.gif")
            let first = try await harness.request(.GET, Self.signed(url))
            let old = String(try #require(first.headers.first(name: "ETag")).dropFirst().prefix(64))
            harness.origin.setVersion("clip.gif", "cartoon_flag_delaware.gif")
            let second = try await harness.request(.GET, Self.signed(url))
            let new = String(try #require(second.headers.first(name: "ETag")).dropFirst().prefix(64))
            #expect(old != new)
            let encoded = url.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let takedown = try await harness.request(
                .DELETE, "/v1/sources?url=\(encoded)&takedown=true", headers: self.auth)
            #expect(Set(try takedown.json()["objects"] as? [String] ?? []) == [old, new])
            for key in [old, new] {
                #expect(try await harness.request(.GET, "/media/\(key).mp4").status == 451)
            }
            #expect(try await harness.request(.GET, Self.signed(url)).status == 451)
        }
    }

    /// A response already streaming when its object is purged finishes with every byte. Deterministic: the
    /// response is made (its file checked and opened), the object purged, and only then is the body written.
    @Test func aResponseMadeBeforeThePurgeFinishes() async throws {
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/screenrec_flanimatedimage_demo.gif")
            let whole = try await harness.request(.GET, Self.signed(url))
            #expect(whole.status == 200)
            #expect(whole.body.count > 2 * MediaController<AppRequestContext>.chunkLength, "too small to stream")
            let etag = try #require(whole.headers.first(name: "ETag"))
            let key = try #require(ObjectKey(etag.dropFirst().prefix(64)))

            let media = MediaController<AppRequestContext>(
                results: harness.services.transcodes.results, bytesServed: { _ in })
            let request = Request(
                head: .init(method: .get, scheme: "http", authority: "127.0.0.1", path: "/media/\(key).mp4"),
                body: .init(buffer: ByteBuffer()))
            let response = try await media.respond(
                key: key, fileExtension: "mp4", contentType: "video/mp4", request: request, includeBody: true,
                cacheControl: "no-cache")
            let purged = try await harness.request(.DELETE, "/v1/objects/\(key)", headers: self.auth)
            #expect(purged.status == 200)
            #expect(!FileManager.default.fileExists(atPath: harness.services.cache.objects.objectPath(key, "mp4")))
            let collector = Collector()
            try await response.body.write(CollectingWriter(collector: collector))
            #expect(collector.bytes == whole.body)
            #expect(try await harness.request(.GET, "/media/\(key).mp4").status == 404)
        }
    }

    /// `transcode-server cache purge --url ... --takedown`, run beside the live server, takes effect at once.
    @Test(.tags(.childProcess)) func purgeCommandBesideTheServer() async throws {
        let binary = try OperationsTests.debugBinary()
        try await withSigningHarness { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let first = try await harness.request(.GET, Self.signed(url))
            let etag = try #require(first.headers.first(name: "ETag"))
            let key = try #require(ObjectKey(etag.dropFirst().prefix(64)))
            let run = try await runProcess(
                binary,
                [
                    "cache", "purge", "--url", url, "--takedown", "--reason", "test",
                    "--cache-directory", harness.services.cache.root,
                ], timeout: .seconds(30))
            #expect(run.status == 0, "\(run.stderr)")
            let report = try #require(
                try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stdout)")
            #expect(report["objects"] as? [String] == [key.rawValue])
            #expect((report["tombstones"] as? [String])?.contains("object-\(key)") == true)
            #expect(!FileManager.default.fileExists(atPath: harness.services.cache.objects.objectPath(key, "mp4")))
            #expect(try await harness.request(.GET, Self.signed(url)).status == 451)
            #expect(try await harness.request(.GET, "/media/\(key).jpg").status == 451)
        }
    }

    /// CORS: the public routes allow every origin, `POST /transcode` only the configured ones.
    @Test func cors() async throws {
        try await withSigningHarness(configure: { $0.corsAllowedOrigins = ["https://cms.example.com"] }) { harness in
            let preflight = try await harness.request(
                .OPTIONS, "/transcode",
                headers: [
                    ("Origin", "https://cms.example.com"), ("Access-Control-Request-Method", "POST"),
                    ("Access-Control-Request-Headers", "authorization, content-type"),
                ])
            #expect(preflight.status == 204)
            #expect(preflight.headers.first(name: "Access-Control-Allow-Origin") == "https://cms.example.com")
            #expect(preflight.headers.first(name: "Access-Control-Allow-Methods")?.contains("POST") == true)
            #expect(
                preflight.headers.first(name: "Access-Control-Allow-Headers")?.lowercased().contains("authorization")
                    == true)
            #expect(preflight.headers.first(name: "Vary") == "Origin")
            let other = try await harness.request(
                .OPTIONS, "/transcode",
                headers: [("Origin", "https://evil.example"), ("Access-Control-Request-Method", "POST")])
            #expect(other.headers.first(name: "Access-Control-Allow-Origin") == nil)

            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let posted = try await harness.transcode(
                url: url, headers: [("Origin", "https://cms.example.com"), ("Authorization", "Bearer \(Self.token)")])
            #expect(posted.headers.first(name: "Access-Control-Allow-Origin") == "https://cms.example.com")
            // Exposed on the answer itself, where a page reads them (not only on the preflight).
            #expect(posted.headers.first(name: "Access-Control-Expose-Headers")?.contains("X-Cache") == true)
            let key = try #require(ObjectKey(try posted.json()["key"] as? String ?? ""))
            for path in ["/media/\(key).mp4", Self.signed(url), "/v1/bad/" + SourcePath(sourceURL: url).path] {
                let reply = try await harness.request(.GET, path, headers: [("Origin", "https://anyone.example")])
                #expect(reply.headers.first(name: "Access-Control-Allow-Origin") == "*", "\(path)")
                #expect(reply.headers.first(name: "Vary") == nil, "\(path)")
                #expect(
                    reply.headers.first(name: "Access-Control-Expose-Headers")?.contains("Content-Range") == true,
                    "\(path)")
            }
            let mediaPreflight = try await harness.request(
                .OPTIONS, "/media/\(key).mp4",
                headers: [("Origin", "https://anyone.example"), ("Access-Control-Request-Headers", "range")])
            #expect(mediaPreflight.headers.first(name: "Access-Control-Allow-Origin") == "*")
            #expect(
                mediaPreflight.headers.first(name: "Access-Control-Allow-Headers")?.lowercased().contains("range")
                    == true)
        }
    }

    /// `http.publicBaseURL`: every URL an answer carries is absolute, and the answer gives the signed URLs,
    /// which work.
    @Test func absoluteAndSignedURLsInAnswers() async throws {
        let base = "https://media.example.com"
        try await withSigningHarness(configure: { $0.http.publicBaseURL = base }) { harness in
            let url = harness.originURL("/corpus/cartoon_hotdog.gif")
            let reply = try await harness.transcode(url: url, headers: self.auth)
            let json = try reply.json()
            let key = try #require(ObjectKey(json["key"] as? String ?? ""))
            #expect(json["mp4"] as? String == "\(base)/media/\(key).mp4")
            #expect(json["poster"] as? String == "\(base)/media/\(key).jpg")
            #expect(json["metadata"] as? String == "\(base)/media/\(key).json")
            let html = try #require(json["html"] as? String)
            #expect(
                html.contains("poster=\"\(base)/media/\(key).jpg\"")
                    && html.contains("src=\"\(base)/media/\(key).mp4\""))
            let signed = try #require(json["signed"] as? [String: String])
            #expect(signed["mp4"] == base + Self.signed(url))
            #expect(signed["poster"] == base + Self.signed(url, "jpg"))
            for (name, address) in signed {
                let path = String(address.dropFirst(base.count))
                let fetched = try await harness.request(.GET, path)
                #expect(fetched.status == 200, "\(name)")
            }
        }
    }

}

/// Collects a response body written outside a server.
final class Collector: Sendable {
    private let collected = Mutex<[UInt8]>([])
    var bytes: [UInt8] { self.collected.withLock { $0 } }
    func append(_ buffer: ByteBuffer) { self.collected.withLock { $0 += buffer.readableBytesView } }
}

struct CollectingWriter: ResponseBodyWriter {
    let collector: Collector
    mutating func write(_ buffer: ByteBuffer) async throws { self.collector.append(buffer) }
    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
