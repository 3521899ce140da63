import Foundation
import NIOCore
import Synchronization
import Transcoder

/// The objects of the local disk: `objects/ab/<key>.<ext>` (what the output-format registry lists, the manifest
/// last), their index for eviction, the pins of objects being served, and `quarantine/` for objects found damaged.
///
/// Objects are written under temporary names in `tmp/` (`makeScratchDirectory`), checked and renamed into place,
/// the manifest last (`commit`), so an object exists exactly when its manifest does. Beyond `maxBytes`, the least
/// recently used objects are evicted, never one that is being served. Only what was written here is read back
/// (`LocalObjects+Reading.swift`: the anti-tamper open and checks).
package final class LocalObjects: Sendable {
    let maxBytes: Int64
    private let state: Mutex<State>
    /// What hits are answered from without reading the disk: decoded metadata, kept bytes (and, for the link
    /// index, link targets).
    let memory: HitMemory
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
    let directory: String
    let temporaryDirectory: String
    let quarantineDirectory: String
    /// The ledger of what each object was made from (`recordSource`).
    let ledgerPath: String

    /// Opens (or creates) `objects/`, `quarantine/` and `tmp/` under `root`, removes what a killed process left
    /// behind, and indexes the objects. - Throws: when the directories cannot be created.
    /// - Parameter cleanUp: remove what a killed process left behind (the server, which owns the cache);
    ///   false to only index it (a command run beside a live server must not touch its temporary files).
    init(
        root: String, maxBytes: Int64, cleanUp: Bool, memory: HitMemory, ledgerPath: String,
        onEviction: @escaping @Sendable (Int) -> Void, onQuarantine: @escaping @Sendable (ObjectKey) -> Void,
        now: @escaping @Sendable () -> Date
    ) throws {
        (self.directory, self.temporaryDirectory, self.quarantineDirectory) =
            (root + "/objects", root + "/tmp", root + "/quarantine")
        self.ledgerPath = ledgerPath
        self.maxBytes = maxBytes
        self.memory = memory
        self.now = now
        self.onEviction = onEviction
        self.onQuarantine = onQuarantine
        self.state = Mutex(State())
        let fileManager = FileManager.default
        for directory in [self.directory, self.quarantineDirectory] {
            try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        if cleanUp { try? fileManager.removeItem(atPath: self.temporaryDirectory) }
        try fileManager.createDirectory(atPath: self.temporaryDirectory, withIntermediateDirectories: true)
        self.sweepAndIndex(cleanUp: cleanUp)
    }

    // MARK: Paths and lookups

    func objectPath(_ key: ObjectKey, _ fileExtension: String) -> String {
        "\(self.directory)/\(key.shard)/\(key.rawValue).\(fileExtension)"
    }

    func objectPath(_ key: ObjectKey, _ format: OutputFormat) -> String {
        self.objectPath(key, format.fileExtension)
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
        // A shard directory that is not one (a link to a directory elsewhere): the link goes aside, never followed.
        if self.setShardAside(key.shard) {
            self.memory.forget(key)
            self.onQuarantine(key)
            return
        }
        for fileExtension in ObjectFiles.deleteOrder.map(\.fileExtension) {
            rename(self.objectPath(key, fileExtension), "\(self.quarantineDirectory)/\(key).\(fileExtension).\(stamp)")
        }
        self.state.withLock { state in
            if let object = state.objects.removeValue(forKey: key) { state.totalBytes -= object.bytes }
        }
        self.memory.forget(key)
        self.onQuarantine(key)
    }

    /// Moves what stands at `objects/<shard>` when it is not a directory of its own (a symbolic link to one
    /// elsewhere, a file) into `quarantine/` as `shard-<shard>.<unix time>`, without following it, and forgets the
    /// objects indexed under it. Objects are read without following a link (`openObjectFiles`), so that every object
    /// under such a shard was a miss that converted again into the link's target and was never served: this makes
    /// the next conversion write into a fresh directory, and nothing outside the cache is moved or written.
    /// - Returns: whether something was moved aside.
    @discardableResult
    func setShardAside(_ shard: Substring) -> Bool {
        let path = "\(self.directory)/\(shard)"
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT != S_IFDIR else { return false }
        let aside =
            "\(self.quarantineDirectory)/shard-\(shard).\(Int(Date().timeIntervalSince1970))-\(UInt32.random(in: 0...UInt32.max))"
        // Another thread may have moved it first: then what is there now is looked at again by the caller.
        guard rename(path, aside) == 0 else { return false }
        let forgotten = self.state.withLock { state -> [ObjectKey] in
            let keys = state.objects.keys.filter { $0.shard == shard }
            for key in keys {
                if let object = state.objects.removeValue(forKey: key) { state.totalBytes -= object.bytes }
            }
            return keys
        }
        for key in forgotten { self.memory.forget(key) }
        return true
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
        let shard = "\(self.directory)/\(key.shard)"
        self.setShardAside(key.shard)
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

    // MARK: What each object was made from

    /// Appends `key`'s line to the ledger (one `write` with `O_APPEND`: lines never interleave): one line
    /// `<object key> <source SHA-256>` per object stored, never rewritten, so a takedown by key can name the bytes
    /// after the object is gone. About 130 bytes per conversion; read only by a takedown. Best effort: a line lost
    /// to a full disk costs only a later takedown of a gone object its digest.
    func recordSource(of key: ObjectKey, _ digest: ContentDigest) {
        let line = Array("\(key.rawValue) \(digest.rawValue)\n".utf8)
        let descriptor = open(self.ledgerPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return }
        _ = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
    }

    /// The source digest the ledger records for `key` (its last line for it), nil when it has none.
    func recordedSource(of key: ObjectKey) -> ContentDigest? {
        guard let data = FileManager.default.contents(atPath: self.ledgerPath) else { return nil }
        let prefix = Array(key.rawValue.utf8) + [UInt8(ascii: " ")]
        var found: ContentDigest?
        for line in data.split(separator: UInt8(ascii: "\n")) where line.count == 129 && line.starts(with: prefix) {
            found = ContentDigest(String(decoding: line.suffix(64), as: UTF8.self)) ?? found
        }
        return found
    }

    /// The GIF digest object `key`'s stored manifest records, read without the serving checks (nothing is
    /// quarantined or marked used); nil when it is not stored or records none.
    func storedSourceDigest(_ key: ObjectKey) -> ContentDigest? {
        guard let data = FileManager.default.contents(atPath: self.objectPath(key, ObjectFiles.manifest)) else {
            return nil
        }
        return (try? JSONDecoder().decode(TranscodeMetadata.self, from: data))?.sourceSha256.flatMap(
            ContentDigest.init(rawValue:))
    }

    /// Removes temporary leftovers and incomplete objects of a killed process, then indexes the rest.
    private func sweepAndIndex(cleanUp: Bool) {
        let fileManager = FileManager.default
        var objects: [ObjectKey: Object] = [:]
        for shard in (try? fileManager.contentsOfDirectory(atPath: self.directory)) ?? [] {
            let directory = "\(self.directory)/\(shard)"
            var shardInfo = stat()
            guard lstat(directory, &shardInfo) == 0, shardInfo.st_mode & S_IFMT == S_IFDIR else {
                // Not a directory the cache made (a link to one elsewhere, a file): never followed, nor indexed; the
                // server sets it aside.
                if cleanUp { self.setShardAside(Substring(shard)) }
                continue
            }
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
        self.state.withLock { state in
            state.objects = objects
            state.totalBytes = objects.values.reduce(0) { $0 + $1.bytes }
        }
    }
}
