import Foundation
import NIOCore
import Transcoder

/// Reading only what was written here: object files are opened without following a link (at the file or its two
/// parent directories), must be regular files with a single link, and the video's and poster's sizes must be
/// what the metadata says; hits answered from memory (`HitMemory`) check that the files at the paths are still
/// the very files read.
extension LocalObjects {
    /// The bytes of `file` (object `key`'s `.fileExtension`) kept in memory, if they are.
    func cachedBytes(_ file: StoredFile, key: ObjectKey, fileExtension: String) -> ByteBuffer? {
        self.memory.bytes(.init(key: key, fileExtension: fileExtension), identity: file.identity)
    }

    /// Keeps the bytes just read of `file`: all of it when small, else its head (`keptLength`).
    func keepBytes(_ bytes: ByteBuffer, of file: StoredFile, key: ObjectKey, fileExtension: String) {
        self.memory.keep(
            bytes, of: .init(key: key, fileExtension: fileExtension), identity: file.identity, size: file.size)
    }

    private enum Opened {
        case file(StoredFile)
        case missing
        /// A link, a directory, a device, a file with other names (a hard link): not written by the cache.
        case foreign
        /// Not opened for want of descriptors or memory (`ServiceError.isShortage`): says nothing of the file.
        case unavailable(CInt)
    }

    /// What a failed `open` of a path says of the file there.
    private static func failedOpen(_ code: CInt) -> Opened {
        if code == ENOENT { return .missing }
        return ServiceError.isShortage(errno: code) ? .unavailable(code) : .foreign
    }

    /// Opens `objects/ab/<key>.json`, `.mp4` and `.jpg`, following no symbolic link at the files or their
    /// two parent directories (opened once for the three), and checks each is a regular file with one link.
    private func openObjectFiles(_ key: ObjectKey) -> [String: Opened] {
        let extensions = ObjectFiles.deleteOrder.map(\.fileExtension)
        func all(_ opened: Opened) -> [String: Opened] {
            Dictionary(uniqueKeysWithValues: extensions.map { ($0, opened) })
        }
        let objects = open(self.directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard objects >= 0 else { return all(Self.failedOpen(errno)) }
        defer { close(objects) }
        let shard = openat(objects, String(key.shard), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard shard >= 0 else { return all(Self.failedOpen(errno)) }
        defer { close(shard) }
        var files: [String: Opened] = [:]
        for fileExtension in extensions {
            // O_NONBLOCK: a FIFO planted in place of a file must not block the open.
            let descriptor = openat(
                shard, "\(key).\(fileExtension)", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
            guard descriptor >= 0 else {
                files[fileExtension] = Self.failedOpen(errno)
                continue
            }
            var info = stat()
            guard fstat(descriptor, &info) == 0 else {
                let code = errno
                close(descriptor)
                files[fileExtension] = Self.failedOpen(code)
                continue
            }
            guard info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1 else {
                close(descriptor)
                files[fileExtension] = .foreign
                continue
            }
            files[fileExtension] = .file(
                StoredFile(descriptor: descriptor, size: Int(info.st_size), identity: FileIdentity(info)))
        }
        return files
    }

    /// An object whose files passed the checks, held open: what is served or hashed is what was checked.
    package struct CheckedObject: Sendable {
        let metadata: TranscodeMetadata
        let json: StoredFile
        let video: StoredFile
        let poster: StoredFile
        /// The files the manifest lists besides the video and the poster (`ObjectFiles.extras`), by format.
        let extras: [OutputFormat: StoredFile]

        /// The open file for `.json`, `.mp4`, `.jpg` or an extra the object has.
        func file(_ fileExtension: String) -> StoredFile? {
            switch OutputFormat.withExtension(fileExtension) {
            case ObjectFiles.manifest?: self.json
            case ObjectFiles.video?: self.video
            case ObjectFiles.poster?: self.poster
            case let format?: self.extras[format]
            case nil: nil
            }
        }
    }

    private enum Inspection {
        case missing
        case damaged(String)
        case sound(CheckedObject)
        /// Not checked: the process is short of descriptors or memory. Nothing is known of the object.
        case unavailable(String)
    }

    /// Checks the object `key` without changing anything: its JSON and every file it lists (the video, the
    /// poster, extras) are files the cache wrote and the sizes agree with the metadata.
    private func inspect(_ key: ObjectKey) -> Inspection {
        let files = self.openObjectFiles(key)
        // Out of descriptors, some files could not be opened: the object is not judged on what was.
        for case (let fileExtension, .unavailable(let code)) in files {
            return .unavailable("cannot open the .\(fileExtension) now: \(String(cString: strerror(code)))")
        }
        let json: StoredFile
        switch files[ObjectFiles.manifest.fileExtension] {
        case .missing, nil: return .missing
        case .foreign: return .damaged("the metadata is a link, not a regular file, or has other names")
        case .unavailable: return .unavailable("cannot open the metadata now")
        case .file(let file): json = file
        }
        guard let metadata = self.decodedMetadata(key, json) else { return .damaged("the metadata does not read") }
        // Every file the manifest lists: the video and the poster first, then the extras it was asked for.
        var checked: [OutputFormat: StoredFile] = [:]
        for (entry, format) in ObjectFiles.stored(in: metadata) {
            let (fileExtension, size) = (format.fileExtension, entry.bytes)
            switch files[fileExtension] {
            case .missing, nil: return .damaged("the .\(fileExtension) is missing")
            case .foreign: return .damaged("the .\(fileExtension) is a link, not a regular file, or has other names")
            case .unavailable: return .unavailable("cannot open the .\(fileExtension) now")
            case .file(let file):
                guard file.size == size else {
                    return .damaged("the .\(fileExtension) is \(file.size) bytes; the metadata says \(size)")
                }
                checked[format] = file
            }
        }
        guard let video = checked.removeValue(forKey: ObjectFiles.video),
            let poster = checked.removeValue(forKey: ObjectFiles.poster)
        else { return .damaged("the metadata lists no video or no poster") }
        return .sound(CheckedObject(metadata: metadata, json: json, video: video, poster: poster, extras: checked))
    }

    /// The object `key`, checked (`inspect`), its files held open. A damaged object is quarantined and
    /// reported missing.
    /// - Throws: `overloaded` when the files cannot be opened for want of descriptors or memory: the object is
    ///   neither damaged nor missing, and is left alone.
    func verifiedObject(_ key: ObjectKey) throws -> CheckedObject? {
        switch self.inspect(key) {
        case .missing:
            return nil
        case .unavailable(let reason):
            throw ServiceError.overloaded("object \(key.rawValue.prefix(16)): \(reason)")
        case .damaged:
            self.quarantine(key)
            return nil
        case .sound(let object):
            self.touch(key)
            return object
        }
    }

    /// What `cache verify` found for one object.
    package enum Verdict: Equatable {
        case sound
        /// Sound as far as can be told: written before content hashes were recorded.
        case unhashed
        case damaged(String)
        /// Not checked: the process is short of descriptors or memory (never quarantined for it).
        case unreadable(String)
    }

    /// Checks the object `key` byte for byte: everything `inspect` checks, then the SHA-256 of the video, the
    /// poster and any extra against the metadata. Reads the files whole: for `cache verify`, not for serving.
    func verify(_ key: ObjectKey) -> Verdict {
        switch self.inspect(key) {
        case .missing:
            return .damaged("the object is gone")
        case .damaged(let reason):
            return .damaged(reason)
        case .unavailable(let reason):
            return .unreadable(reason)
        case .sound(let object):
            guard let mp4 = object.metadata.mp4Sha256, let poster = object.metadata.posterSha256 else {
                return .unhashed
            }
            let extras = ObjectFiles.stored(in: object.metadata).compactMap { entry, format in
                object.extras[format].map { (format, $0, entry.sha256 ?? "") }
            }
            for (format, file, expected) in [
                (ObjectFiles.video, object.video, mp4), (ObjectFiles.poster, object.poster, poster),
            ] + extras {
                let fileExtension = format.fileExtension
                guard let digest = file.sha256() else { return .damaged("the .\(fileExtension) does not read") }
                guard digest == expected else { return .damaged("the .\(fileExtension)'s SHA-256 differs") }
            }
            return .sound
        }
    }

    /// The metadata in `json`, decoded once per file identity: decoding was the largest cost of a cache hit
    /// after the network (objects are immutable; a file replaced or rewritten has a new identity).
    private func decodedMetadata(_ key: ObjectKey, _ json: StoredFile) -> TranscodeMetadata? {
        if let cached = self.memory.object(key, identity: json.identity) { return cached.metadata }
        guard let bytes = json.readAll(),
            let metadata = try? JSONDecoder().decode(TranscodeMetadata.self, from: Data(bytes))
        else { return nil }
        self.memory.remember(metadata, of: key, identity: json.identity)
        return metadata
    }

    /// A hit answered from memory alone: the metadata of `key`, the identity (and size) of its `.fileExtension`
    /// and the bytes of it kept in memory (all of a small file, the head of another), when both were checked
    /// and read before and the files at their paths are still those very files (`lstat`, the same identity).
    /// Two `lstat`s instead of opening and checking the three files: what is served are bytes read from a
    /// checked descriptor, so a link or another file put at the path is not followed but misses. `nil` sends the
    /// request the long way (`verifiedObject`), which reads and keeps what is missing, and also when the use
    /// is due to be written to disk: that write blocks, and this runs on an event loop.
    func memoryHit(_ key: ObjectKey, fileExtension: String) -> MemoryHit? {
        guard let object = self.rememberedObject(key), let etag = object.entityTag(fileExtension),
            let file = FileIdentity.current(self.objectPath(key, fileExtension))
        else { return nil }
        guard let bytes = self.memory.bytes(.init(key: key, fileExtension: fileExtension), identity: file),
            !self.recordUse(key, at: self.now(), onlyIfNotDue: true)
        else { return nil }
        return MemoryHit(metadata: object.metadata, etag: etag, file: file, bytes: bytes)
    }

    /// A file answerable from memory (`memoryHit`).
    package struct MemoryHit {
        let metadata: TranscodeMetadata
        /// The file's entity tag (`ObjectKey.entityTag`).
        package let etag: String
        /// The identity (and size) of the file.
        package let file: FileIdentity
        /// The bytes of it kept in memory: all of a small file, the head of another.
        package let bytes: ByteBuffer
    }

    /// Opens object `key`'s `.fileExtension` for the bytes of a `memoryHit` past those kept in memory, when the
    /// file opened is still the very file `identity` names (`fstat` of the descriptor: the path may have
    /// changed since the `lstat`). The caller closes the descriptor. Once open, the bytes stay readable
    /// whatever happens at the path (an eviction or a purge unlinks, it does not change the file).
    func openUnchanged(_ key: ObjectKey, fileExtension: String, identity: FileIdentity) -> CInt? {
        // O_NONBLOCK: a FIFO put at the path must not block the event loop (its identity would not match).
        let descriptor = open(self.objectPath(key, fileExtension), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG, FileIdentity(info) == identity else {
            close(descriptor)
            return nil
        }
        return descriptor
    }

    /// The metadata of `key` for a hit that serves none of the object's bytes (a cache-hit `POST /transcode`
    /// answered from memory): its JSON still the file decoded before, its video and poster regular files of the
    /// sizes the metadata says (what `verifiedObject` checks of them), its use not due to be written. Three
    /// `lstat`s; `nil` sends the request the long way.
    func memoryObject(_ key: ObjectKey) -> TranscodeMetadata? {
        guard let metadata = self.rememberedObject(key)?.metadata,
            FileIdentity.current(self.objectPath(key, ObjectFiles.video))?.size == metadata.mp4Bytes,
            FileIdentity.current(self.objectPath(key, ObjectFiles.poster))?.size == metadata.posterBytes,
            !self.recordUse(key, at: self.now(), onlyIfNotDue: true)
        else { return nil }
        return metadata
    }

    /// The object decoded from `key`'s JSON while that file is still the one decoded (`lstat`).
    private func rememberedObject(_ key: ObjectKey) -> HitMemory.RememberedObject? {
        guard let json = FileIdentity.current(self.objectPath(key, ObjectFiles.manifest)) else { return nil }
        return self.memory.object(key, identity: json)
    }
}
