import ArgumentParser
import Foundation
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// Only what the cache wrote is served: an object file replaced by a symbolic link or a hard link, or cut
/// short, is never sent; the object is moved to `quarantine/` and the next request converts it again.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct CacheIntegrityTests {
    enum Tampering: String, CaseIterable, CustomTestStringConvertible {
        case videoSymlink, metadataSymlink, videoHardLink, videoTruncated, posterTruncated, shardSymlink
        var testDescription: String { self.rawValue }
    }

    @Test(arguments: Tampering.allCases)
    func tamperedObjectsAreNotServedAndAreRebuilt(_ tampering: Tampering) async throws {
        try await withHarness { harness in
            let url = harness.originURL("/corpus/cartoon_dancing_banana.gif")
            let first = try await harness.transcode(url: url)
            #expect(first.status == 200)
            let json = try first.json()
            let key = try #require(ObjectKey(json["key"] as? String ?? ""))
            let mp4Bytes = try #require(json["mp4Bytes"] as? Int)
            let cache = harness.services.cache
            let secret = cache.root + "/../secret-\(UUID().uuidString)"
            let secretText = "root:x:0:0:root:/root:/bin/bash\n"
            try secretText.write(toFile: secret, atomically: true, encoding: .utf8)
            defer { unlink(secret) }

            let video = cache.objects.objectPath(key, "mp4")
            let moved = cache.root + "/../moved-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: moved) }
            switch tampering {
            case .videoSymlink:
                unlink(video)
                #expect(symlink(secret, video) == 0)
            case .metadataSymlink:
                let metadata = cache.objects.objectPath(key, "json")
                let copy = secret + ".json"
                try FileManager.default.copyItem(atPath: metadata, toPath: copy)
                unlink(metadata)
                #expect(symlink(copy, metadata) == 0)
            case .videoHardLink:
                #expect(link(video, secret + ".mp4") == 0)
            case .videoTruncated:
                #expect(truncate(video, 1000) == 0)
            case .posterTruncated:
                #expect(truncate(cache.objects.objectPath(key, "jpg"), 10) == 0)
            case .shardSymlink:
                // The whole shard directory swapped for a link to a copy elsewhere.
                let shard = cache.objects.directory + "/" + key.shard
                #expect(rename(shard, moved) == 0)
                #expect(symlink(moved, shard) == 0)
            }
            defer {
                unlink(secret + ".mp4")
                unlink(secret + ".json")
            }

            for ext in ["mp4", "jpg", "json"] {
                let reply = try await harness.request(.GET, "/media/\(key).\(ext)")
                #expect(reply.status == 404, "\(tampering) \(ext): \(reply.status)")
                #expect(!reply.text.contains("root:x:0:0"))
            }
            // Set aside for inspection, out of the objects.
            let quarantined = try FileManager.default.contentsOfDirectory(atPath: cache.objects.quarantineDirectory)
            if tampering != .shardSymlink {
                #expect(quarantined.contains { $0.hasPrefix("\(key).json.") }, "\(quarantined)")
            } else {
                // The link itself is set aside, not followed: what it pointed at, outside the cache, is untouched.
                #expect(quarantined.contains { $0.hasPrefix("shard-\(key.shard).") }, "\(quarantined)")
                #expect(FileManager.default.fileExists(atPath: moved + "/\(key).json"))
                var info = stat()
                #expect(lstat(cache.objects.directory + "/" + key.shard, &info) != 0, "the link is still in place")
            }

            // The next request is a miss that converts again (into a fresh shard directory after a link), and the
            // result is served whole (issue 56: a shard replaced by a link left its objects 404 for good).
            let again = try await harness.transcode(url: url)
            #expect(again.status == 200)
            #expect(again.headers.first(name: "X-Cache") == "miss", "\(tampering)")
            // Served whole: as many bytes as the rebuilt object's metadata says. (Once, under a loaded full run,
            // the rebuilt MP4 was 5 bytes longer than the first one: not explained yet, so not asserted.)
            let rebuiltBytes = try #require(try again.json()["mp4Bytes"] as? Int)
            #expect(abs(rebuiltBytes - mp4Bytes) < mp4Bytes / 10, "\(rebuiltBytes) vs \(mp4Bytes)")
            let served = try await harness.request(.GET, "/media/\(key).mp4")
            #expect(served.status == 200)
            #expect(served.body.count == rebuiltBytes)
            #expect(Array(served.body[4..<8]) == Array("ftyp".utf8))
        }
    }

    /// A cache indexed at startup skips files that are not regular: a link planted while the service was
    /// down is not counted, and not served.
    @Test func startupIndexingSkipsLinks() async throws {
        try await withTemporaryDirectory { directory in
            let cache = try DiskCache(root: directory, maxBytes: 1 << 30)
            let key = ObjectKey(String(repeating: "ab", count: 32))!
            let shard = cache.objects.directory + "/ab"
            try FileManager.default.createDirectory(atPath: shard, withIntermediateDirectories: true)
            #expect(symlink("/etc/hostname", shard + "/\(key).json") == 0)
            #expect(symlink("/etc/hostname", shard + "/\(key).mp4") == 0)
            let reopened = try DiskCache(root: directory, maxBytes: 1 << 30)
            #expect(reopened.objects.usage.objects == 0)
            #expect(try reopened.objects.verifiedObject(key)?.file("mp4") == nil)

            // A shard that is a link to a directory elsewhere: neither indexed nor swept (its leftover-looking
            // file is not the cache's to remove), and set aside by the server.
            let elsewhere = directory + "/elsewhere"
            let other = ObjectKey(String(repeating: "cd", count: 32))!
            let stored = try CacheTests.store(["loop_1.gif"], in: reopened)
            try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
            for name in ["\(other).json", "\(other).mp4", "\(other).jpg", "x.tmp-1"] {
                #expect(FileManager.default.createFile(atPath: elsewhere + "/" + name, contents: Data("x".utf8)))
            }
            #expect(symlink(elsewhere, cache.objects.directory + "/cd") == 0)
            let reader = try DiskCache(root: directory, maxBytes: 1 << 30, cleanUp: false)
            #expect(reader.objects.indexedKeys == stored)
            let server = try DiskCache(root: directory, maxBytes: 1 << 30)
            #expect(server.objects.indexedKeys == stored)
            #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere).count == 4)
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: server.objects.quarantineDirectory).contains {
                    $0.hasPrefix("shard-cd.")
                })
        }
    }
}

/// `cache verify` finds what serving cannot see cheaply: a file changed without changing its size.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct CacheVerifyTests {
    @Test func verifyFindsSameSizeDamageAndRepairMovesItAside() async throws {
        try await withTemporaryDirectory { directory in
            let cache = try DiskCache(root: directory, maxBytes: 1 << 30)
            let keys = try CacheTests.store(["loop_1.gif", "cartoon_hotdog.gif"], in: cache)
            #expect(keys.map(cache.objects.verify) == [.sound, .sound])

            // A zeroed poster of the same size: serving's size check passes, the hash does not.
            let poster = cache.objects.objectPath(keys[0], "jpg")
            let size = try #require(FileManager.default.attributesOfItem(atPath: poster)[.size] as? Int)
            try Data(count: size).write(to: URL(fileURLWithPath: poster))
            #expect(cache.objects.verify(keys[0]) == .damaged("the .jpg's SHA-256 differs"))
            #expect(cache.objects.verify(keys[1]) == .sound)

            // The command, beside the cache: reports and fails, then repairs.
            let reader = try DiskCache(root: directory, maxBytes: .max, cleanUp: false)
            #expect(reader.objects.indexedKeys.sorted() == keys.sorted())
            let check = try CacheCommand.Verify.parse(["--cache-directory", directory])
            #expect(throws: ExitCode.failure) { try check.run() }
            let repair = try CacheCommand.Verify.parse(["--cache-directory", directory, "--repair"])
            try repair.run()
            try check.run()  // exit 0: nothing damaged is left
            #expect(!cache.objects.contains(keys[0]) && cache.objects.contains(keys[1]))
            let quarantined = try FileManager.default.contentsOfDirectory(atPath: directory + "/quarantine")
            #expect(quarantined.filter { $0.hasPrefix(keys[0].rawValue) }.count == 3, "\(quarantined)")
        }
    }
}
