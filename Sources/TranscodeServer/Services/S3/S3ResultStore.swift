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

    static func objectName(_ key: String, _ fileExtension: String) -> String {
        "objects/\(key.prefix(2))/\(key).\(fileExtension)"
    }

    static let contentTypes = ["mp4": "video/mp4", "jpg": "image/jpeg", "json": "application/json"]

    func metadata(_ key: String) async throws -> TranscodeMetadata? {
        guard DiskCache.isValidKey(key), let json = try await self.client.get(Self.objectName(key, "json")) else {
            return nil
        }
        return try Self.decodeMetadata(key, json.bytes)
    }

    func putObject(_ key: String, from directory: String) async throws {
        guard DiskCache.isValidKey(key) else { throw TranscodeError(.io, "not an object key: \(key)") }
        for fileExtension in ["mp4", "jpg", "json"] {
            guard let data = FileManager.default.contents(atPath: "\(directory)/\(key).\(fileExtension)") else {
                throw TranscodeError(.io, "object \(key) has no .\(fileExtension) to upload")
            }
            try await self.client.put(
                Self.objectName(key, fileExtension), [UInt8](data),
                contentType: Self.contentTypes[fileExtension] ?? "application/octet-stream")
        }
    }

    /// Reads the JSON first, then the video and the poster, each checked against it (size and SHA-256): a
    /// store that lost or mangled a file yields a miss, never a broken video.
    func getObject(_ key: String, into directory: String) async throws -> TranscodeMetadata? {
        guard DiskCache.isValidKey(key), let json = try await self.client.get(Self.objectName(key, "json")) else {
            return nil
        }
        let metadata = try Self.decodeMetadata(key, json.bytes)
        var files = [("json", json.bytes)]
        for (fileExtension, size, digest) in [
            ("mp4", metadata.mp4Bytes, metadata.mp4Sha256), ("jpg", metadata.posterBytes, metadata.posterSha256),
        ] {
            guard let object = try await self.client.get(Self.objectName(key, fileExtension)),
                object.bytes.count == size,
                digest == nil || DiskCache.hex(SHA256.hash(data: object.bytes)) == digest
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

    func deleteObject(_ key: String) async throws -> Bool {
        guard DiskCache.isValidKey(key) else { return false }
        let existed = try await self.client.head(Self.objectName(key, "json")) != nil
        for fileExtension in ["json", "mp4", "jpg"] {
            try await self.client.delete(Self.objectName(key, fileExtension))
        }
        return existed
    }

    func link(urlKey: String) async throws -> ResultLink? {
        guard DiskCache.isValidKey(urlKey), let object = try await self.client.get("urls/\(urlKey)") else {
            return nil
        }
        guard let link = try? JSONDecoder().decode(ResultLink.self, from: Data(object.bytes)),
            DiskCache.isValidKey(link.key)
        else { return nil }
        return link
    }

    func putLink(urlKey: String, _ link: ResultLink) async throws {
        guard DiskCache.isValidKey(urlKey), DiskCache.isValidKey(link.key) else { return }
        try await self.client.put(
            "urls/\(urlKey)", [UInt8](try JSONEncoder().encode(link)), contentType: "application/json")
    }

    func deleteLink(urlKey: String) async throws {
        guard DiskCache.isValidKey(urlKey) else { return }
        try await self.client.delete("urls/\(urlKey)")
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

    private static func decodeMetadata(_ key: String, _ bytes: [UInt8]) throws -> TranscodeMetadata {
        do {
            return try JSONDecoder().decode(TranscodeMetadata.self, from: Data(bytes))
        } catch {
            throw TranscodeError(.io, "object \(key)'s metadata in the store does not read", underlying: error)
        }
    }
}
