import Foundation
import NIOCore
import Synchronization
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct CacheTests {
    @Test func aRestartFindsTheCacheWarm() async throws {
        try await withTemporaryDirectory { directory in
            let cache = directory + "/cache"
            let origin = Origin()
            let key = Mutex<String?>(nil)
            try await withHarness(cacheDirectory: cache, origin: origin) { harness in
                let reply = try await harness.transcode(url: harness.originURL("/corpus/cartoon_hotdog.gif"))
                #expect(reply.status == 200)
                key.withLock { $0 = try? reply.json()["key"] as? String }
            }
            try await withHarness(cacheDirectory: cache, origin: origin) { harness in
                // The origin runs on a new port: a new URL, but the same bytes, so the object is found.
                let upload = try await harness.upload(try corpusBytes("cartoon_hotdog.gif"))
                #expect(upload.headers.first(name: "X-Cache") == "hit")
                #expect(try upload.json()["key"] as? String == key.withLock { $0 })
                let media = try await harness.request(.GET, "/media/\(key.withLock { $0 } ?? "").mp4")
                #expect(media.status == 200)
                #expect(harness.services.transcodes.counters.transcodes == 0)
            }
        }
    }

    /// An object's last use is written to disk (its JSON's modification time, where eviction order starts
    /// after a restart) at most once a minute, also for an object used more often than that (it was
    /// measured from the previous use, so a hot object was never written). A hit answered from memory, on
    /// an event loop, never writes it: when it is due, the hit is left to the long way, which writes it.
    @Test func lastUseIsWrittenOnceAMinuteAndNeverFromMemory() async throws {
        try await withTemporaryDirectory { directory in
            let start = Date(timeIntervalSince1970: 1_000_000)
            let clock = Mutex(start)
            let cache = try DiskCache(root: directory, maxBytes: 1 << 30, now: { clock.withLock { $0 } })
            let gif = try corpusBytes("loop_1.gif")
            let key = ObjectKey.derive(source: gif, options: TranscodeOptions()).key
            try Self.render(gif, as: key, into: cache)
            func written() throws -> TimeInterval {
                let attributes = try FileManager.default.attributesOfItem(atPath: cache.objects.objectPath(key, "json"))
                return try #require(attributes[.modificationDate] as? Date).timeIntervalSince(start)
            }
            func advance(_ seconds: TimeInterval) { clock.withLock { $0 += seconds } }

            // Kept in memory the way the /media route keeps what it reads.
            let checked = try #require(try cache.objects.verifiedObject(key))
            let poster = try #require(checked.file("jpg"))
            var bytes = ByteBuffer()
            bytes.writeWithUnsafeMutableBytes(minimumWritableBytes: poster.size) {
                max(0, pread(poster.descriptor, $0.baseAddress, poster.size, 0))
            }
            cache.objects.keepBytes(bytes, of: poster, key: key, fileExtension: "jpg")
            #expect(cache.objects.memoryHit(key, fileExtension: "jpg") != nil)

            // Used every 30 s: not written at 30 and 60 s, written at 90 s (60 s after the store).
            let before = try written()
            for _ in 0..<2 {
                advance(30)
                #expect(cache.objects.memoryHit(key, fileExtension: "jpg") != nil)
            }
            #expect(try written() == before)
            advance(30)
            #expect(cache.objects.memoryHit(key, fileExtension: "jpg") == nil, "due: left to the long way")
            #expect(try written() == before)
            _ = try #require(try cache.objects.verifiedObject(key))
            #expect(abs(try written() - 90) < 1)
            // Its new modification time makes the JSON another file to a memory hit (it is read again once).
            advance(30)
            #expect(cache.objects.memoryHit(key, fileExtension: "jpg") == nil)
            _ = try #require(try cache.objects.verifiedObject(key))
            #expect(abs(try written() - 90) < 1)
            #expect(cache.objects.memoryHit(key, fileExtension: "jpg") != nil)
        }
    }

    /// Tombstones are looked up in the directory's names as last read while it is unchanged, and every change
    /// to it (this cache's takedowns, a file put there or removed by another process) is seen at once.
    @Test func tombstonesAreSeenAtOnceFromEitherSide() async throws {
        try await withTemporaryDirectory { directory in
            // The clock the directory's times are read against: 10 s behind (no change is ever settled) where the
            // test checks what is read at once, 3 s ahead where it would wait for the directory to settle.
            let ahead = Mutex(-10.0)
            let cache = try DiskCache(
                root: directory, maxBytes: 1 << 30, fileSystemClock: { Date() + ahead.withLock { $0 } })
            let (first, second) = (
                ObjectKey(String(repeating: "a", count: 64))!, ObjectKey(String(repeating: "b", count: 64))!
            )
            // A directory changed in the last two seconds is not read: its times cannot tell a change yet.
            #expect(!cache.tombstones.isBuried(.object(first)))
            #expect(cache.tombstones.lastRead.withLock { $0 == nil })
            ahead.withLock { $0 = 3 }
            #expect(!cache.tombstones.isBuried(.object(first)))
            #expect(cache.tombstones.lastRead.withLock { $0?.names.isEmpty == true }, "the settled directory was read")
            // Back behind; and the next change must not fall in the settled read's clock tick (kernels before 6.13
            // stamp directories with a coarse clock, and a change in the same tick would leave the stamp as it was).
            // In the server the two seconds see to both.
            ahead.withLock { $0 = -10 }
            try await Task.sleep(for: .milliseconds(20))

            try cache.tombstones.bury([.object(first)], reason: "test")
            #expect(cache.tombstones.isBuried(.object(first)))
            #expect(!cache.tombstones.isBuried(.object(second)))
            // Another process: a file put there, then removed.
            let path =
                cache.tombstones.directory + "/" + Tombstone.gif(ContentDigest(second.rawValue)!).fileName
            #expect(FileManager.default.createFile(atPath: path, contents: Data("{}".utf8)))
            #expect(cache.tombstones.isBuried(.object(second), .gif(ContentDigest(second.rawValue)!)))
            #expect(cache.tombstones.lastRead.withLock { $0?.names.isEmpty == true }, "read while unsettled")
            ahead.withLock { $0 = 3 }
            #expect(cache.tombstones.isBuried(.gif(ContentDigest(second.rawValue)!)))
            #expect(cache.tombstones.lastRead.withLock { $0?.names.count == 2 })
            ahead.withLock { $0 = -10 }
            try await Task.sleep(for: .milliseconds(20))
            try FileManager.default.removeItem(atPath: path)
            #expect(!cache.tombstones.isBuried(.gif(ContentDigest(second.rawValue)!)))
            #expect(cache.tombstones.isBuried(.object(first)))
        }
    }

    /// A URL link's target is read once per link: relinking the URL (a new link) or renewing it is seen by
    /// the very next look.
    @Test func aRelinkedURLIsSeenAtOnce() async throws {
        try await withTemporaryDirectory { directory in
            let cache = try DiskCache(root: directory, maxBytes: 1 << 30)
            let keys = try Self.store(["loop_1.gif", "cartoon_hotdog.gif"], in: cache)
            let urlKey = URLKey(
                NormalizedURL(URL(string: "https://example.com/a.gif")!),
                options: TranscodeOptions())
            try cache.links.link(urlKey: urlKey, to: keys[0])
            #expect(cache.links.freshLink(urlKey: urlKey)?.key == keys[0])
            #expect(cache.links.freshLink(urlKey: urlKey)?.key == keys[0])
            try cache.links.link(urlKey: urlKey, to: keys[1])
            #expect(cache.links.freshLink(urlKey: urlKey)?.key == keys[1])
            cache.links.renewLink(urlKey: urlKey, age: 500)
            let renewed = try #require(cache.links.freshLink(urlKey: urlKey))
            #expect(renewed.key == keys[1] && abs(renewed.age - 500) < 5)
            cache.links.removeLink(urlKey: urlKey)
            #expect(cache.links.freshLink(urlKey: urlKey) == nil)
        }
    }

    /// Converts these corpus GIFs into `cache` with the default options; their keys.
    /// Converts `gif` and commits it as object `key`, as the service does (render under tmp/, then commit).
    static func render(_ gif: [UInt8], as key: ObjectKey, into cache: DiskCache) throws {
        let scratch = try cache.objects.makeScratchDirectory("test")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        try cache.objects.commit(key, try Transcoder().render(gif, into: scratch, name: key.rawValue))
    }

    static func store(_ names: [String], in cache: DiskCache) throws -> [ObjectKey] {
        try names.map { name in
            let gif = try corpusBytes(name)
            let key = ObjectKey.derive(source: gif, options: TranscodeOptions()).key
            try Self.render(gif, as: key, into: cache)
            return key
        }
    }

    @Test func aRestartKeepsURLLinks() async throws {
        try await withTemporaryDirectory { directory in
            let cache = try DiskCache(root: directory, maxBytes: 1 << 30)
            let gif = try corpusBytes("loop_1.gif")
            let key = ObjectKey.derive(source: gif, options: TranscodeOptions()).key
            try Self.render(gif, as: key, into: cache)
            let url = URL(string: "https://Example.com:443/a/loop.gif#frag")!
            let urlKey = URLKey(NormalizedURL(url), options: TranscodeOptions())
            try cache.links.link(urlKey: urlKey, to: key)
            let reopened = try DiskCache(root: directory, maxBytes: 1 << 30)
            #expect(reopened.lookup(urlKey: urlKey) == key)
            let same = URLKey(
                NormalizedURL(URL(string: "https://example.com/a/loop.gif")!),
                options: TranscodeOptions())
            #expect(same == urlKey)
            let target = try FileManager.default.destinationOfSymbolicLink(
                atPath: directory + "/urls/" + urlKey.rawValue)
            #expect(target == "../objects/\(key.shard)/\(key).json")
        }
    }

    /// What a killed process leaves behind is swept at startup, and never served.
    @Test func leftoversOfAKilledProcessAreIgnored() async throws {
        try await withTemporaryDirectory { directory in
            let cache = directory + "/cache"
            let fileManager = FileManager.default
            let orphan = String(repeating: "ab", count: 32)
            let dangling = URLKey(String(repeating: "cd", count: 32))!
            let malformed = URLKey(String(repeating: "ef", count: 32))!
            try fileManager.createDirectory(atPath: cache + "/objects/ab", withIntermediateDirectories: true)
            try fileManager.createDirectory(atPath: cache + "/urls", withIntermediateDirectories: true)
            try fileManager.createDirectory(atPath: cache + "/tmp", withIntermediateDirectories: true)
            // A download in progress, half-written outputs, an object without its JSON, broken links.
            _ = fileManager.createFile(atPath: cache + "/tmp/download-1.part", contents: Data([0x47]))
            _ = fileManager.createFile(atPath: cache + "/objects/ab/.\(orphan).mp4.tmp-1f", contents: Data([0]))
            _ = fileManager.createFile(atPath: cache + "/objects/ab/\(orphan).mp4", contents: Data([0, 0, 0]))
            _ = fileManager.createFile(atPath: cache + "/objects/ab/\(orphan).jpg", contents: Data([0]))
            try fileManager.createSymbolicLink(
                atPath: cache + "/urls/\(dangling)", withDestinationPath: "../objects/ab/\(orphan).json")
            try fileManager.createSymbolicLink(atPath: cache + "/urls/\(malformed)", withDestinationPath: "/etc/passwd")
            try fileManager.createSymbolicLink(
                atPath: cache + "/urls/.\(dangling).tmp-2", withDestinationPath: "../objects/ab/\(orphan).json")

            try await withHarness(cacheDirectory: cache) { harness in
                let swept = harness.services.cache
                #expect(try fileManager.contentsOfDirectory(atPath: swept.objects.temporaryDirectory).isEmpty)
                #expect(try fileManager.contentsOfDirectory(atPath: cache + "/objects/ab").isEmpty)
                #expect(
                    !(try fileManager.contentsOfDirectory(atPath: cache + "/urls").contains { $0.contains(".tmp-") }))
                #expect(swept.lookup(urlKey: dangling) == nil)
                #expect(swept.lookup(urlKey: malformed) == nil)
                #expect(try await harness.request(.GET, "/media/\(orphan).mp4").status == 404)
                #expect(try await harness.request(.GET, "/jobs/\(dangling)").status == 404)
                let reply = try await harness.transcode(url: harness.originURL("/corpus/loop_1.gif"))
                #expect(reply.status == 200)
            }
        }
    }

    @Test func leastRecentlyUsedObjectsAreEvictedButNotWhileServed() throws {
        try withTemporaryDirectorySync { directory in
            // A cap no object fits under: only the object just stored, and objects being served, stay.
            let cache = try DiskCache(root: directory, maxBytes: 1)
            func store(_ name: String) throws -> ObjectKey {
                let gif = try corpusBytes(name)
                let key = ObjectKey.derive(source: gif, options: TranscodeOptions()).key
                try Self.render(gif, as: key, into: cache)
                return key
            }
            let first = try store("loop_1.gif")
            #expect(cache.objects.contains(first))
            let second = try store("loop_256.gif")
            #expect(!cache.objects.contains(first), "the least recently used object goes")
            #expect(!FileManager.default.fileExists(atPath: cache.objects.objectPath(first, "mp4")))
            #expect(cache.objects.contains(second))
            #expect(cache.objects.usage.evictions == 1)

            #expect(cache.objects.beginServing(second))
            let third = try store("loop_none_no_netscape.gif")
            #expect(cache.objects.contains(second), "an object being served stays")
            #expect(cache.objects.contains(third))
            cache.objects.endServing(second)
            let fourth = try store("loop_0_infinite.gif")
            #expect(!cache.objects.contains(second))
            #expect(!cache.objects.contains(third))
            #expect(cache.objects.contains(fourth))
            #expect(cache.objects.usage.evictions == 3)
        }
    }

    @Test(arguments: [
        (String(repeating: "a", count: 64), true), (String(repeating: "A", count: 64), false),
        (String(repeating: "a", count: 63), false), (String(repeating: "g", count: 64), false),
        ("../" + String(repeating: "a", count: 61), false), ("", false),
    ])
    func keyShape(text: String, valid: Bool) {
        #expect((ObjectKey(text) != nil) == valid)
    }
}
