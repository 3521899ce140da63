import AsyncHTTPClient
import Foundation
import Synchronization
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The S3 result store against a real SeaweedFS started by each test on free loopback ports.
@Suite(.serialized, .tags(.integration, .objectStore), .timeLimit(.minutes(10))) struct S3StoreTests {
    /// - Parameter tombstoneCheckSeconds: 0 to ask the store on every hit (a takedown elsewhere is seen at once).
    static func configure(
        _ store: SeaweedFS, serve: StorageConfiguration.Serve = .local, tombstoneCheckSeconds: Double = 10
    ) -> (inout ServerConfiguration) -> Void {
        { configuration in
            configuration.storage.kind = .s3
            configuration.storage.s3 = store.configuration()
            configuration.storage.serve = serve
            configuration.storage.tombstoneCheckSeconds = tombstoneCheckSeconds
        }
    }

    @Test func theS3StoreKeepsTheContract() async throws {
        try await withSeaweedFS { store in
            try await withTemporaryDirectory { scratch in
                let s3 = S3ResultStore(client: S3Client(configuration: store.configuration()))
                try await ResultStoreContract.roundTrip(s3, scratch: scratch)
                try await ResultStoreContract.extrasRoundTrip(s3, scratch: scratch)
            }
        }
    }

    /// The client itself: ranges, HEAD, DELETE, a missing key, a bad signature, a presigned URL.
    @Test func theClientSpeaksS3() async throws {
        try await withSeaweedFS { store in
            let client = S3Client(configuration: store.configuration())
            let bytes = Array((0..<1000).map { UInt8($0 % 251) })
            try await client.put("dir/a file.bin", bytes, contentType: "application/octet-stream")
            #expect(try await client.head("dir/a file.bin") == 1000)
            let whole = try #require(try await client.get("dir/a file.bin"))
            #expect(whole.bytes == bytes)
            let range = try #require(try await client.get("dir/a file.bin", range: 10...19))
            #expect(range.bytes == Array(bytes[10...19]))
            #expect(range.totalSize == 1000)
            #expect(try await client.get("dir/missing") == nil)
            #expect(try await client.head("dir/missing") == nil)

            // A presigned URL needs no credentials.
            let url = client.presignedURL("dir/a file.bin", expiresSeconds: 300)
            let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
            #expect(response.status == .ok)
            #expect(Array(buffer: try await response.body.collect(upTo: 1 << 20)) == bytes)

            try await client.delete("dir/a file.bin")
            #expect(try await client.get("dir/a file.bin") == nil)

            var wrong = store.configuration()
            wrong.secretKey = "not-the-secret"
            let error = await #expect(throws: S3Error.self) {
                _ = try await S3Client(configuration: wrong).get("dir/anything")
            }
            #expect(error?.status == 403)
            #expect(error?.code == "SignatureDoesNotMatch" || error?.code == "AccessDenied")
            #expect(error?.isUnavailable == false)

            var noBucket = store.configuration()
            noBucket.bucket = "no-such-bucket"
            let missingBucket = await #expect(throws: S3Error.self) {
                _ = try await S3Client(configuration: noBucket).get("x")
            }
            #expect(missingBucket?.code == "NoSuchBucket")
        }
    }

    /// Files go up and come down a block at a time (`S3Client.blockBytes`), whole; a missing object leaves no file.
    /// An object whose file disagrees with its manifest is refused going up, and is a miss coming down that leaves
    /// nothing in the directory.
    @Test func filesGoUpAndComeDownInBlocks() async throws {
        try await withSeaweedFS { store in
            try await withTemporaryDirectory { scratch in
                let client = S3Client(configuration: store.configuration())
                // Three blocks and a short one.
                let bytes = (0..<(3 * S3Client.blockBytes + 1234)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
                let up = scratch + "/up.bin"
                #expect(FileManager.default.createFile(atPath: up, contents: Data(bytes)))
                let digest = try #require(try await StoredFile.sha256(ofFile: up))
                try await client.put(
                    "big/up.bin", file: up, size: bytes.count, sha256: digest, contentType: "application/octet-stream")
                #expect(try await client.head("big/up.bin") == bytes.count)
                // Said to have another digest: its last block is never sent, and nothing is stored (SeaweedFS does
                // not check the signed digest itself; AWS S3 does). A fault of the sender's file, not the store's.
                await #expect(throws: ObjectFilesDisagree.self) {
                    try await client.put(
                        "big/wrong.bin", file: up, size: bytes.count, sha256: String(repeating: "0", count: 64),
                        contentType: "application/octet-stream")
                }
                #expect(try await client.head("big/wrong.bin") == nil)
                #expect(try await client.get("big/up.bin")?.bytes == bytes)
                let down = scratch + "/down.bin"
                #expect(try await client.download("big/up.bin", to: down) == bytes.count)
                #expect(FileManager.default.contents(atPath: down) == Data(bytes))
                #expect(try await client.download("big/missing", to: scratch + "/none.bin") == nil)
                #expect(
                    try FileManager.default.contentsOfDirectory(atPath: scratch).sorted() == ["down.bin", "up.bin"])

                // The digest of a real video agrees with the transcoder's own (libavutil's SHA-256).
                let made = scratch + "/made"
                let back = scratch + "/back"
                for directory in [made, back] {
                    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                }
                let (key, metadata) = try ResultStoreContract.makeObject(in: made)
                #expect(try await StoredFile.sha256(ofFile: "\(made)/\(key).mp4") == metadata.mp4Sha256)
                let s3 = S3ResultStore(client: client)
                try await s3.putObject(key, from: made)
                #expect(try await s3.getObject(key, into: back) == metadata)
                for name in try FileManager.default.contentsOfDirectory(atPath: back) {
                    try FileManager.default.removeItem(atPath: "\(back)/\(name)")
                }

                // Mangled in the store (same size, other bytes): a miss, and nothing left behind.
                let video = try #require(FileManager.default.contents(atPath: "\(made)/\(key).mp4"))
                try await client.put(
                    S3ResultStore.objectName(key, "mp4"), [UInt8](video.reversed()), contentType: "video/mp4")
                #expect(try await s3.getObject(key, into: back) == nil)
                #expect(try FileManager.default.contentsOfDirectory(atPath: back) == [])

                // Cut short on disk: not uploaded.
                let handle = try #require(FileHandle(forWritingAtPath: "\(made)/\(key).mp4"))
                try handle.truncate(atOffset: UInt64(video.count / 2))
                try handle.close()
                await #expect(throws: ObjectFilesDisagree.self) { try await s3.putObject(key, from: made) }
            }
        }
    }

    /// An object converted here whose publish failed, and whose video was then damaged on this disk (the right size,
    /// other bytes: a hit's checks do not see it): the next request's publish finds the damage, sets the object aside
    /// (`quarantine/`) and converts it again, and the fleet gets the good video. It used to fail that publish, and
    /// answer 500, on every request.
    @Test func aDamagedUnpublishedObjectIsSetAsideAndConvertedAgain() async throws {
        try await withSeaweedFS { store in
            let s3 = S3ResultStore(client: S3Client(configuration: store.configuration()))
            try await withHarness(sharedStore: FailingPuts(s3, failures: 1)) { harness in
                let gif = try corpusBytes("loop_1.gif")
                let key = ObjectKey.derive(source: gif, options: TranscodeOptions()).key
                let first = try await harness.upload(gif)
                #expect(first.errorCode == "storage-unavailable")
                let objects = harness.services.cache.objects
                let path = objects.objectPath(key, ObjectFiles.video)
                let video = try #require(FileManager.default.contents(atPath: path))
                try Data(video.reversed()).write(to: URL(fileURLWithPath: path))

                let second = try await harness.upload(gif)
                #expect(second.status == 200, "\(second.text)")
                #expect(harness.services.transcodes.counters.transcodes == 2)
                let quarantined = try FileManager.default.contentsOfDirectory(atPath: objects.quarantineDirectory)
                #expect(quarantined.contains { $0.hasPrefix("\(key).mp4.") }, "\(quarantined)")
                let metrics = try await harness.request(.GET, "/metrics").text
                #expect(metrics.contains("transcode_cache_quarantined_total 1"))
                // The fleet has the video converted again, not the damaged one.
                try await withTemporaryDirectory { back in
                    let fetched = try await s3.getObject(key, into: back)
                    #expect(fetched != nil)
                    let stored = FileManager.default.contents(atPath: "\(back)/\(key).mp4")
                    #expect(stored == FileManager.default.contents(atPath: path))
                    #expect(stored != Data(video.reversed()))
                }
                // Served from the good copy from now on, with no further conversion.
                let third = try await harness.upload(gif)
                #expect(third.status == 200)
                #expect(harness.services.transcodes.counters.transcodes == 2)
            }
        }
    }

    /// A node with an empty disk, after the store itself restarted, finds what another node converted: no
    /// download, no transcode; the object is served from its own disk afterwards.
    @Test func aRestartFindsResults() async throws {
        try await withSeaweedFS { store in
            let origin = Origin()
            try await withHarness(origin: origin, configure: Self.configure(store)) { first in
                let url = first.originURL("/corpus/cartoon_hotdog.gif")
                let reply = try await first.transcode(url: url)
                #expect(reply.status == 200)
                let key = try #require(try reply.json()["key"] as? String)
                #expect(first.services.transcodes.counters.storage["publish"] == 1)
                store.stop()
                try await store.start()
                try await withHarness(origin: origin, configure: Self.configure(store)) { second in
                    let found = try await second.transcode(url: url)
                    #expect(found.status == 200)
                    #expect(try found.json()["key"] as? String == key)
                    let media = try await second.request(
                        .GET, "/media/\(key).mp4", headers: [("Range", "bytes=0-99")])
                    #expect(media.status == 206)
                    #expect(media.body.count == 100)
                    let counters = second.services.transcodes.counters
                    #expect(counters.transcodes == 0)
                    #expect(counters.downloads == 0)
                    #expect(counters.storage["pull"] == 1)
                }
            }
            #expect(origin.count("/corpus/cartoon_hotdog.gif") == 1)
        }
    }

    /// Two nodes, two disks, one bucket: each serves what the other converted, by URL, by upload and by
    /// `/media` key (pulled, or redirected to a presigned URL); a takedown on one is obeyed by the other.
    @Test func twoNodesShareOneBucket() async throws {
        try await withSeaweedFS { store in
            let origin = Origin()
            try await withHarness(origin: origin, configure: Self.configure(store)) { first in
                try await withHarness(
                    origin: origin, configure: Self.configure(store, serve: .redirect, tombstoneCheckSeconds: 0)
                ) { second in
                    let url = first.originURL("/corpus/loop_1.gif")
                    let made = try await first.transcode(url: url)
                    #expect(made.status == 200)
                    let key = try #require(try made.json()["key"] as? String)

                    let found = try await second.transcode(url: url)
                    #expect(found.status == 200)
                    #expect(try found.json()["key"] as? String == key)
                    #expect(second.services.transcodes.counters.transcodes == 0)
                    #expect(origin.count("/corpus/loop_1.gif") == 1)

                    // Bytes another node converted: found by content key.
                    let other = try corpusBytes("cartoon_hotdog.gif")
                    let uploaded = try await first.upload(other)
                    let otherKey = try #require(try uploaded.json()["key"] as? String)
                    let again = try await second.upload(other)
                    #expect(again.status == 200)
                    #expect(try again.json()["key"] as? String == otherKey)
                    #expect(second.services.transcodes.counters.transcodes == 0)

                    // /media of an object the second node's disk lacks: redirected to the store.
                    let fresh = try await first.upload(try corpusBytes("loop_3_libgd.gif"))
                    let freshKey = try #require(try fresh.json()["key"] as? String)
                    let redirect = try await second.request(.GET, "/media/\(freshKey).mp4")
                    #expect(redirect.status == 302)
                    let location = try #require(redirect.headers.first(name: "Location"))
                    let direct = try await HTTPClient.shared.execute(
                        HTTPClientRequest(url: location), timeout: .seconds(10))
                    #expect(direct.status == .ok)
                    let local = try await first.request(.GET, "/media/\(freshKey).mp4")
                    #expect(Array(buffer: try await direct.body.collect(upTo: 1 << 24)) == local.body)
                    // The first node (pull mode) serves what the second made, from its disk after one pull.
                    let third = try await second.upload(try corpusBytes("loop_0_infinite.gif"))
                    let thirdKey = try #require(try third.json()["key"] as? String)
                    let pulled = try await first.request(.GET, "/media/\(thirdKey).jpg")
                    #expect(pulled.status == 200)
                    #expect(pulled.headers.first(name: "Content-Type") == "image/jpeg")

                    // A takedown on the first node: the second (trusting no earlier answer) refuses the bytes and
                    // the key.
                    let purge = try await first.request(.DELETE, "/v1/objects/\(otherKey)?takedown=true&reason=test")
                    #expect(purge.status == 200)
                    let refused = try await second.upload(other)
                    #expect(refused.status == 451)
                    let gone = try await second.request(.GET, "/media/\(otherKey).mp4")
                    #expect(gone.status == 451)
                    #expect(gone.errorCode == "taken-down")
                }
            }
        }
    }

    /// The store goes down: requests that need it answer 503 `storage-unavailable` (the server keeps
    /// serving, nothing partial is left in the store or on disk), and work again once it is back.
    @Test(.tags(.wallClock)) func anOutageAnswers503() async throws {
        try await withSeaweedFS { store in
            try await withHarness(configure: Self.configure(store)) { harness in
                let warm = try await harness.upload(try corpusBytes("loop_1.gif"))
                #expect(warm.status == 200)
                let warmKey = try #require(try warm.json()["key"] as? String)
                store.stop()

                let gif = try corpusBytes("cartoon_hotdog.gif")
                let key = ObjectKey.derive(source: gif, options: harness.services.configuration.transcode.options).key
                let reply = try await harness.upload(gif)
                #expect(reply.status == 503)
                #expect(reply.errorCode == "storage-unavailable")
                #expect(reply.headers.first(name: "Retry-After") != nil)
                let byURL = try await harness.transcode(url: harness.originURL("/corpus/loop_3_libgd.gif"))
                #expect(byURL.status == 503)
                #expect(byURL.errorCode == "storage-unavailable")
                // What this node has on disk is still served; the process answers.
                #expect(try await harness.request(.GET, "/media/\(warmKey).mp4").status == 200)
                #expect(try await harness.request(.GET, "/healthz").status == 200)
                #expect(!harness.services.cache.objects.contains(key))

                try await store.start()
                let client = S3Client(configuration: store.configuration())
                #expect(try await client.head(S3ResultStore.objectName(key, "json")) == nil)
                // A node that could not reach the store leaves it alone for a moment (its 503s carry
                // Retry-After), so the client retries as told until the store is used again.
                var retried = try await harness.upload(gif)
                let deadline = ContinuousClock.now + .seconds(30)
                while retried.status == 503, retried.errorCode == "storage-unavailable", ContinuousClock.now < deadline
                {
                    try await Task.sleep(for: .milliseconds(500))
                    retried = try await harness.upload(gif)
                }
                #expect(retried.status == 200)
                #expect(try await client.head(S3ResultStore.objectName(key, "json")) != nil)
            }
        }
    }
}
