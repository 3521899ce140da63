import Foundation
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct ByteRangeTests {
    @Test(arguments: [
        ("bytes=0-9", ByteRange.partial(0...9)),
        ("bytes=10-", .partial(10...99)),
        ("bytes=-10", .partial(90...99)),
        ("bytes=-1000", .partial(0...99)),
        ("bytes=90-1000", .partial(90...99)),
        ("bytes=99-99", .partial(99...99)),
        ("bytes=100-", .unsatisfiable),
        ("bytes=100-200", .unsatisfiable),
        ("bytes=-0", .unsatisfiable),
        ("bytes=9-2", .whole),
        ("bytes=a-b", .whole),
        ("bytes=", .whole),
        ("bytes=-", .whole),
        ("items=0-9", .whole),
        ("bytes=0-1,5-6", .whole),
        ("bytes= 0-9", .partial(0...9)),
        ("  Bytes=0-9\t", .partial(0...9)),
        ("BYTES=5-", .partial(5...99)),
        ("bytes=0-١", .whole),
        ("bytes=+1-2", .whole),
        ("bytes=0-999999999999999999", .partial(0...99)),
        ("bytes=0-9999999999999999999", .whole),
        ("bytes=0 - 9", .whole),
    ])
    func parse(header: String, expected: ByteRange) {
        #expect(ByteRange(header: header, size: 100) == expected)
    }

    @Test func noHeader() {
        #expect(ByteRange(header: nil, size: 100) == .whole)
    }
}

@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct MediaTests {
    private func withObject(_ body: @Sendable (Harness, ObjectKey, [UInt8]) async throws -> Void) async throws {
        try await withHarness { harness in
            let reply = try await harness.transcode(url: harness.originURL("/corpus/cartoon_hotdog.gif"))
            let key = try #require(ObjectKey(try reply.json()["key"] as? String ?? ""))
            let mp4 = try await harness.request(.GET, "/media/\(key).mp4")
            try await body(harness, key, mp4.body)
        }
    }

    /// The strong ETag of a file: its key, extension and the first 128 bits of its own SHA-256 (the video's for
    /// the manifest, which records it).
    static func etag(_ key: ObjectKey, _ ext: String, of bytes: [UInt8]) -> String {
        // A content digest is the SHA-256 of the bytes.
        "\"\(key).\(ext).\(ObjectKey.derive(source: bytes, options: TranscodeOptions()).source.rawValue.prefix(32))\""
    }

    @Test func headersOfEveryKind() async throws {
        try await self.withObject { harness, key, mp4 in
            let poster = try await harness.request(.GET, "/media/\(key).jpg").body
            for (ext, type, hashed) in [
                ("mp4", "video/mp4", mp4), ("jpg", "image/jpeg", poster),
                ("json", "application/json; charset=utf-8", mp4),
            ] {
                let reply = try await harness.request(.GET, "/media/\(key).\(ext)")
                #expect(reply.status == 200)
                #expect(reply.headers.first(name: "Content-Type") == type)
                #expect(reply.headers.first(name: "ETag") == Self.etag(key, ext, of: hashed))
                #expect(reply.headers.first(name: "Cache-Control") == "public, max-age=31536000, immutable")
                #expect(reply.headers.first(name: "X-Content-Type-Options") == "nosniff")
                #expect(reply.headers.first(name: "Accept-Ranges") == "bytes")
                #expect(reply.headers.first(name: "Content-Length") == String(reply.body.count))
            }
            let json = try await harness.request(.GET, "/media/\(key).json")
            #expect(try json.json()["mp4Bytes"] as? Int == mp4.count)
            // One URL per file: other spellings of the path are not it.
            for path in ["/media/\(key).mp4/", "//media/\(key).mp4", "/media//\(key).mp4"] {
                #expect(try await harness.request(.GET, path).status == 404, "\(path)")
            }
        }
    }

    /// Small files are served from memory after their first read, but only while the file is the one read: a
    /// file rewritten in place (same size, new bytes) is read again, never answered from a stale copy.
    @Test func smallFilesInMemoryFollowTheFile() async throws {
        try await self.withObject { harness, key, mp4 in
            #expect(mp4.count <= HitMemory.smallFileLimit)
            let first = try await harness.request(.GET, "/media/\(key).mp4", headers: [("Range", "bytes=4-11")])
            #expect(first.body == Array(mp4[4...11]))
            let again = try await harness.request(.GET, "/media/\(key).mp4")
            #expect(again.body == mp4)
            let path = harness.services.cache.objects.objectPath(key, "mp4")
            var changed = mp4
            changed[4] ^= 0xFF
            // A new modification time: the identity the memory copy was kept under no longer matches.
            try await Task.sleep(for: .milliseconds(20))
            let handle = try #require(FileHandle(forWritingAtPath: path))
            try handle.write(contentsOf: Data(changed))
            try handle.close()
            let after = try await harness.request(.GET, "/media/\(key).mp4", headers: [("Range", "bytes=4-11")])
            #expect(after.body == Array(changed[4...11]))
        }
    }

    @Test func rangesAsSafariAndAVPlayerSendThem() async throws {
        try await self.withObject { harness, key, mp4 in
            let size = mp4.count
            func get(_ range: String) async throws -> Reply {
                try await harness.request(.GET, "/media/\(key).mp4", headers: [("Range", range)])
            }
            // The probe Safari sends first.
            var reply = try await get("bytes=0-1")
            #expect(reply.status == 206)
            #expect(reply.body == Array(mp4[0...1]))
            #expect(reply.headers.first(name: "Content-Range") == "bytes 0-1/\(size)")
            #expect(reply.headers.first(name: "Content-Length") == "2")

            reply = try await get("bytes=100-")
            #expect(reply.status == 206)
            #expect(reply.body == Array(mp4[100...]))
            #expect(reply.headers.first(name: "Content-Range") == "bytes 100-\(size - 1)/\(size)")

            // A suffix range is the *last* n bytes.
            reply = try await get("bytes=-500")
            #expect(reply.status == 206)
            #expect(reply.body == Array(mp4[(size - 500)...]))
            #expect(reply.headers.first(name: "Content-Range") == "bytes \(size - 500)-\(size - 1)/\(size)")

            reply = try await get("bytes=10-\(size * 2)")
            #expect(reply.status == 206)
            #expect(reply.body == Array(mp4[10...]))

            reply = try await get("bytes=\(size)-")
            #expect(reply.status == 416)
            #expect(reply.headers.first(name: "Content-Range") == "bytes */\(size)")
            #expect(reply.body.isEmpty)

            for malformed in ["bytes=5-2", "bytes=x-", "pages=1-2", "bytes=0-1,4-5"] {
                reply = try await get(malformed)
                #expect(reply.status == 200, "\(malformed)")
                #expect(reply.body == mp4)
            }

            // If-Range with the current ETag honours the range; with another validator, the whole file: also
            // the tag of another encoding of the same key (or the digest-less tag objects once had), so pieces of
            // two files are never spliced.
            reply = try await harness.request(
                .GET, "/media/\(key).mp4",
                headers: [("Range", "bytes=0-9"), ("If-Range", Self.etag(key, "mp4", of: mp4))])
            #expect(reply.status == 206)
            for other in ["\"\(key).mp4\"", Self.etag(key, "mp4", of: mp4 + [0])] {
                reply = try await harness.request(
                    .GET, "/media/\(key).mp4", headers: [("Range", "bytes=0-9"), ("If-Range", other)])
                #expect(reply.status == 200, "\(other)")
                #expect(reply.body == mp4)
            }
            reply = try await harness.request(
                .GET, "/media/\(key).mp4", headers: [("Range", "bytes=0-9"), ("If-Range", "\"other\"")])
            #expect(reply.status == 200)
        }
    }

    @Test func conditionalAndHead() async throws {
        try await self.withObject { harness, key, mp4 in
            var reply = try await harness.request(
                .GET, "/media/\(key).mp4", headers: [("If-None-Match", Self.etag(key, "mp4", of: mp4))])
            #expect(reply.status == 304)
            #expect(reply.body.isEmpty)
            reply = try await harness.request(
                .GET, "/media/\(key).mp4", headers: [("If-None-Match", "W/\"x\", " + Self.etag(key, "mp4", of: mp4))])
            #expect(reply.status == 304)
            reply = try await harness.request(.GET, "/media/\(key).mp4", headers: [("If-None-Match", "\"other\"")])
            #expect(reply.status == 200)
            reply = try await harness.request(.HEAD, "/media/\(key).mp4")
            #expect(reply.status == 200)
            #expect(reply.body.isEmpty)
            #expect(reply.headers.first(name: "Content-Length") == String(mp4.count))
            reply = try await harness.request(.HEAD, "/media/\(key).mp4", headers: [("Range", "bytes=-100")])
            #expect(reply.status == 206)
            #expect(reply.headers.first(name: "Content-Length") == "100")
        }
    }

    @Test func keysAreValidatedBeforeTheDiskIsTouched() async throws {
        try await self.withObject { harness, key, _ in
            for path in [
                "/media/\(key.rawValue.uppercased()).mp4", "/media/\(key.rawValue.dropLast()).mp4",
                "/media/\(key)0.mp4",
                "/media/\(key).gif", "/media/\(key).mp4.json", "/media/..%2F..%2Fetc%2Fpasswd",
                "/media/%2e%2e/urls", "/media/\(String(repeating: "0", count: 64)).mp4", "/media/\(key)",
            ] {
                let reply = try await harness.request(.GET, path)
                #expect(reply.status == 404, "\(path)")
                #expect(reply.errorCode == "not-found", "\(path)")
            }
        }
    }
}
