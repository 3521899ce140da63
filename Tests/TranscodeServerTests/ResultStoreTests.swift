import Foundation
import Testing
import Transcoder

@testable import TranscodeServer

/// What every `ResultStore` must do, run against each implementation: the local disk here, S3 (SeaweedFS) in
/// `S3StoreTests`.
enum ResultStoreContract {
    /// A real object: `loop_1.gif` converted into `directory`. - Returns: its key and metadata.
    static func makeObject(in directory: String) throws -> (key: String, metadata: TranscodeMetadata) {
        let gif = try corpusBytes("loop_1.gif")
        let key = DiskCache.contentKey(gif: gif, options: TranscodeOptions())
        let metadata = try Transcoder().convert(gif, directory: directory, name: key)
        return (key, metadata)
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

        let urlKey = DiskCache.urlKey(
            normalizedURL: "https://example.com/a.gif", options: TranscodeOptions())
        #expect(try await store.link(urlKey: urlKey) == nil)
        let source = DiskCache.SourceRecord(
            url: "https://example.com/a.gif", etag: "\"v1\"", lastModified: nil, validatedAt: 1_700_000_000)
        try await store.putLink(urlKey: urlKey, ResultLink(key: key, source: source))
        #expect(try await store.link(urlKey: urlKey) == ResultLink(key: key, source: source))
        try await store.deleteLink(urlKey: urlKey)
        #expect(try await store.link(urlKey: urlKey) == nil)

        let tombstone = DiskCache.Tombstone.gif(String(repeating: "7", count: 64))
        #expect(try await store.isBuried([tombstone]) == false)
        try await store.bury([tombstone], reason: "test")
        #expect(try await store.isBuried([.object(key), tombstone]))

        #expect(try await store.deleteObject(key))
        #expect(try await store.metadata(key) == nil)
        #expect(try await store.deleteObject(key) == false)
    }
}

@Suite struct ResultStoreTests {
    @Test func theLocalDiskKeepsTheContract() async throws {
        try await withTemporaryDirectory { directory in
            let cache = try DiskCache(root: directory + "/cache", maxBytes: 1 << 30)
            try await ResultStoreContract.roundTrip(cache, scratch: cache.temporaryDirectory)
        }
    }

    /// Files that disagree with their metadata are refused, and nothing becomes an object.
    @Test func theLocalDiskRefusesFilesThatDisagreeWithTheirMetadata() async throws {
        try await withTemporaryDirectory { directory in
            let cache = try DiskCache(root: directory + "/cache", maxBytes: 1 << 30)
            let made = cache.temporaryDirectory + "/made"
            try FileManager.default.createDirectory(atPath: made, withIntermediateDirectories: true)
            let (key, _) = try ResultStoreContract.makeObject(in: made)
            let handle = try #require(FileHandle(forWritingAtPath: "\(made)/\(key).mp4"))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data([0]))
            try handle.close()
            await #expect(throws: TranscodeError.self) { try await cache.putObject(key, from: made) }
            #expect(!cache.contains(key))
        }
    }
}
