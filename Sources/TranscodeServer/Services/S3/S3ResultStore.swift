import Crypto
import Foundation
import Transcoder

/// Results in an S3-compatible bucket, named as on the local disk:
///
/// ```
/// objects/ab/<key>.mp4 .jpg .json    the JSON written last, deleted first: an object exists when its JSON does
/// urls/<url-key>                     {"key": …, "source": {url, etag, lastModified, validatedAt}}
/// tombstones/<kind>-<hash>           {"reason": …, "at": …}
/// ```
/// Objects are immutable and content-addressed, so two nodes writing the same key write the same bytes; a
/// PUT replaces an object whole, so a reader never sees half of one.
struct S3ResultStore: ResultStore {
    let client: S3Client

    static func objectName(_ key: ObjectKey, _ fileExtension: String) -> String {
        "objects/\(key.shard)/\(key.rawValue).\(fileExtension)"
    }

    func metadata(_ key: ObjectKey) async throws -> TranscodeMetadata? {
        guard let json = try await self.client.get(Self.objectName(key, ObjectFiles.manifest.fileExtension)) else {
            return nil
        }
        return try Self.decodeMetadata(key, json.bytes)
    }

    func putObject(_ key: ObjectKey, from directory: String) async throws {
        for format in ObjectFiles.commitOrder {
            let fileExtension = format.fileExtension
            guard let data = FileManager.default.contents(atPath: "\(directory)/\(key).\(fileExtension)") else {
                throw TranscodeError(.io, "object \(key) has no .\(fileExtension) to upload")
            }
            try await self.client.put(Self.objectName(key, fileExtension), [UInt8](data), contentType: format.mediaType)
        }
    }

    /// Reads the JSON first, then the video and the poster, each checked against it (size and SHA-256): a
    /// store that lost or mangled a file yields a miss, never a broken video.
    func getObject(_ key: ObjectKey, into directory: String) async throws -> TranscodeMetadata? {
        guard let json = try await self.client.get(Self.objectName(key, ObjectFiles.manifest.fileExtension)) else {
            return nil
        }
        let metadata = try Self.decodeMetadata(key, json.bytes)
        var files = [(ObjectFiles.manifest.fileExtension, json.bytes)]
        for format in ObjectFiles.media {
            let (fileExtension, digest) = (format.fileExtension, ObjectFiles.recordedSha256(of: format, in: metadata))
            guard let object = try await self.client.get(Self.objectName(key, fileExtension)),
                object.bytes.count == ObjectFiles.recordedSize(of: format, in: metadata),
                digest == nil || HexDigest.encode(SHA256.hash(data: object.bytes)) == digest
            else { return nil }
            files.append((fileExtension, object.bytes))
        }
        for (fileExtension, bytes) in files {
            let path = "\(directory)/\(key).\(fileExtension)"
            guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else {
                throw TranscodeError(.io, "cannot write \(path)")
            }
        }
        return metadata
    }

    func deleteObject(_ key: ObjectKey) async throws -> Bool {
        let existed = try await self.client.head(Self.objectName(key, ObjectFiles.manifest.fileExtension)) != nil
        for fileExtension in ObjectFiles.deleteOrder.map(\.fileExtension) {
            try await self.client.delete(Self.objectName(key, fileExtension))
        }
        return existed
    }

    func link(urlKey: URLKey) async throws -> ResultLink? {
        guard let object = try await self.client.get("urls/\(urlKey.rawValue)") else {
            return nil
        }
        // A link whose key is not one does not decode.
        return try? JSONDecoder().decode(ResultLink.self, from: Data(object.bytes))
    }

    func putLink(urlKey: URLKey, _ link: ResultLink) async throws {
        try await self.client.put(
            "urls/\(urlKey.rawValue)", [UInt8](try JSONEncoder().encode(link)), contentType: "application/json")
    }

    func deleteLink(urlKey: URLKey) async throws {
        try await self.client.delete("urls/\(urlKey.rawValue)")
    }

    func isBuried(_ tombstones: [DiskCache.Tombstone]) async throws -> Bool {
        for tombstone in tombstones where try await self.client.head("tombstones/\(tombstone.fileName)") != nil {
            return true
        }
        return false
    }

    func bury(_ tombstones: [DiskCache.Tombstone], reason: String) async throws {
        let stone = try JSONSerialization.data(
            withJSONObject: ["reason": reason, "at": ISO8601DateFormatter().string(from: Date())],
            options: [.sortedKeys])
        for tombstone in tombstones {
            try await self.client.put(
                "tombstones/\(tombstone.fileName)", [UInt8](stone), contentType: "application/json")
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
