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
    /// What hits are answered from without reading the disk: decoded metadata, kept bytes, link targets.
    let memory = HitMemory()
    /// The names in `tombstones/` as last read, and the directory's stamp then (`settledTombstones`).
    let tombstoneNames = Mutex<(stamp: DirectoryStamp, names: Set<String>)?>(nil)
    private let onEviction: @Sendable (Int) -> Void
    private let onQuarantine: @Sendable (ObjectKey) -> Void
    /// The time uses are recorded at (a test's own clock).
    let now: @Sendable () -> Date

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
        if let known = self.memory.linkTarget(urlKey, identity: identity) { return (known, age) }
        guard let key = self.lookup(urlKey: urlKey, checkingObject: false) else { return nil }
        // Read after the lstat: a link replaced in between is stored under the old identity, which no later
        // lstat matches.
        self.memory.rememberLink(urlKey, identity: identity, target: key)
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
    /// (then it is quarantined). - Throws: `overloaded` when it cannot be checked now (`verifiedObject`).
    func metadata(_ key: ObjectKey) throws -> TranscodeMetadata? {
        try self.verifiedObject(key)?.metadata
    }

    /// The keys of the objects indexed.
    var indexedKeys: [ObjectKey] { self.state.withLock { Array($0.objects.keys) }.sorted() }

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
        self.memory.forget(key)
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
        self.memory.forget(key)
        return removed
    }

    // MARK: Writes

    /// A new directory under `tmp/` for a render or a copy from another store: on the cache's file system, so
    /// its files move into `objects/` by rename; emptied at startup if a crash leaves it. The caller removes it.
    /// - Throws: `TranscodeError` `.io`.
    func makeScratchDirectory(_ purpose: String) throws -> String {
        let directory = "\(self.temporaryDirectory)/\(purpose)-\(UInt64.random(in: 0...UInt64.max))"
        guard mkdir(directory, 0o755) == 0 else {
            let code = errno
            // A full disk is the disk's state, not our failure: 507, as when the transcoder's writes fail.
            let kind: TranscodeError.Code = code == ENOSPC || code == EDQUOT ? .insufficientStorage : .io
            throw TranscodeError(kind, "cannot create \(directory): \(String(cString: strerror(code)))")
        }
        return directory
    }

    /// Moves a render's artifacts into `objects/ab/` as object `key`, the manifest last, after checking each
    /// file is the size the manifest says. Every object enters the cache here: a conversion
    /// (`TranscodeService`) and a copy from a fleet's shared store (`adopt`).
    /// - Throws: `TranscodeError` `.io` when a file is missing, of another size, or cannot be moved.
    func commit(_ key: ObjectKey, _ rendered: RenderResult) throws {
        for artifact in rendered.artifacts where self.fileSize(artifact.path) != Int64(artifact.bytes) {
            throw TranscodeError(
                .io, "object \(key): the .\(artifact.format.fileExtension) is not the size its metadata says")
        }
        let shard = "\(self.objectsDirectory)/\(key.shard)"
        do {
            try FileManager.default.createDirectory(atPath: shard, withIntermediateDirectories: true)
        } catch {
            throw TranscodeError(.io, "cannot create \(shard)", underlying: error)
        }
        for artifact in rendered.artifacts {
            guard rename(artifact.path, self.objectPath(key, artifact.format)) == 0 else {
                throw TranscodeError(
                    .io,
                    "cannot move \(key.fileName(artifact.format)) into the cache: \(String(cString: strerror(errno)))")
            }
        }
        self.indexStored(key, bytes: rendered.artifacts.reduce(0) { $0 + Int64($1.bytes) })
        if let digest = rendered.metadata.sourceSha256.flatMap(ContentDigest.init(rawValue:)) {
            self.recordSource(of: key, digest)
        }
    }

    /// Moves object `key`'s files from `directory` (on the cache's file system, e.g. under `tmp/`) into
    /// `objects/ab/`, the JSON last, after checking the files are what their metadata says. What a shared store
    /// hands over to the local cache goes through here. - Throws: `TranscodeError` `.io`.
    func adopt(_ key: ObjectKey, from directory: String) throws {
        let manifest = "\(directory)/" + key.fileName(ObjectFiles.manifest)
        guard let data = FileManager.default.contents(atPath: manifest),
            let metadata = try? JSONDecoder().decode(TranscodeMetadata.self, from: data)
        else { throw TranscodeError(.io, "object \(key) has no readable metadata") }
        try self.commit(key, RenderResult(metadata: metadata, directory: directory, name: key.rawValue))
    }

    /// Indexes a complete object just written, `bytes` in all, and evicts others if the cache is over its size.
    private func indexStored(_ key: ObjectKey, bytes: Int64) {
        self.state.withLock { state in
            if let old = state.objects[key] { state.totalBytes -= old.bytes }
            let now = self.now()
            state.objects[key] = Object(bytes: bytes, lastUse: now, persistedUse: now)
            state.totalBytes += bytes
        }
        self.evictIfNeeded(keeping: key)
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

    func touch(_ key: ObjectKey) {
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
    func recordUse(_ key: ObjectKey, at now: Date, onlyIfNotDue: Bool) -> Bool {
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
