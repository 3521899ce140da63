import Crypto
import Foundation
import NIOCore
import Synchronization
import Transcoder

/// The on-disk result store: content stored once, reached by key through symlinks.
///
/// ```
/// objects/ab/<key>.mp4 .jpg .json    key = SHA-256 of the GIF's bytes and the output options
/// urls/<url-key> -> ../objects/ab/<key>.json    url-key = SHA-256 of the normalized URL and the options
/// urls/<url-key>.source                 the URL and its validators (ETag, Last-Modified), for revalidation
/// sources/ab/<source-hash>/<url-key>    every link of one URL (all its options), for a purge by URL
/// tombstones/<kind>-<hash>              taken down: an object key, a GIF's SHA-256 or a source hash
/// tmp/                                  downloads in progress; emptied at startup
/// quarantine/<key>.<ext>.<time>         objects found damaged or tampered with, kept for inspection
/// ```
/// Objects are written by the transcoder under temporary names, synced and renamed, the JSON last, so
/// an object exists exactly when its JSON does. Links are created under a temporary name and renamed
/// over. A dangling or malformed link is a miss. Beyond `maxBytes`, the least recently used objects are
/// evicted, never one that is being served.
///
/// Only what the cache wrote is ever served or reported: object files are opened without following a link
/// (at the file or its two parent directories), must be regular files with a single link, and the video's
/// and poster's sizes must be what the metadata says. Anything else is a miss: the object is moved to
/// `quarantine/` and the next request converts it again.
///
/// File operations are short syscalls; the transcode itself runs on the transcode pool.
final class DiskCache: Sendable {
    let root: String
    let maxBytes: Int64
    private let state: Mutex<State>
    private let decoded = Mutex<[ObjectKey: (identity: FileIdentity, metadata: TranscodeMetadata)]>([:])
    private let smallFiles = Mutex(SmallFiles())
    /// The object each URL link was last read to point to, by the link's identity (`freshLink`).
    private let linkTargets = Mutex<[URLKey: (identity: FileIdentity, key: ObjectKey)]>([:])
    /// The names in `tombstones/` as last read, and the directory's stamp then (`settledTombstones`).
    let tombstoneNames = Mutex<(stamp: DirectoryStamp, names: Set<String>)?>(nil)
    private let onEviction: @Sendable (Int) -> Void
    private let onQuarantine: @Sendable (ObjectKey) -> Void
    /// The time uses are recorded at (a test's own clock).
    private let now: @Sendable () -> Date

    private struct State {
        var objects: [ObjectKey: Object] = [:]
        var totalBytes: Int64 = 0
        var serving: [ObjectKey: Int] = [:]
        var evictions = 0
    }

    private struct Object {
        var bytes: Int64
        var lastUse: Date
        /// The last use written to disk (the JSON's modification time).
        var persistedUse: Date
    }

    // Stored, not computed: a cache hit builds paths under them (each was an allocation per use).
    let objectsDirectory: String
    let urlsDirectory: String
    let tombstonesDirectory: String
    var temporaryDirectory: String { self.root + "/tmp" }
    var quarantineDirectory: String { self.root + "/quarantine" }

    /// Opens (or creates) the cache at `root`, removes what a killed process left behind, and indexes
    /// the objects. - Throws: when the directories cannot be created.
    /// - Parameter cleanUp: remove what a killed process left behind (the server, which owns the cache);
    ///   false to only index it (a command run beside a live server must not touch its temporary files).
    init(
        root: String, maxBytes: Int64, cleanUp: Bool = true, onEviction: @escaping @Sendable (Int) -> Void = { _ in },
        onQuarantine: @escaping @Sendable (ObjectKey) -> Void = { _ in },
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        self.root = URL(fileURLWithPath: root).standardizedFileURL.path
        (self.objectsDirectory, self.urlsDirectory, self.tombstonesDirectory) =
            (self.root + "/objects", self.root + "/urls", self.root + "/tombstones")
        self.maxBytes = maxBytes
        self.now = now
        self.onEviction = onEviction
        self.onQuarantine = onQuarantine
        self.state = Mutex(State())
        let fileManager = FileManager.default
        for directory in [
            self.objectsDirectory, self.urlsDirectory, self.quarantineDirectory, self.sourcesDirectory,
            self.tombstonesDirectory,
        ] {
            try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        if cleanUp { try? fileManager.removeItem(atPath: self.temporaryDirectory) }
        try fileManager.createDirectory(atPath: self.temporaryDirectory, withIntermediateDirectories: true)
        self.sweepAndIndex(cleanUp: cleanUp)
    }

    // MARK: Paths

    func objectPath(_ key: ObjectKey, _ fileExtension: String) -> String {
        "\(self.objectsDirectory)/\(key.shard)/\(key.rawValue).\(fileExtension)"
    }

    func objectPath(_ key: ObjectKey, _ format: OutputFormat) -> String {
        self.objectPath(key, format.fileExtension)
    }

    func urlLinkPath(_ urlKey: URLKey) -> String { "\(self.urlsDirectory)/\(urlKey.rawValue)" }

    // MARK: Lookups

    /// The object a URL key links to, if the link exists and its object is complete.
    /// - Parameter checkingObject: false for a caller that checks the object's files itself.
    func lookup(urlKey: URLKey, checkingObject: Bool = true) -> ObjectKey? {
        guard let target = Self.readLink(self.urlLinkPath(urlKey)) else { return nil }
        let name = target.split(separator: "/").last ?? ""
        let suffix = "." + ObjectFiles.manifest.fileExtension
        guard name.hasSuffix(suffix), let key = ObjectKey(name.dropLast(suffix.count)),
            !checkingObject || self.contains(key)
        else { return nil }
        return key
    }

    /// The object a URL key links to and the link's age, from one `lstat` of the link while it is the link read
    /// before (the same `FileIdentity`: a link's target never changes in place, relinking makes a new one, and
    /// renewing it changes its times), else `lstat` and `readlink`. For a hit answered from
    /// memory, which checks the object's files itself.
    func freshLink(urlKey: URLKey) -> (key: ObjectKey, age: TimeInterval)? {
        var info = stat()
        let path = self.urlLinkPath(urlKey)
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFLNK else { return nil }
        let age = Self.age(info)
        let identity = FileIdentity(info)
        if let known = self.linkTargets.withLock({ $0[urlKey] }), known.identity == identity {
            return (known.key, age)
        }
        guard let key = self.lookup(urlKey: urlKey, checkingObject: false) else { return nil }
        // Read after the lstat: a link replaced in between is stored under the old identity, which no later
        // lstat matches.
        self.linkTargets.withLock { targets in
            if targets.count >= Self.decodedCapacity { targets.removeAll(keepingCapacity: true) }
            targets[urlKey] = (identity, key)
        }
        return (key, age)
    }

    /// The target of the symbolic link at `path` (`readlink`), nil when it is not a link.
    static func readLink(_ path: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: 512)
        let count = buffer.withUnsafeMutableBufferPointer { pointer in
            pointer.withMemoryRebound(to: CChar.self) { readlink(path, $0.baseAddress!, $0.count) }
        }
        guard count > 0, count < buffer.count else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }

    /// Whether the object `key` is complete on disk.
    func contains(_ key: ObjectKey) -> Bool {
        access(self.objectPath(key, ObjectFiles.manifest), F_OK) == 0
    }

    /// The stored metadata of `key`, marking it used; `nil` when the object is missing or fails the checks
    /// (then it is quarantined).
    func metadata(_ key: ObjectKey) -> TranscodeMetadata? {
        self.verifiedObject(key)?.metadata
    }

    // MARK: Reading only what the cache wrote

    /// An object file opened for reading; the descriptor is closed when the last reference goes.
    final class OpenFile: Sendable {
        let descriptor: CInt
        let size: Int
        /// A file rewritten in place or replaced has another identity.
        let identity: FileIdentity

        fileprivate init(descriptor: CInt, size: Int, identity: FileIdentity) {
            self.descriptor = descriptor
            self.size = size
            self.identity = identity
        }

        deinit {
            close(self.descriptor)
        }
    }

    private enum Opened {
        case file(OpenFile)
        case missing
        /// A link, a directory, a device, a file with other names (a hard link): not written by the cache.
        case foreign
    }

    /// Opens `objects/ab/<key>.json`, `.mp4` and `.jpg`, following no symbolic link at the files or their
    /// two parent directories (opened once for the three), and checks each is a regular file with one link.
    private func openObjectFiles(_ key: ObjectKey) -> [String: Opened] {
        let extensions = ObjectFiles.deleteOrder.map(\.fileExtension)
        func all(_ opened: Opened) -> [String: Opened] {
            Dictionary(uniqueKeysWithValues: extensions.map { ($0, opened) })
        }
        let objects = open(self.objectsDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard objects >= 0 else { return all(errno == ENOENT ? .missing : .foreign) }
        defer { close(objects) }
        let shard = openat(objects, String(key.shard), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard shard >= 0 else { return all(errno == ENOENT ? .missing : .foreign) }
        defer { close(shard) }
        var files: [String: Opened] = [:]
        for fileExtension in extensions {
            // O_NONBLOCK: a FIFO planted in place of a file must not block the open.
            let descriptor = openat(
                shard, "\(key).\(fileExtension)", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
            guard descriptor >= 0 else {
                files[fileExtension] = errno == ENOENT ? .missing : .foreign
                continue
            }
            var info = stat()
            guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1 else {
                close(descriptor)
                files[fileExtension] = .foreign
                continue
            }
            files[fileExtension] = .file(
                OpenFile(descriptor: descriptor, size: Int(info.st_size), identity: FileIdentity(info)))
        }
        return files
    }

    /// Device, inode, size, modification and change times: the same identity means the very file that was
    /// checked, unchanged (a rename, a new link or a write changes the change time). A value, not an array: a
    /// cache hit takes two or three of them.
    struct FileIdentity: Equatable, Sendable {
        let device: UInt64
        let inode: UInt64
        let size: Int
        let modified: timespec
        let changed: timespec

        init(_ info: stat) {
            (self.device, self.inode, self.size) = (UInt64(info.st_dev), UInt64(info.st_ino), Int(info.st_size))
            (self.modified, self.changed) = (info.st_mtim, info.st_ctim)
        }

        static func == (a: Self, b: Self) -> Bool {
            a.device == b.device && a.inode == b.inode && a.size == b.size
                && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
                && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
        }
    }

    /// An object whose files passed the checks, held open: what is served or hashed is what was checked.
    struct CheckedObject: Sendable {
        let metadata: TranscodeMetadata
        let json: OpenFile
        let video: OpenFile
        let poster: OpenFile

        /// The open file for `.json`, `.mp4` or `.jpg`.
        func file(_ fileExtension: String) -> OpenFile? {
            switch OutputFormat.withExtension(fileExtension) {
            case ObjectFiles.manifest?: self.json
            case ObjectFiles.video?: self.video
            case ObjectFiles.poster?: self.poster
            default: nil
            }
        }
    }

    private enum Inspection {
        case missing
        case damaged(String)
        case sound(CheckedObject)
    }

    /// Checks the object `key` without changing anything: its JSON, video and poster are files the cache
    /// wrote and the sizes agree with the metadata.
    private func inspect(_ key: ObjectKey) -> Inspection {
        let files = self.openObjectFiles(key)
        let json: OpenFile
        switch files[ObjectFiles.manifest.fileExtension] {
        case .missing, nil: return .missing
        case .foreign: return .damaged("the metadata is a link, not a regular file, or has other names")
        case .file(let file): json = file
        }
        guard let metadata = self.decodedMetadata(key, json) else { return .damaged("the metadata does not read") }
        var checked: [OpenFile] = []
        for format in ObjectFiles.media {
            let (fileExtension, size) = (format.fileExtension, ObjectFiles.recordedSize(of: format, in: metadata) ?? 0)
            switch files[fileExtension] {
            case .missing, nil: return .damaged("the .\(fileExtension) is missing")
            case .foreign: return .damaged("the .\(fileExtension) is a link, not a regular file, or has other names")
            case .file(let file):
                guard file.size == size else {
                    return .damaged("the .\(fileExtension) is \(file.size) bytes; the metadata says \(size)")
                }
                checked.append(file)
            }
        }
        return .sound(CheckedObject(metadata: metadata, json: json, video: checked[0], poster: checked[1]))
    }

    /// The object `key`, checked (`inspect`), its files held open. A damaged object is quarantined and
    /// reported missing.
    func verifiedObject(_ key: ObjectKey) -> CheckedObject? {
        switch self.inspect(key) {
        case .missing:
            return nil
        case .damaged:
            self.quarantine(key)
            return nil
        case .sound(let object):
            self.touch(key)
            return object
        }
    }

    /// What `cache verify` found for one object.
    enum Verdict: Equatable {
        case sound
        /// Sound as far as can be told: written before content hashes were recorded.
        case unhashed
        case damaged(String)
    }

    /// Checks the object `key` byte for byte: everything `inspect` checks, then the SHA-256 of the video and
    /// the poster against the metadata. Reads both files whole: for `cache verify`, not for serving.
    func verify(_ key: ObjectKey) -> Verdict {
        switch self.inspect(key) {
        case .missing:
            return .damaged("the object is gone")
        case .damaged(let reason):
            return .damaged(reason)
        case .sound(let object):
            guard let mp4 = object.metadata.mp4Sha256, let poster = object.metadata.posterSha256 else {
                return .unhashed
            }
            for (format, file, expected) in [
                (ObjectFiles.video, object.video, mp4), (ObjectFiles.poster, object.poster, poster),
            ] {
                let fileExtension = format.fileExtension
                guard let digest = Self.sha256(file) else { return .damaged("the .\(fileExtension) does not read") }
                guard digest == expected else { return .damaged("the .\(fileExtension)'s SHA-256 differs") }
            }
            return .sound
        }
    }

    /// The keys of the objects indexed.
    var indexedKeys: [ObjectKey] { self.state.withLock { Array($0.objects.keys) }.sorted() }

    private static func sha256(_ file: OpenFile) -> String? {
        var hash = SHA256()
        var block = [UInt8](repeating: 0, count: 1 << 20)
        var offset = 0
        while offset < file.size {
            let count = block.withUnsafeMutableBytes {
                pread(file.descriptor, $0.baseAddress, min($0.count, file.size - offset), off_t(offset))
            }
            guard count > 0 else { return nil }
            hash.update(data: block[0..<count])
            offset += count
        }
        return HexDigest.encode(hash.finalize())
    }

    /// The metadata in `json`, decoded once per file identity: decoding was the largest cost of a cache hit
    /// after the network (objects are immutable; a file replaced or rewritten has a new identity).
    private func decodedMetadata(_ key: ObjectKey, _ json: OpenFile) -> TranscodeMetadata? {
        if let cached = self.decoded.withLock({ $0[key] }), cached.identity == json.identity {
            return cached.metadata
        }
        guard let bytes = Self.readAll(json),
            let metadata = try? JSONDecoder().decode(TranscodeMetadata.self, from: Data(bytes))
        else { return nil }
        self.decoded.withLock { decoded in
            if decoded.count >= Self.decodedCapacity { decoded.removeAll(keepingCapacity: true) }
            decoded[key] = (json.identity, metadata)
        }
        return metadata
    }

    /// Decoded metadata kept in memory: a few hundred bytes each.
    static var decodedCapacity: Int { 16_384 }

    // MARK: Small files in memory

    /// The bytes of object files kept in memory (`keptLength`: all of a file of at most `smallFileLimit` bytes,
    /// the head of a larger one), by file identity (objects are immutable; a
    /// file replaced or rewritten has another identity, so what is kept is what was checked), up to
    /// `smallFilesCapacity` bytes in all, the least recently used dropped first. A hit on a small file then
    /// costs no read at all: every read is a hop to the I/O thread pool, which cost most of a hit's time.
    private struct SmallFiles {
        var entries: [FileName: (identity: FileIdentity, bytes: ByteBuffer, lastUse: UInt64)] = [:]
        var total = 0
        var clock: UInt64 = 0
    }

    static var smallFileLimit: Int { 256 * 1024 }
    static var smallFilesCapacity: Int { 64 * 1024 * 1024 }
    /// Of a larger file, its first bytes are kept: players' first probes (`bytes=0-1`) and the `moov` box
    /// (written first, `faststart`) are read from there.
    static var headLength: Int { 64 * 1024 }

    /// How many bytes of a file of `size` bytes are kept in memory: all of a small file, the head of another.
    static func keptLength(ofFileOfSize size: Int) -> Int {
        size <= Self.smallFileLimit ? size : min(size, Self.headLength)
    }

    /// The bytes of `file` (object `key`'s `.fileExtension`) kept in memory (`keptLength`: the whole file or
    /// its head), if they are.
    func cachedBytes(_ file: OpenFile, key: ObjectKey, fileExtension: String) -> ByteBuffer? {
        self.keptBytes(FileName(key: key, fileExtension: fileExtension), identity: file.identity)
    }

    /// An object file's name in `SmallFiles`: hashed as it is, where joining the two was an allocation per hit.
    private struct FileName: Hashable {
        let key: ObjectKey
        let fileExtension: String
    }

    private func keptBytes(_ name: FileName, identity: FileIdentity) -> ByteBuffer? {
        self.smallFiles.withLock { cache in
            guard let index = cache.entries.index(forKey: name), cache.entries.values[index].identity == identity
            else { return nil }
            cache.clock += 1
            cache.entries.values[index].lastUse = cache.clock
            return cache.entries.values[index].bytes
        }
    }

    /// A hit answered from memory alone: the metadata of `key`, the identity (and size) of its `.fileExtension`
    /// and the bytes of it kept in memory (all of a small file, the head of another), when both were checked
    /// and read before and the files at their paths are still those very files (`lstat`, the same identity).
    /// Two `lstat`s instead of opening and checking the three files: what is served are bytes read from a
    /// checked descriptor, so a link or another file put at the path is not followed but misses. `nil` sends the
    /// request the long way (`verifiedObject`), which reads and keeps what is missing, and also when the use
    /// is due to be written to disk: that write blocks, and this runs on an event loop.
    func memoryHit(_ key: ObjectKey, fileExtension: String) -> (
        metadata: TranscodeMetadata, file: FileIdentity, bytes: ByteBuffer
    )? {
        guard let metadata = self.memoryMetadata(key),
            let file = Self.currentIdentity(self.objectPath(key, fileExtension))
        else { return nil }
        guard let bytes = self.keptBytes(FileName(key: key, fileExtension: fileExtension), identity: file),
            !self.recordUse(key, at: self.now(), onlyIfNotDue: true)
        else { return nil }
        return (metadata, file, bytes)
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
        guard let metadata = self.memoryMetadata(key),
            Self.currentIdentity(self.objectPath(key, ObjectFiles.video))?.size == metadata.mp4Bytes,
            Self.currentIdentity(self.objectPath(key, ObjectFiles.poster))?.size == metadata.posterBytes,
            !self.recordUse(key, at: self.now(), onlyIfNotDue: true)
        else { return nil }
        return metadata
    }

    /// The metadata decoded from `key`'s JSON while that file is still the one decoded (`lstat`).
    private func memoryMetadata(_ key: ObjectKey) -> TranscodeMetadata? {
        guard let json = Self.currentIdentity(self.objectPath(key, ObjectFiles.manifest)) else { return nil }
        return self.decoded.withLock({ $0[key] }).flatMap({ $0.identity == json ? $0.metadata : nil })
    }

    /// The identity of the regular file with one link at `path` (`lstat`, no link followed).
    private static func currentIdentity(_ path: String) -> FileIdentity? {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1 else { return nil }
        return FileIdentity(info)
    }

    /// Keeps the bytes just read of a file: all of it when small, else its head (`keptLength`).
    func keepBytes(_ bytes: ByteBuffer, of file: OpenFile, key: ObjectKey, fileExtension: String) {
        guard bytes.readableBytes == Self.keptLength(ofFileOfSize: file.size) else { return }
        let name = FileName(key: key, fileExtension: fileExtension)
        self.smallFiles.withLock { cache in
            if let old = cache.entries.removeValue(forKey: name) { cache.total -= old.bytes.readableBytes }
            while cache.total + bytes.readableBytes > Self.smallFilesCapacity,
                let oldest = cache.entries.min(by: { $0.value.lastUse < $1.value.lastUse })
            {
                cache.total -= oldest.value.bytes.readableBytes
                cache.entries[oldest.key] = nil
            }
            cache.clock += 1
            cache.entries[name] = (file.identity, bytes, cache.clock)
            cache.total += bytes.readableBytes
        }
    }

    static func readAll(_ file: OpenFile) -> [UInt8]? {
        // Metadata is a few hundred bytes; anything much larger was not written by the cache.
        guard file.size <= 1 << 20 else { return nil }
        var bytes = [UInt8](repeating: 0, count: file.size)
        let count = bytes.withUnsafeMutableBytes { pread(file.descriptor, $0.baseAddress, file.size, 0) }
        return count == file.size ? bytes : nil
    }

    /// Moves the object's files aside (the JSON first, so the object is a miss from then on) and forgets
    /// it; the next request for it converts it again.
    func quarantine(_ key: ObjectKey) {
        let stamp = Int(Date().timeIntervalSince1970)
        for fileExtension in ObjectFiles.deleteOrder.map(\.fileExtension) {
            rename(self.objectPath(key, fileExtension), "\(self.quarantineDirectory)/\(key).\(fileExtension).\(stamp)")
        }
        self.state.withLock { state in
            if let object = state.objects.removeValue(forKey: key) { state.totalBytes -= object.bytes }
        }
        _ = self.decoded.withLock { $0.removeValue(forKey: key) }
        self.onQuarantine(key)
    }

    /// Deletes the object's files (the JSON first, so it is a miss from then on) and forgets it. A response
    /// already streaming one of them finishes: it reads from a descriptor opened before.
    /// - Returns: whether there was anything to delete.
    @discardableResult
    func remove(_ key: ObjectKey) -> Bool {
        var removed = false
        for fileExtension in ObjectFiles.deleteOrder.map(\.fileExtension)
        where unlink(self.objectPath(key, fileExtension)) == 0 {
            removed = true
        }
        self.state.withLock { state in
            if let object = state.objects.removeValue(forKey: key) { state.totalBytes -= object.bytes }
        }
        _ = self.decoded.withLock { $0.removeValue(forKey: key) }
        return removed
    }

    // MARK: Writes

    /// Converts `gif` into the object `key` unless it is already there. Blocking: call it on the
    /// transcode pool. - Throws: `TranscodeError`.
    func store(gif: [UInt8], key: ObjectKey, transcoder: Transcoder) throws -> TranscodeMetadata {
        if let existing = self.metadata(key) { return existing }
        let directory = "\(self.objectsDirectory)/\(key.shard)"
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw TranscodeError(.io, "cannot create \(directory)", underlying: error)
        }
        let metadata = try transcoder.convert(gif, directory: directory, name: key.rawValue)
        self.indexStored(key, metadata: metadata)
        return metadata
    }

    /// Moves object `key`'s files from `directory` (on the cache's file system, e.g. under `tmp/`) into
    /// `objects/ab/`, the JSON last, after checking the files are what their metadata says. What a shared store
    /// hands over to the local cache goes through here. - Throws: `TranscodeError` `.io`.
    func adopt(_ key: ObjectKey, from directory: String) throws {
        let source = { (fileExtension: String) in "\(directory)/\(key).\(fileExtension)" }
        guard let data = FileManager.default.contents(atPath: source(ObjectFiles.manifest.fileExtension)),
            let metadata = try? JSONDecoder().decode(TranscodeMetadata.self, from: data)
        else { throw TranscodeError(.io, "object \(key) has no readable metadata") }
        for format in ObjectFiles.media {
            let (fileExtension, size) = (format.fileExtension, ObjectFiles.recordedSize(of: format, in: metadata) ?? 0)
            guard self.fileSize(source(fileExtension)) == Int64(size) else {
                throw TranscodeError(.io, "object \(key): the .\(fileExtension) is not the size its metadata says")
            }
        }
        let shard = "\(self.objectsDirectory)/\(key.shard)"
        do {
            try FileManager.default.createDirectory(atPath: shard, withIntermediateDirectories: true)
        } catch {
            throw TranscodeError(.io, "cannot create \(shard)", underlying: error)
        }
        for fileExtension in ObjectFiles.commitOrder.map(\.fileExtension) {
            guard rename(source(fileExtension), self.objectPath(key, fileExtension)) == 0 else {
                throw TranscodeError(
                    .io, "cannot move \(key).\(fileExtension) into the cache: \(String(cString: strerror(errno)))")
            }
        }
        self.indexStored(key, metadata: metadata)
    }

    /// Indexes a complete object just written and evicts others if the cache is over its size.
    private func indexStored(_ key: ObjectKey, metadata: TranscodeMetadata) {
        let bytes =
            Int64(metadata.mp4Bytes + metadata.posterBytes) + self.fileSize(self.objectPath(key, ObjectFiles.manifest))
        self.state.withLock { state in
            if let old = state.objects[key] { state.totalBytes -= old.bytes }
            let now = self.now()
            state.objects[key] = Object(bytes: bytes, lastUse: now, persistedUse: now)
            state.totalBytes += bytes
        }
        self.evictIfNeeded(keeping: key)
    }

    /// Copies an open object file to `path` (created, or truncated). - Throws: `TranscodeError` `.io`.
    static func copy(_ file: OpenFile, to path: String) throws {
        let output = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard output >= 0 else { throw TranscodeError(.io, "cannot create \(path)") }
        defer { close(output) }
        var block = [UInt8](repeating: 0, count: 1 << 20)
        var offset = 0
        while offset < file.size {
            let count = block.withUnsafeMutableBytes {
                pread(file.descriptor, $0.baseAddress, min($0.count, file.size - offset), off_t(offset))
            }
            guard count > 0,
                block.withUnsafeBytes({ write(output, $0.baseAddress, count) }) == count
            else { throw TranscodeError(.io, "cannot copy to \(path)") }
            offset += count
        }
    }

    /// Points `urlKey` at the object `key`: a symlink made under a temporary name and renamed over. The
    /// link's own modification time is when the URL was last fetched or revalidated (`linkAge`).
    /// - Parameter source: the URL and its validators, written beside the link first, and indexed under
    ///   the URL's source hash for a purge by URL; nil for tests that only need the link.
    func link(urlKey: URLKey, to key: ObjectKey, source: SourceRecord? = nil) throws {
        if let source { try self.writeSource(source, urlKey: urlKey, key: key) }
        let target = "../objects/\(key.shard)/" + key.fileName(ObjectFiles.manifest)
        let temporary = "\(self.urlsDirectory)/.\(urlKey).tmp-\(UInt64.random(in: 0...UInt64.max))"
        guard symlink(target, temporary) == 0 else {
            throw TranscodeError(
                .io, "cannot create a link in \(self.urlsDirectory): \(String(cString: strerror(errno)))")
        }
        guard rename(temporary, self.urlLinkPath(urlKey)) == 0 else {
            unlink(temporary)
            throw TranscodeError(.io, "cannot rename a link in \(self.urlsDirectory)")
        }
    }

    // MARK: Serving and eviction

    /// Marks `key` as being served (not evictable) until `endServing`. Returns false when it is not stored.
    func beginServing(_ key: ObjectKey) -> Bool {
        guard self.contains(key) else { return false }
        self.state.withLock { $0.serving[key, default: 0] += 1 }
        self.touch(key)
        return true
    }

    func endServing(_ key: ObjectKey) {
        self.state.withLock { state in
            if let count = state.serving[key], count > 1 {
                state.serving[key] = count - 1
            } else {
                state.serving[key] = nil
            }
        }
    }

    /// Whether files can be created in the cache (readiness).
    var isWritable: Bool {
        let probe = "\(self.temporaryDirectory)/.ready-\(UInt64.random(in: 0...UInt64.max))"
        let descriptor = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { return false }
        close(descriptor)
        unlink(probe)
        return true
    }

    /// Bytes available to this process on the cache's file system, or nil when it cannot be read.
    var freeBytes: Int64? {
        var info = statvfs()
        guard statvfs(self.root, &info) == 0 else { return nil }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    /// Bytes stored and objects evicted so far.
    var usage: (bytes: Int64, objects: Int, evictions: Int) {
        self.state.withLock { ($0.totalBytes, $0.objects.count, $0.evictions) }
    }

    private func touch(_ key: ObjectKey) {
        let now = self.now()
        if self.recordUse(key, at: now, onlyIfNotDue: false) {
            try? FileManager.default.setAttributes(
                [.modificationDate: now], ofItemAtPath: self.objectPath(key, ObjectFiles.manifest))
        }
    }

    /// Records a use of `key` in memory. The modification time of the JSON is the persisted "last use" (what
    /// eviction order starts from after a restart), written at most once a minute, however often the object
    /// is used. - Returns: whether it is due now (the caller writes it); with `onlyIfNotDue`, a use that
    /// would make it due is not recorded (the caller leaves the request to a path that may block).
    private func recordUse(_ key: ObjectKey, at now: Date, onlyIfNotDue: Bool) -> Bool {
        self.state.withLock { state in
            guard var object = state.objects[key] else { return false }
            let due = now.timeIntervalSince(object.persistedUse) > 60
            if due, onlyIfNotDue { return true }
            object.lastUse = now
            if due { object.persistedUse = now }
            state.objects[key] = object
            return due
        }
    }

    private func evictIfNeeded(keeping kept: ObjectKey) {
        let victims: [ObjectKey] = self.state.withLock { state in
            guard state.totalBytes > self.maxBytes else { return [] }
            var victims: [ObjectKey] = []
            var total = state.totalBytes
            for (key, object) in state.objects.sorted(by: { $0.value.lastUse < $1.value.lastUse }) {
                guard total > self.maxBytes else { break }
                guard key != kept, state.serving[key] == nil else { continue }
                victims.append(key)
                total -= object.bytes
                state.totalBytes -= object.bytes
                state.objects[key] = nil
                state.evictions += 1
            }
            return victims
        }
        if !victims.isEmpty { self.onEviction(victims.count) }
        for key in victims {
            // The JSON first: from then on the object is a miss, whatever happens to the rest.
            for format in ObjectFiles.deleteOrder { unlink(self.objectPath(key, format)) }
        }
    }

    private func fileSize(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_size) : 0
    }

    /// Removes temporary leftovers and incomplete objects of a killed process, then indexes the rest.
    private func sweepAndIndex(cleanUp: Bool) {
        let fileManager = FileManager.default
        var objects: [ObjectKey: Object] = [:]
        for shard in (try? fileManager.contentsOfDirectory(atPath: self.objectsDirectory)) ?? [] {
            let directory = "\(self.objectsDirectory)/\(shard)"
            let names = (try? fileManager.contentsOfDirectory(atPath: directory)) ?? []
            var groups: [String: [String]] = [:]
            for name in names {
                if name.contains(".tmp-") {
                    if cleanUp { unlink("\(directory)/\(name)") }
                    continue
                }
                // Only regular files with one link count; anything else was not written by the cache.
                var info = stat()
                guard lstat("\(directory)/\(name)", &info) == 0, info.st_mode & S_IFMT == S_IFREG,
                    info.st_nlink == 1
                else { continue }
                groups[String(name.prefix { $0 != "." }), default: []].append(name)
            }
            for (name, files) in groups {
                guard let key = ObjectKey(name), files.contains(key.fileName(ObjectFiles.manifest)) else {
                    // No JSON: a crash between renames. Nothing refers to it; remove what is there.
                    if cleanUp { for name in files { unlink("\(directory)/\(name)") } }
                    continue
                }
                let bytes = files.reduce(Int64(0)) { $0 + self.fileSize("\(directory)/\($1)") }
                let modified =
                    (try? fileManager.attributesOfItem(atPath: "\(directory)/" + key.fileName(ObjectFiles.manifest))[
                        .modificationDate] as? Date)
                    ?? Date(timeIntervalSince1970: 0)
                objects[key] = Object(bytes: bytes, lastUse: modified, persistedUse: modified)
            }
        }
        for name in (try? fileManager.contentsOfDirectory(atPath: self.urlsDirectory)) ?? []
        where cleanUp && name.contains(".tmp-") {
            unlink("\(self.urlsDirectory)/\(name)")
        }
        self.state.withLock { state in
            state.objects = objects
            state.totalBytes = objects.values.reduce(0) { $0 + $1.bytes }
        }
    }
}
