import Foundation
import NIOCore
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// What every `ResultStore` must do, run against each implementation: the local disk here, S3 (SeaweedFS) in
/// `S3StoreTests`.
enum ResultStoreContract {
    /// A real object: `loop_1.gif` converted into `directory` (with `extras`, say `[.webp]`). - Returns: its key
    /// and metadata.
    static func makeObject(in directory: String, extras: [OutputFormat] = []) throws -> (
        key: ObjectKey, metadata: TranscodeMetadata
    ) {
        let gif = try corpusBytes("loop_1.gif")
        var options = TranscodeOptions()
        options.rendition = options.rendition.withExtraFormats(extras)
        let key = ObjectKey.derive(source: gif, options: options).key
        let metadata = try Transcoder(options: options).convert(gif, directory: directory, name: key.rawValue)
        return (key, metadata)
    }

    /// An object with an extra file (an animated WebP): the store keeps it with the rest, hands it back, serves
    /// its bytes at the size its manifest records, and deletes it with the object.
    static func extrasRoundTrip(_ store: any ResultStore, scratch: String) async throws {
        let made = scratch + "/made-extras"
        let back = scratch + "/back-extras"
        for directory in [made, back] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        let (key, metadata) = try self.makeObject(in: made, extras: [.webp])
        let webp = try #require(FileManager.default.contents(atPath: "\(made)/\(key).webp"))
        #expect(metadata.otherArtifacts.map(\.format) == ["webp"])
        try await store.putObject(key, from: made)
        #expect(try await store.getObject(key, into: back) == metadata)
        #expect(FileManager.default.contents(atPath: "\(back)/\(key).webp") == webp)
        let opened = try #require(try await store.openFile(key, .webp))
        #expect(opened.file.size == webp.count)
        #expect(Array(buffer: try await opened.file.read(at: 0, length: webp.count)) == Array(webp))
        #expect(try await store.deleteObject(key))
        #expect(try await store.openFile(key, .webp) == nil)
    }

    /// Put, get, delete of an object; links; tombstones. `scratch` is a directory on the local cache's file
    /// system for the files moved in and out.
    static func roundTrip(_ store: any ResultStore, scratch: String) async throws {
        let made = scratch + "/made"
        let back = scratch + "/back"
        for directory in [made, back] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        let (key, metadata) = try self.makeObject(in: made)
        let video = try #require(FileManager.default.contents(atPath: "\(made)/\(key).mp4"))
        #expect(try await store.metadata(key) == nil)
        #expect(try await store.getObject(key, into: back) == nil)
        #expect(!FileManager.default.fileExists(atPath: "\(back)/\(key).json"))

        try await store.putObject(key, from: made)
        #expect(try await store.metadata(key)?.mp4Sha256 == metadata.mp4Sha256)
        let fetched = try await store.getObject(key, into: back)
        #expect(fetched?.mp4Bytes == metadata.mp4Bytes)
        #expect(FileManager.default.contents(atPath: "\(back)/\(key).mp4") == video)
        #expect(FileManager.default.contents(atPath: "\(back)/\(key).jpg")?.count == metadata.posterBytes)

        // Opened for serving: the manifest, the size it records, any range of the bytes, and nothing past them.
        let opened = try #require(try await store.openFile(key, ObjectFiles.video))
        #expect(opened.metadata.mp4Sha256 == metadata.mp4Sha256)
        #expect(opened.file.size == video.count)
        #expect(Array(buffer: try await opened.file.read(at: 0, length: 2)) == Array(video.prefix(2)))
        #expect(
            Array(buffer: try await opened.file.read(at: video.count - 100, length: 100)) == Array(video.suffix(100)))
        await #expect(throws: ServiceError.self) { try await opened.file.read(at: video.count - 1, length: 2) }
        let manifest = try #require(try await store.openFile(key, ObjectFiles.manifest))
        let json = try await manifest.file.read(at: 0, length: manifest.file.size)
        #expect(try JSONDecoder().decode(TranscodeMetadata.self, from: Data(Array(buffer: json))) == opened.metadata)
        let absent = ObjectKey.derive(source: [4, 5, 6], options: TranscodeOptions()).key
        #expect(try await store.openFile(absent, ObjectFiles.video) == nil)

        let urlKey = URLKey(NormalizedURL(normalized: "https://example.com/a.gif"), options: TranscodeOptions())
        #expect(try await store.link(urlKey: urlKey) == nil)
        let source = SourceRecord(
            url: "https://example.com/a.gif", etag: "\"v1\"", lastModified: nil, validatedAt: 1_700_000_000)
        try await store.putLink(urlKey: urlKey, ResultLink(key: key, source: source))
        #expect(try await store.link(urlKey: urlKey) == ResultLink(key: key, source: source))
        try await store.deleteLink(urlKey: urlKey)
        #expect(try await store.link(urlKey: urlKey) == nil)

        let tombstone = Tombstone.gif(try #require(ContentDigest(String(repeating: "7", count: 64))))
        #expect(try await store.isBuried([tombstone]) == false)
        try await store.bury([tombstone], reason: "test")
        #expect(try await store.isBuried([.object(key), tombstone]))

        // What the object was made from outlives it.
        let digest = try #require(metadata.sourceSha256.flatMap(ContentDigest.init(rawValue:)))
        try await store.recordSource(of: key, digest)
        #expect(try await store.deleteObject(key))
        #expect(try await store.metadata(key) == nil)
        #expect(try await store.deleteObject(key) == false)
        #expect(try await store.recordedSource(of: key) == digest)
        let unknown = ObjectKey.derive(source: [1, 2, 3], options: TranscodeOptions()).key
        #expect(try await store.recordedSource(of: unknown) == nil)

        // What a URL was fetched as: added to, never lost.
        let url = SourceHash(NormalizedURL(normalized: "https://e.example/\(UUID().uuidString).gif"))
        let other = ObjectKey.derive(source: [4, 5, 6], options: TranscodeOptions()).source
        #expect(try await store.recordedURLSources(url) == [])
        try await store.recordURLSources(url, [digest])
        try await store.recordURLSources(url, [other, digest])
        #expect(try await store.recordedURLSources(url).sorted() == [digest, other].sorted())

        // A newer node's object: its manifest lists a file of a format this build does not know and a second
        // file of a known one. This store keeps the files it can name (the video, the poster) and the whole
        // manifest, and serves them; nothing collides with the video.
        let future = scratch + "/future"
        let again = scratch + "/again"
        for directory in [future, again] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        var newer = try self.makeObject(in: future).metadata
        newer.otherArtifacts = [
            ManifestEntry(role: ObjectRole(rawValue: "still"), format: "heic", bytes: 3, sha256: nil),
            ManifestEntry(role: ObjectRole(rawValue: "mp4-480"), format: "mp4", bytes: 5, sha256: nil),
        ]
        try JSONEncoder().encode(newer).write(to: URL(fileURLWithPath: "\(future)/\(key).json"))
        _ = FileManager.default.createFile(atPath: "\(future)/\(key).heic", contents: Data([1, 2, 3]))
        try await store.putObject(key, from: future)
        #expect(try await store.metadata(key)?.otherArtifacts == newer.otherArtifacts)
        let copied = try await store.getObject(key, into: again)
        #expect(copied?.otherArtifacts == newer.otherArtifacts)
        #expect(FileManager.default.contents(atPath: "\(again)/\(key).mp4") == video)
        #expect(!FileManager.default.fileExists(atPath: "\(again)/\(key).heic"))
        #expect(try await store.deleteObject(key))
        #expect(try await store.metadata(key) == nil)
    }
}

/// A second disk cache as a shared store. Copies, not moves: the disk's putObject moves the files it is given.
final class CopyingDiskStore: ResultStore, @unchecked Sendable {
    let disk: DiskCache
    init(_ disk: DiskCache) { self.disk = disk }
    func putObject(_ key: ObjectKey, from directory: String) async throws {
        let staging = self.disk.objects.temporaryDirectory + "/put-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: staging) }
        // Every file the object has (its extras too: a batch's objects have the WebP and the AVIF).
        for format in ObjectFiles.commitOrder
        where FileManager.default.fileExists(atPath: "\(directory)/\(key.fileName(format))") {
            try FileManager.default.copyItem(
                atPath: "\(directory)/\(key.fileName(format))", toPath: "\(staging)/\(key.fileName(format))")
        }
        try await self.disk.putObject(key, from: staging)
    }
    func metadata(_ key: ObjectKey) async throws -> TranscodeMetadata? { try self.disk.objects.metadata(key) }
    func getObject(_ key: ObjectKey, into directory: String) async throws -> TranscodeMetadata? {
        try await self.disk.getObject(key, into: directory)
    }
    func deleteObject(_ key: ObjectKey) async throws -> Bool { self.disk.objects.remove(key) }
    func openFile(_ key: ObjectKey, _ format: OutputFormat) async throws -> OpenedFile? {
        try await self.disk.openFile(key, format)
    }
    func link(urlKey: URLKey) async throws -> ResultLink? { try await self.disk.link(urlKey: urlKey) }
    func putLink(urlKey: URLKey, _ link: ResultLink) async throws {
        try await self.disk.putLink(urlKey: urlKey, link)
    }
    func deleteLink(urlKey: URLKey) async throws { try await self.disk.deleteLink(urlKey: urlKey) }
    func isBuried(_ tombstones: [Tombstone]) async throws -> Bool {
        try await self.disk.isBuried(tombstones)
    }
    func bury(_ tombstones: [Tombstone], reason: String) async throws {
        try self.disk.tombstones.bury(tombstones, reason: reason)
    }
    func recordSource(of key: ObjectKey, _ digest: ContentDigest) async throws {
        self.disk.objects.recordSource(of: key, digest)
    }
    func recordedSource(of key: ObjectKey) async throws -> ContentDigest? { self.disk.objects.recordedSource(of: key) }
    func recordURLSources(_ source: SourceHash, _ digests: [ContentDigest]) async throws {
        try await self.disk.recordURLSources(source, digests)
    }
    func recordedURLSources(_ source: SourceHash) async throws -> [ContentDigest] {
        try await self.disk.recordedURLSources(source)
    }
}

/// A store that hands every call to `inner`: the test doubles below override what they change.
class ForwardingStore: ResultStore, @unchecked Sendable {
    let inner: any ResultStore

    init(_ inner: any ResultStore) { self.inner = inner }

    func putObject(_ key: ObjectKey, from directory: String) async throws {
        try await self.inner.putObject(key, from: directory)
    }
    func metadata(_ key: ObjectKey) async throws -> TranscodeMetadata? { try await self.inner.metadata(key) }
    func getObject(_ key: ObjectKey, into directory: String) async throws -> TranscodeMetadata? {
        try await self.inner.getObject(key, into: directory)
    }
    func deleteObject(_ key: ObjectKey) async throws -> Bool { try await self.inner.deleteObject(key) }
    func openFile(_ key: ObjectKey, _ format: OutputFormat) async throws -> OpenedFile? {
        try await self.inner.openFile(key, format)
    }
    func link(urlKey: URLKey) async throws -> ResultLink? { try await self.inner.link(urlKey: urlKey) }
    func putLink(urlKey: URLKey, _ link: ResultLink) async throws { try await self.inner.putLink(urlKey: urlKey, link) }
    func deleteLink(urlKey: URLKey) async throws { try await self.inner.deleteLink(urlKey: urlKey) }
    func isBuried(_ tombstones: [Tombstone]) async throws -> Bool {
        try await self.inner.isBuried(tombstones)
    }
    func bury(_ tombstones: [Tombstone], reason: String) async throws {
        try await self.inner.bury(tombstones, reason: reason)
    }
    func recordSource(of key: ObjectKey, _ digest: ContentDigest) async throws {
        try await self.inner.recordSource(of: key, digest)
    }
    func recordedSource(of key: ObjectKey) async throws -> ContentDigest? {
        try await self.inner.recordedSource(of: key)
    }
    func recordURLSources(_ source: SourceHash, _ digests: [ContentDigest]) async throws {
        try await self.inner.recordURLSources(source, digests)
    }
    func recordedURLSources(_ source: SourceHash) async throws -> [ContentDigest] {
        try await self.inner.recordedURLSources(source)
    }
}

/// A store whose ledger of sources is a table of its own; everything else is `inner`'s.
final class OwnLedger: ForwardingStore, @unchecked Sendable {
    private let lock = NSLock()
    private var ledger: [ObjectKey: ContentDigest] = [:]

    override func recordSource(of key: ObjectKey, _ digest: ContentDigest) async throws {
        self.lock.withLock { self.ledger[key] = digest }
    }
    override func recordedSource(of key: ObjectKey) async throws -> ContentDigest? {
        self.lock.withLock { self.ledger[key] }
    }
}

/// A store whose URL records (`recordURLSources`) are a table of its own; everything else is `inner`'s.
final class OwnURLRecords: ForwardingStore, @unchecked Sendable {
    private let lock = NSLock()
    private var records: [String: Set<ContentDigest>] = [:]

    override func recordURLSources(_ source: SourceHash, _ digests: [ContentDigest]) async throws {
        self.lock.withLock { self.records[source.rawValue, default: []].formUnion(digests) }
    }
    override func recordedURLSources(_ source: SourceHash) async throws -> [ContentDigest] {
        self.lock.withLock { Array(self.records[source.rawValue] ?? []) }
    }
}

/// A shared store whose object writes fail the first `failures` times, as an S3 store answering 500 would.
final class FailingPuts: ForwardingStore, @unchecked Sendable {
    private let lock = NSLock()
    private var failures: Int

    init(_ inner: any ResultStore, failures: Int) {
        self.failures = failures
        super.init(inner)
    }

    override func putObject(_ key: ObjectKey, from directory: String) async throws {
        let fail = self.lock.withLock {
            self.failures -= 1
            return self.failures >= 0
        }
        if fail { throw S3Error(status: 500, code: "InternalError", message: "a failure on purpose") }
        try await self.inner.putObject(key, from: directory)
    }
}

@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct ResultStoreTests {
    /// A takedown by key on another node, after the object was purged from the fleet: the shared store's ledger
    /// names the GIF, so its bytes are refused there with any options (each node's own ledger knows only what it
    /// converted).
    @Test func aKeyTakedownOnAnotherNodeFindsTheGIFInTheSharedLedger() async throws {
        try await withTemporaryDirectory { directory in
            let sharedDisk = try DiskCache(root: directory + "/shared", maxBytes: 1 << 30)
            let gif = try corpusBytes("loop_1.gif")
            let derived = ObjectKey.derive(source: gif, options: TranscodeOptions())
            // The store's ledger is its own, apart from the disk's (which the disk writes when it adopts an
            // object, and which goes): only what the publish recorded there can name the GIF.
            let shared = OwnLedger(CopyingDiskStore(sharedDisk))
            try await withHarness(cacheDirectory: directory + "/a", sharedStore: shared) { harness in
                let upload = try await harness.upload(gif)
                #expect(upload.status == 200)
                let purge = try await harness.request(.DELETE, "/v1/objects/\(derived.key)")
                #expect(purge.status == 200)
            }
            #expect(!sharedDisk.objects.contains(derived.key))
            try FileManager.default.removeItem(atPath: sharedDisk.objects.ledgerPath)
            #expect(try await shared.recordedSource(of: derived.key) == derived.source)
            try await withHarness(cacheDirectory: directory + "/b", sharedStore: shared) {
                harness in
                let takedown = try await harness.request(.DELETE, "/v1/objects/\(derived.key)?takedown=true")
                #expect(takedown.status == 200)
                #expect((try takedown.json()["tombstones"] as? [String] ?? []).contains("gif-\(derived.source)"))
                let other = try await harness.request(
                    .POST, "/transcode?background=%23102030", headers: [("Content-Type", "image/gif")], body: gif)
                #expect(other.status == 451)
            }
        }
    }

    /// A takedown by URL on a third node, after a second node purged the URL the first converted: the shared
    /// store keeps what the URL was fetched as past the purge (S3: `url-sources/`), so the takedown buries the
    /// GIF's bytes everywhere; no node's own index ever saw the URL (issue 56: the bucket's record went with the
    /// purge, and the same bytes then answered 200).
    @Test func aURLTakedownAfterAPurgeOnOtherNodesBuriesTheBytes() async throws {
        try await withTemporaryDirectory { directory in
            let sharedDisk = try DiskCache(root: directory + "/shared", maxBytes: 1 << 30)
            // The store's URL records are its own, apart from the disk's link index (which keeps its `gif-`
            // records when a link goes, where an S3 bucket kept them inside the link).
            let shared = OwnURLRecords(CopyingDiskStore(sharedDisk))
            let gif = try corpusBytes("loop_1.gif")
            let digest = ObjectKey.derive(source: gif, options: TranscodeOptions()).source
            let converted = ResultBox()
            try await withHarness(cacheDirectory: directory + "/a", sharedStore: shared) { harness in
                let url = harness.originURL("/corpus/loop_1.gif")
                let reply = try await harness.transcode(url: url)
                #expect(reply.status == 200)
                converted.set(url)
            }
            let url = try #require(converted.value)
            let query = "url=" + (url.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? url)
            try await withHarness(cacheDirectory: directory + "/b", sharedStore: shared) { harness in
                let purge = try await harness.request(.DELETE, "/v1/sources?\(query)")
                #expect(purge.status == 200, "\(purge.text)")
            }
            try await withHarness(cacheDirectory: directory + "/c", sharedStore: shared) { harness in
                let takedown = try await harness.request(.DELETE, "/v1/sources?\(query)&takedown=true")
                #expect(takedown.status == 200, "\(takedown.text)")
                #expect((try takedown.json()["tombstones"] as? [String] ?? []).contains("gif-\(digest)"))
                let upload = try await harness.upload(gif)
                #expect(upload.status == 451)
            }
        }
    }

    /// An object whose publish failed is published after its node restarts, without anyone asking for it:
    /// the list of unpublished objects is on disk, and the node publishes them at startup.
    @Test func aFailedPublishIsPublishedAfterARestart() async throws {
        try await withTemporaryDirectory { directory in
            let sharedDisk = try DiskCache(root: directory + "/shared", maxBytes: 1 << 30)
            let gif = try corpusBytes("loop_1.gif")
            let key = ObjectKey.derive(source: gif, options: TranscodeOptions()).key
            let cache = directory + "/node"
            let failing = FailingPuts(CopyingDiskStore(sharedDisk), failures: 1)
            try await withHarness(cacheDirectory: cache, sharedStore: failing) { harness in
                let reply = try await harness.upload(gif)
                #expect(reply.errorCode == "storage-unavailable")
                #expect(harness.services.cache.objects.contains(key))
            }
            #expect(!sharedDisk.objects.contains(key))
            #expect(FileManager.default.fileExists(atPath: cache + "/unpublished/\(key)"))
            try await withHarness(cacheDirectory: cache, sharedStore: CopyingDiskStore(sharedDisk)) { harness in
                // The object lands in the store before the publish is counted (after the store's answer).
                let published = { harness.services.transcodes.counters.storage[StorageOperation.publish.rawValue] }
                for _ in 0..<100 where !sharedDisk.objects.contains(key) || published() != 1 {
                    try await Task.sleep(for: .milliseconds(50))
                }
                #expect(sharedDisk.objects.contains(key))
                #expect(published() == 1)
                #expect(harness.services.transcodes.counters.transcodes == 0)
            }
            #expect(!FileManager.default.fileExists(atPath: cache + "/unpublished/\(key)"))
        }
    }

    /// A conversion whose publish fails answers 503 and keeps the object on this disk; the next request for it
    /// publishes it, so the fleet is not left without it. (The shared store here is a second disk cache:
    /// SharedResults works with any ResultStore.)
    @Test func aFailedPublishIsPublishedOnTheNextRequest() async throws {
        try await withTemporaryDirectory { directory in
            let sharedDisk = try DiskCache(root: directory + "/shared", maxBytes: 1 << 30)
            let store = FailingPuts(CopyingDiskStore(sharedDisk), failures: 1)
            try await withHarness(sharedStore: store) { harness in
                let gif = try corpusBytes("loop_1.gif")
                let key = ObjectKey.derive(source: gif, options: harness.services.configuration.transcode.options).key
                let first = try await harness.upload(gif)
                #expect(first.status == 503)
                #expect(first.errorCode == "storage-unavailable")
                #expect(harness.services.cache.objects.contains(key))
                #expect(!sharedDisk.objects.contains(key))
                let second = try await harness.upload(gif)
                #expect(second.status == 200)
                #expect(sharedDisk.objects.contains(key))
                #expect(harness.services.transcodes.counters.transcodes == 1)
                #expect(harness.services.transcodes.counters.storage["publish"] == 1)
            }
        }
    }

    @Test func theLocalDiskKeepsTheContract() async throws {
        try await withTemporaryDirectory { directory in
            let cache = try DiskCache(root: directory + "/cache", maxBytes: 1 << 30)
            try await ResultStoreContract.roundTrip(cache, scratch: cache.objects.temporaryDirectory)
            try await ResultStoreContract.extrasRoundTrip(cache, scratch: cache.objects.temporaryDirectory)
        }
    }

    /// Files that disagree with their metadata are refused, and nothing becomes an object.
    @Test func theLocalDiskRefusesFilesThatDisagreeWithTheirMetadata() async throws {
        try await withTemporaryDirectory { directory in
            let cache = try DiskCache(root: directory + "/cache", maxBytes: 1 << 30)
            let made = cache.objects.temporaryDirectory + "/made"
            try FileManager.default.createDirectory(atPath: made, withIntermediateDirectories: true)
            let (key, _) = try ResultStoreContract.makeObject(in: made)
            let handle = try #require(FileHandle(forWritingAtPath: "\(made)/\(key).mp4"))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data([0]))
            try handle.close()
            await #expect(throws: TranscodeError.self) { try await cache.putObject(key, from: made) }
            #expect(!cache.objects.contains(key))
        }
    }
}
