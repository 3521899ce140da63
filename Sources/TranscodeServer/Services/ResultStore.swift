import Foundation
import Transcoder

/// Where results are kept: objects (`<key>.mp4`, `.jpg`, `.json`), the links from URL keys to objects with
/// their source records, and tombstones. Two implementations: the node's local disk (`DiskCache`), which is
/// all a single node uses, and S3-compatible object storage (`S3ResultStore`), which a fleet shares with the
/// local disk as a read-through cache in front of it.
///
/// Every implementation writes an object's JSON last, so an object exists exactly when its JSON does; a write
/// cut short leaves no object, only files nothing refers to.
protocol ResultStore: Sendable {
    /// The metadata of object `key`, nil when it is not stored.
    func metadata(_ key: ObjectKey) async throws -> TranscodeMetadata?

    /// Stores object `key` from `directory/<key>.mp4`, `.jpg` and `.json` (as the transcoder writes them),
    /// the JSON last. The files in `directory` may be moved away.
    func putObject(_ key: ObjectKey, from directory: String) async throws

    /// Writes object `key` into `directory` as `<key>.mp4`, `.jpg` and `.json`.
    /// - Returns: its metadata, nil when it is not stored (then nothing is written).
    func getObject(_ key: ObjectKey, into directory: String) async throws -> TranscodeMetadata?

    /// Deletes object `key`, the JSON first. - Returns: whether there was anything to delete.
    @discardableResult
    func deleteObject(_ key: ObjectKey) async throws -> Bool

    /// The object `urlKey` links to, with the URL's source record; nil when there is no link.
    func link(urlKey: URLKey) async throws -> ResultLink?

    /// Points `urlKey` at an object (replacing the link it had).
    func putLink(urlKey: URLKey, _ link: ResultLink) async throws

    /// Removes the link of `urlKey` and its record.
    func deleteLink(urlKey: URLKey) async throws

    /// Whether any of `tombstones` was recorded.
    func isBuried(_ tombstones: [DiskCache.Tombstone]) async throws -> Bool

    /// Records takedowns: from then on these are answered 451 and never converted again.
    func bury(_ tombstones: [DiskCache.Tombstone], reason: String) async throws
}

/// A URL key's link: the object it leads to and how the URL was last fetched.
struct ResultLink: Codable, Equatable, Sendable {
    var key: ObjectKey
    var source: DiskCache.SourceRecord?
}

/// The local disk as a result store: the cache's own operations (`metadata(_:)` and `bury(_:reason:)` are its
/// synchronous ones), plus moving whole objects in and out.
extension DiskCache: ResultStore {
    /// Moves the files into `objects/ab/` (the JSON last), after checking they agree with their metadata.
    /// - Throws: `TranscodeError` `.io` when the files are missing, disagree or cannot be moved.
    func putObject(_ key: ObjectKey, from directory: String) async throws {
        try self.adopt(key, from: directory)
    }

    func getObject(_ key: ObjectKey, into directory: String) async throws -> TranscodeMetadata? {
        guard let object = self.verifiedObject(key) else { return nil }
        for fileExtension in ObjectFiles.commitOrder.map(\.fileExtension) {
            guard let file = object.file(fileExtension) else { continue }
            try file.copy(to: "\(directory)/\(key).\(fileExtension)")
        }
        return object.metadata
    }

    func deleteObject(_ key: ObjectKey) async throws -> Bool {
        self.remove(key)
    }

    func link(urlKey: URLKey) async throws -> ResultLink? {
        guard let key = self.lookup(urlKey: urlKey) else { return nil }
        return ResultLink(key: key, source: self.sourceRecord(urlKey: urlKey))
    }

    func putLink(urlKey: URLKey, _ link: ResultLink) async throws {
        try self.link(urlKey: urlKey, to: link.key, source: link.source)
    }

    func deleteLink(urlKey: URLKey) async throws {
        self.removeLink(urlKey: urlKey)
    }

    func isBuried(_ tombstones: [Tombstone]) async throws -> Bool {
        tombstones.contains { self.isBuried($0) }
    }
}
