import NIOCore
import Transcoder

/// One file of a stored object, opened, checked and pinned for serving (`ReadThroughResults.serve`): what a media
/// route answers from. The route sees the file's size, entity tag and bytes, never the store's directories,
/// pins or hit memory.
package struct ServedFile: Sendable {
    /// The file's strong entity tag (`ObjectKey.entityTag`).
    package let etag: String
    private let key: ObjectKey
    private let fileExtension: String
    private let file: StoredFile
    private let objects: LocalObjects

    fileprivate init(key: ObjectKey, fileExtension: String, file: StoredFile, etag: String, objects: LocalObjects) {
        (self.key, self.fileExtension, self.file, self.etag, self.objects) = (key, fileExtension, file, etag, objects)
    }

    package var size: Int { self.file.size }

    /// The opened file, read by range.
    package var reader: any ObjectFileReader { self.file }

    /// How many of its first bytes are kept in memory once read (`HitMemory.keptLength`): all of a small file,
    /// the head of a larger one.
    package var keptLength: Int { HitMemory.keptLength(ofFileOfSize: self.file.size) }

    /// The bytes kept in memory (`keptLength` of them), read on the I/O pool and kept the first time: from then
    /// on the hits on this file are answered ahead of the router (`MediaHitHandler`).
    package func keptBytes() async throws -> ByteBuffer {
        if let kept = self.objects.cachedBytes(self.file, key: self.key, fileExtension: self.fileExtension) {
            return kept
        }
        let kept = try await self.file.read(at: 0, length: self.keptLength)
        self.objects.keepBytes(kept, of: self.file, key: self.key, fileExtension: self.fileExtension)
        return kept
    }

    /// Ends the pin: the object may be evicted again. Called once, when the answer's last byte is written (or
    /// the answer is not sent).
    package func release() {
        self.objects.endServing(self.key)
    }
}

extension ReadThroughResults {
    /// Where a file of a stored object is served from.
    package enum Serving {
        /// This disk: the file, pinned until `ServedFile.release`.
        case file(ServedFile)
        /// The shared store, at a presigned URL a client may follow for `cacheSeconds`
        /// (`storage.s3.serve: redirect`).
        case redirect(url: String, cacheSeconds: Int)
    }

    /// Opens object `key`'s `.fileExtension` for serving: from this disk, after the anti-tamper checks
    /// (`LocalObjects.verifiedObject`) and the takedown rule (`Takedowns.check`); on a miss in a fleet, pulled
    /// from the shared store onto this disk first, or redirected to the store.
    /// - Parameter checked: the object, when the caller has just checked its files and tombstones: not checked
    ///   again.
    /// - Throws: `not-found` when no store has it (or not that file); `taken-down` when it, or its GIF, was
    ///   taken down; `storage-unavailable` when the shared store fails.
    package func serve(_ key: ObjectKey, fileExtension: String, checked: LocalObjects.CheckedObject? = nil) async throws
        -> Serving
    {
        let objects = self.local.objects
        if !objects.beginServing(key) {
            if self.takedowns.isBuriedHere(.object(key)) {
                throw ServiceError.takenDown("this media was taken down")
            }
            guard let shared = self.shared else { throw ServiceError.notFound("no such media") }
            if let redirect = shared.redirect {
                guard let metadata = try await shared.metadata(key) else {
                    throw ServiceError.notFound("no such media")
                }
                try await self.takedowns.check(key, metadata: metadata)
                return .redirect(
                    url: redirect.url(S3ResultStore.objectName(key, fileExtension)),
                    cacheSeconds: redirect.cacheSeconds)
            }
            // Pulled, then checked on this disk like any local object.
            guard try await self.object(key) != nil, objects.beginServing(key) else {
                throw ServiceError.notFound("no such media")
            }
            return try await self.opened(key, fileExtension: fileExtension, checked: nil)
        }
        return try await self.opened(key, fileExtension: fileExtension, checked: checked)
    }

    /// The file of object `key`, pinned by the caller: the pin ends here when it cannot be served.
    private func opened(_ key: ObjectKey, fileExtension: String, checked: LocalObjects.CheckedObject?) async throws
        -> Serving
    {
        let objects = self.local.objects
        do {
            let object: LocalObjects.CheckedObject
            if let checked {
                object = checked
            } else {
                guard let verified = try objects.verifiedObject(key) else {
                    throw ServiceError.notFound("no such media")
                }
                try await self.takedowns.check(key, metadata: verified.metadata, recently: true)
                object = verified
            }
            guard let file = object.file(fileExtension) else { throw ServiceError.notFound("no such media") }
            return .file(
                ServedFile(
                    key: key, fileExtension: fileExtension, file: file,
                    etag: key.entityTag(fileExtension: fileExtension, metadata: object.metadata), objects: objects))
        } catch {
            objects.endServing(key)
            throw error
        }
    }
}
