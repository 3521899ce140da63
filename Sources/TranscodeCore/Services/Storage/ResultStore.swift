import Foundation
import NIOCore
import Transcoder

/// Where results are kept, in four parts a store implements together (`ResultStore`): objects
/// (`ObjectStore`), the links from URL keys to objects with their source records (`LinkStore`), takedowns
/// (`TombstoneStore`), and what each object was made from (`SourceLedger`). Two implementations: the node's local disk (`DiskCache`), which is all a single node
/// uses, and S3-compatible object storage (`S3ResultStore`), which a fleet shares; `SharedResults` puts the
/// local disk in front of it as a read-through cache.
package typealias ResultStore = ObjectStore & LinkStore & TombstoneStore & SourceLedger

/// The files handed to a store (`S3ResultStore.putObject`) are not what their manifest says: one is missing, of
/// another size, or holds other bytes. The sender's copy is damaged, not the store: the manifest was not stored
/// (files sent before the bad one may be, which nothing refers to), and sending it again cannot help
/// (`SharedResults.publish` sets such a local object aside). Answered as `io`, as a file that cannot be read is.
package struct ObjectFilesDisagree: Error, CustomStringConvertible {
    package let description: String

    package init(_ description: String) {
        self.description = description
    }
}

/// Immutable, content-addressed objects: a manifest (`TranscodeMetadata`) and the files it lists
/// (`ObjectFiles.stored`: each named `<key>.<fileExtension>` of its `OutputFormat`).
///
/// Every implementation writes an object's manifest last and deletes it first, so an object exists exactly
/// when its manifest does; a write cut short leaves no object, only files nothing refers to.
package protocol ObjectStore: Sendable {
    /// The manifest of object `key`, nil when it is not stored.
    func metadata(_ key: ObjectKey) async throws -> TranscodeMetadata?

    /// Stores object `key` from `directory`: its manifest `<key>.json` and the files that manifest lists, the
    /// manifest last. The files in `directory` may be moved away.
    func putObject(_ key: ObjectKey, from directory: String) async throws

    /// Writes object `key` into `directory`: the files its manifest lists, each checked against it, then the
    /// manifest. - Returns: its manifest, nil when it is not stored (then nothing is written).
    func getObject(_ key: ObjectKey, into directory: String) async throws -> TranscodeMetadata?

    /// Deletes object `key`, the manifest first. - Returns: whether there was anything to delete.
    @discardableResult
    func deleteObject(_ key: ObjectKey) async throws -> Bool

    /// Opens object `key`'s file of `format` for serving: the object's manifest and the file, whose bytes are
    /// then read by range from what was opened (on the model of Hummingbird's `FileProvider`). Nil when the
    /// object is not stored, or keeps no such file. No route calls it yet: `/media` streams the local disk's
    /// checked file (an `ObjectFileReader` too) and pulls a shared object onto the disk first; serving a shared
    /// object by range without that copy is what this is for.
    func openFile(_ key: ObjectKey, _ format: OutputFormat) async throws -> OpenedFile?
}

/// A file of a stored object, opened: what media serving takes, whichever store holds it.
package protocol ObjectFileReader: Sendable {
    /// Its size when it was opened.
    var size: Int { get }

    /// `length` bytes from `offset`. - Throws: `not-found` when fewer are there (the file changed), or the
    /// store's own error.
    func read(at offset: Int, length: Int) async throws -> ByteBuffer
}

/// An object's file opened for serving, with the object's manifest (its digests make the entity tags).
package struct OpenedFile: Sendable {
    let metadata: TranscodeMetadata
    let file: any ObjectFileReader
}

/// The links from URL keys to objects, each with how its URL was last fetched.
package protocol LinkStore: Sendable {
    /// The object `urlKey` links to, with the URL's source record; nil when there is no link.
    func link(urlKey: URLKey) async throws -> ResultLink?

    /// Points `urlKey` at an object (replacing the link it had).
    func putLink(urlKey: URLKey, _ link: ResultLink) async throws

    /// Removes the link of `urlKey` and its record.
    func deleteLink(urlKey: URLKey) async throws
}

/// Takedowns: tombstones of objects, sources' bytes and URLs, never removed.
package protocol TombstoneStore: Sendable {
    /// Whether any of `tombstones` was recorded.
    func isBuried(_ tombstones: [Tombstone]) async throws -> Bool

    /// Records takedowns: from then on these are answered 451 and never converted again.
    func bury(_ tombstones: [Tombstone], reason: String) async throws
}

/// What each object was made from: its GIF's SHA-256, kept after the object is deleted, so that a takedown by
/// key buries the GIF's bytes even once the object is gone (purged, evicted).
package protocol SourceLedger: Sendable {
    /// Records that object `key` was made from the GIF whose SHA-256 is `digest`.
    func recordSource(of key: ObjectKey, _ digest: ContentDigest) async throws

    /// The GIF digest recorded for `key`, nil when none was.
    func recordedSource(of key: ObjectKey) async throws -> ContentDigest?

    /// Records that the URL whose hash is `source` was fetched as the GIFs `digests` (added to what was recorded):
    /// kept when the URL's links are purged, so that a later takedown of the URL, on any node, still buries them.
    func recordURLSources(_ source: SourceHash, _ digests: [ContentDigest]) async throws

    /// The GIF digests recorded for the URL `source`; empty when none were.
    func recordedURLSources(_ source: SourceHash) async throws -> [ContentDigest]
}

/// A URL key's link: the object it leads to and how the URL was last fetched.
package struct ResultLink: Codable, Equatable, Sendable {
    var key: ObjectKey
    var source: SourceRecord?
}

/// The local disk as a result store: its parts' own operations, plus moving whole objects in and out.
extension DiskCache: ResultStore {
    package func metadata(_ key: ObjectKey) async throws -> TranscodeMetadata? {
        try self.objects.metadata(key)
    }

    /// Moves the files into `objects/ab/` (the JSON last), after checking they agree with their metadata.
    /// - Throws: `TranscodeError` `.io` when the files are missing, disagree or cannot be moved.
    package func putObject(_ key: ObjectKey, from directory: String) async throws {
        try self.objects.adopt(key, from: directory)
    }

    package func getObject(_ key: ObjectKey, into directory: String) async throws -> TranscodeMetadata? {
        guard let object = try self.objects.verifiedObject(key) else { return nil }
        for (entry, format) in ObjectFiles.stored(in: object.metadata) {
            guard let file = object.file(format.fileExtension) else {
                throw TranscodeError(.io, "object \(key) lists a \(entry.format) file this store does not keep")
            }
            try file.copy(to: "\(directory)/" + key.fileName(format))
        }
        try object.json.copy(to: "\(directory)/" + key.fileName(ObjectFiles.manifest))
        return object.metadata
    }

    package func deleteObject(_ key: ObjectKey) async throws -> Bool {
        self.objects.remove(key)
    }

    /// The file as the anti-tamper open found it (`LocalObjects.verifiedObject`), read from that descriptor.
    package func openFile(_ key: ObjectKey, _ format: OutputFormat) async throws -> OpenedFile? {
        guard let object = try self.objects.verifiedObject(key), let file = object.file(format.fileExtension) else {
            return nil
        }
        return OpenedFile(metadata: object.metadata, file: file)
    }

    package func link(urlKey: URLKey) async throws -> ResultLink? {
        guard let key = self.lookup(urlKey: urlKey) else { return nil }
        return ResultLink(key: key, source: self.links.sourceRecord(urlKey: urlKey))
    }

    package func putLink(urlKey: URLKey, _ link: ResultLink) async throws {
        try self.links.link(urlKey: urlKey, to: link.key, source: link.source)
    }

    package func deleteLink(urlKey: URLKey) async throws {
        self.links.removeLink(urlKey: urlKey)
    }

    package func isBuried(_ tombstones: [Tombstone]) async throws -> Bool {
        self.tombstones.isBuried(anyOf: tombstones)
    }

    package func bury(_ tombstones: [Tombstone], reason: String) async throws {
        try self.tombstones.bury(tombstones, reason: reason)
    }

    package func recordSource(of key: ObjectKey, _ digest: ContentDigest) async throws {
        self.objects.recordSource(of: key, digest)
    }

    package func recordedSource(of key: ObjectKey) async throws -> ContentDigest? {
        self.objects.recordedSource(of: key)
    }

    package func recordURLSources(_ source: SourceHash, _ digests: [ContentDigest]) async throws {
        try self.links.recordGIFs(digests, source: source)
    }

    package func recordedURLSources(_ source: SourceHash) async throws -> [ContentDigest] {
        self.links.indexed(source: source).gifHashes
    }
}
