import Crypto
import Foundation
import NIOCore
import NIOPosix
import Transcoder

/// Results in an S3-compatible bucket, named as on the local disk:
///
/// ```
/// objects/ab/<key>.mp4 .jpg .json    the JSON written last, deleted first: an object exists when its JSON does
/// urls/<url-key>                     {"key": …, "source": {url, etag, lastModified, validatedAt}}
/// tombstones/<kind>-<hash>           {"reason": …, "at": …}
/// sources/ab/<key>                   the GIF's SHA-256 (hex): what the object was made from, kept after it
/// ```
/// Objects are immutable and content-addressed, so two nodes writing the same key write the same bytes; a
/// PUT replaces an object whole, so a reader never sees half of one.
package struct S3ResultStore: ResultStore {
    let client: S3Client

    package init(client: S3Client) { self.client = client }

    static func objectName(_ key: ObjectKey, _ fileExtension: String) -> String {
        "objects/\(key.shard)/\(key.rawValue).\(fileExtension)"
    }

    package func metadata(_ key: ObjectKey) async throws -> TranscodeMetadata? {
        guard let json = try await self.client.get(Self.objectName(key, ObjectFiles.manifest.fileExtension)) else {
            return nil
        }
        return try Self.decodeMetadata(key, json.bytes)
    }

    /// Uploads the files the manifest in `directory` lists, then the manifest. Each file is streamed from disk a block
    /// at a time (`S3Client.put(_:file:size:sha256:contentType:)`), signed with the digest its manifest records.
    package func putObject(_ key: ObjectKey, from directory: String) async throws {
        let manifest = "\(directory)/" + key.fileName(ObjectFiles.manifest)
        guard let data = try await Self.read(manifest) else {
            throw ObjectFilesDisagree("object \(key) has no manifest to upload")
        }
        let metadata = try Self.decodeMetadata(key, data)
        for artifact in try RenderResult(metadata: metadata, directory: directory, name: key.rawValue).artifacts {
            let fileExtension = artifact.format.fileExtension
            let name = Self.objectName(key, fileExtension)
            guard artifact.format != ObjectFiles.manifest else {
                try await self.client.put(name, data, contentType: artifact.format.mediaType)
                continue
            }
            let (size, digest) = try await Self.inspect(artifact.path, sha256: artifact.sha256)
            guard size == artifact.bytes else {
                throw ObjectFilesDisagree("object \(key)'s .\(fileExtension) is not the size its manifest says")
            }
            try await self.client.put(
                name, file: artifact.path, size: artifact.bytes, sha256: digest, contentType: artifact.format.mediaType)
        }
    }

    /// The bytes of the file at `path` (a manifest), read on the I/O thread pool; nil when there is none.
    /// - Throws: `overloaded` when the process is out of descriptors or memory (not a sign of damage).
    static func read(_ path: String) async throws -> [UInt8]? {
        try await NIOThreadPool.singleton.runIfActive {
            guard let file = try Self.opening(path) else { return nil }
            return file.readAll()
        }
    }

    /// The size of the file at `path`, to upload, and its SHA-256: `sha256` when its manifest records one, else
    /// the file's own (a manifest written before files carried digests), read on the I/O pool.
    /// - Throws: `ObjectFilesDisagree` when the file is missing or cannot be read whole; `overloaded` when the
    ///   process is out of descriptors or memory.
    static func inspect(_ path: String, sha256: String?) async throws -> (size: Int, sha256: String) {
        try await NIOThreadPool.singleton.runIfActive {
            guard let file = try Self.opening(path) else { throw ObjectFilesDisagree("\(path) is missing") }
            guard let digest = sha256 ?? file.sha256() else {
                throw ObjectFilesDisagree("\(path) could not be read whole")
            }
            return (file.size, digest)
        }
    }

    /// The file at `path`, opened; nil when there is no such file.
    /// - Throws: `overloaded` on a shortage of descriptors or memory, `internal` on any other failure
    ///   (`ServiceError.file`).
    private static func opening(_ path: String) throws -> StoredFile? {
        if let file = StoredFile.opening(path) { return file }
        let code = errno
        if code == ENOENT || code == ENOTDIR { return nil }
        throw ServiceError.file(errno: code, "cannot open \(path)")
    }

    /// Reads the manifest first, then each file it lists (`ObjectFiles.stored`), streamed to disk and checked against
    /// it (size and SHA-256, hashed on the I/O pool): a store that lost or mangled a file yields a miss, never a broken
    /// video, and leaves no file in `directory`.
    package func getObject(_ key: ObjectKey, into directory: String) async throws -> TranscodeMetadata? {
        guard let json = try await self.client.get(Self.objectName(key, ObjectFiles.manifest.fileExtension)) else {
            return nil
        }
        let metadata = try Self.decodeMetadata(key, json.bytes)
        var written: [String] = []
        var complete = false
        defer {
            if !complete { for path in written { unlink(path) } }
        }
        for (entry, format) in ObjectFiles.stored(in: metadata) {
            let path = "\(directory)/\(key).\(format.fileExtension)"
            guard let size = try await self.client.download(Self.objectName(key, format.fileExtension), to: path) else {
                return nil
            }
            written.append(path)
            guard size == entry.bytes else { return nil }
            if let expected = entry.sha256 {
                guard try await StoredFile.sha256(ofFile: path) == expected else { return nil }
            }
        }
        let manifest = "\(directory)/\(key).\(ObjectFiles.manifest.fileExtension)"
        let bytes = json.bytes
        try await NIOThreadPool.singleton.runIfActive {
            guard FileManager.default.createFile(atPath: manifest, contents: Data(bytes)) else {
                throw TranscodeError(.io, "cannot write \(manifest)")
            }
        }
        complete = true
        return metadata
    }

    /// Deletes the manifest, then the files it listed (and the video and poster every object has had, which a
    /// write cut short may have left without a manifest).
    package func deleteObject(_ key: ObjectKey) async throws -> Bool {
        let manifest = Self.objectName(key, ObjectFiles.manifest.fileExtension)
        let json = try await self.client.get(manifest)
        let listed = json.flatMap { try? Self.decodeMetadata(key, $0.bytes) }
        let existed = json != nil
        try await self.client.delete(manifest)
        var formats = ObjectFiles.media
        for stored in listed.map(ObjectFiles.stored(in:)) ?? [] where !formats.contains(stored.format) {
            formats.append(stored.format)
        }
        for format in formats {
            try await self.client.delete(Self.objectName(key, format.fileExtension))
        }
        return existed
    }

    /// The manifest, read now; the file's size as the manifest records it (the manifest's own: the bytes just
    /// read); its bytes by ranged `GET`s, each checked against that size.
    package func openFile(_ key: ObjectKey, _ format: OutputFormat) async throws -> OpenedFile? {
        let manifestName = Self.objectName(key, ObjectFiles.manifest.fileExtension)
        guard let json = try await self.client.get(manifestName) else { return nil }
        let metadata = try Self.decodeMetadata(key, json.bytes)
        let size: Int
        if format == ObjectFiles.manifest {
            size = json.bytes.count
        } else {
            guard let stored = ObjectFiles.stored(in: metadata).first(where: { $0.format == format }) else {
                return nil
            }
            size = stored.entry.bytes
        }
        return OpenedFile(
            metadata: metadata,
            file: RangedFile(client: self.client, name: Self.objectName(key, format.fileExtension), size: size))
    }

    /// A bucket object read by range.
    struct RangedFile: ObjectFileReader {
        let client: S3Client
        let name: String
        let size: Int

        func read(at offset: Int, length: Int) async throws -> ByteBuffer {
            guard length > 0 else { return ByteBuffer() }
            guard offset >= 0, offset + length <= self.size,
                let object = try await self.client.get(self.name, range: offset...(offset + length - 1)),
                object.bytes.count == length, object.totalSize == self.size
            else { throw ServiceError.notFound("the stored file is not the size its manifest says") }
            return ByteBuffer(bytes: object.bytes)
        }
    }

    package func link(urlKey: URLKey) async throws -> ResultLink? {
        guard let object = try await self.client.get("urls/\(urlKey.rawValue)") else {
            return nil
        }
        // A link whose key is not one does not decode.
        return try? JSONDecoder().decode(ResultLink.self, from: Data(object.bytes))
    }

    package func putLink(urlKey: URLKey, _ link: ResultLink) async throws {
        try await self.client.put(
            "urls/\(urlKey.rawValue)", [UInt8](try JSONEncoder().encode(link)), contentType: "application/json")
    }

    package func deleteLink(urlKey: URLKey) async throws {
        try await self.client.delete("urls/\(urlKey.rawValue)")
    }

    package func isBuried(_ tombstones: [Tombstone]) async throws -> Bool {
        for tombstone in tombstones where try await self.client.head("tombstones/\(tombstone.fileName)") != nil {
            return true
        }
        return false
    }

    package func bury(_ tombstones: [Tombstone], reason: String) async throws {
        let stone = try JSONSerialization.data(
            withJSONObject: ["reason": reason, "at": ISO8601DateFormatter().string(from: Date())],
            options: [.sortedKeys])
        for tombstone in tombstones {
            try await self.client.put(
                "tombstones/\(tombstone.fileName)", [UInt8](stone), contentType: "application/json")
        }
    }

    static func sourceName(_ key: ObjectKey) -> String { "sources/\(key.shard)/\(key.rawValue)" }

    package func recordSource(of key: ObjectKey, _ digest: ContentDigest) async throws {
        try await self.client.put(Self.sourceName(key), Array(digest.rawValue.utf8), contentType: "text/plain")
    }

    package func recordedSource(of key: ObjectKey) async throws -> ContentDigest? {
        guard let object = try await self.client.get(Self.sourceName(key)) else { return nil }
        return ContentDigest(String(decoding: object.bytes, as: UTF8.self))
    }

    static func urlSourcesName(_ source: SourceHash) -> String {
        "url-sources/\(source.shard)/\(source.rawValue)"
    }

    /// One digest per line, the ones recorded before kept: read, merged, written. The store has no conditional write
    /// here, so two purges of one URL on two nodes in the same moment can lose one's additions (each purge records
    /// what it found itself; a takedown then buries what the surviving record names).
    package func recordURLSources(_ source: SourceHash, _ digests: [ContentDigest]) async throws {
        let recorded = Set(try await self.recordedURLSources(source))
        guard !Set(digests).isSubset(of: recorded) else { return }
        let merged = recorded.union(digests).map(\.rawValue).sorted()
        try await self.client.put(
            Self.urlSourcesName(source), Array(merged.joined(separator: "\n").utf8), contentType: "text/plain")
    }

    package func recordedURLSources(_ source: SourceHash) async throws -> [ContentDigest] {
        guard let object = try await self.client.get(Self.urlSourcesName(source)) else { return [] }
        return String(decoding: object.bytes, as: UTF8.self).split(separator: "\n").compactMap {
            ContentDigest(String($0))
        }
    }

    private static func decodeMetadata(_ key: ObjectKey, _ bytes: [UInt8]) throws -> TranscodeMetadata {
        do {
            return try JSONDecoder().decode(TranscodeMetadata.self, from: Data(bytes))
        } catch {
            throw TranscodeError(.io, "object \(key)'s metadata in the store does not read", underlying: error)
        }
    }
}
