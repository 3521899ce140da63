import Crypto
import Foundation
import Transcoder

/// What the cache knows of source URLs beyond the link to their object: validators for revalidation, an
/// index for purging by URL, and tombstones for takedowns.
extension DiskCache {
    /// A URL as it was last fetched: written beside its link (`urls/<url-key>.source`).
    struct SourceRecord: Codable, Equatable, Sendable {
        /// The normalized URL (`NormalizedURL.text`).
        var url: String
        var etag: String?
        var lastModified: String?
        /// When the origin last confirmed these bytes (a download or a 304), seconds since 1970.
        var validatedAt: Double? = nil
        /// The SHA-256 of the bytes fetched (lower-case hex): what a takedown of the URL buries, even once the
        /// object made from them is gone. Nil in records written before it was kept.
        var sourceSha256: String? = nil

        /// The digest of the bytes fetched, when the record keeps it.
        var contentDigest: ContentDigest? { self.sourceSha256.flatMap(ContentDigest.init(rawValue:)) }
    }

    var sourcesDirectory: String { self.root + "/sources" }

    private func sourceRecordPath(_ urlKey: URLKey) -> String { self.urlLinkPath(urlKey) + ".source" }

    private func sourceIndexDirectory(_ sourceHash: SourceHash) -> String {
        "\(self.sourcesDirectory)/\(sourceHash.shard)/\(sourceHash.rawValue)"
    }

    // MARK: Freshness

    /// Writes the record of `urlKey` (temporary name, renamed over) and indexes, under the URL, the link, the
    /// object `key` it is about to point to and the digest of the bytes fetched: every object a URL ever led to,
    /// and the bytes it was made from, are found by a purge of the URL, also after a revalidation moved the link
    /// on or the object was evicted. - Throws: when the index cannot be written (a link
    /// a purge could not find must not exist).
    func writeSource(_ source: SourceRecord, urlKey: URLKey, key: ObjectKey) throws {
        let data = try JSONEncoder().encode(source)
        let path = self.sourceRecordPath(urlKey)
        let temporary = "\(self.urlsDirectory)/.\(urlKey).source.tmp-\(UInt64.random(in: 0...UInt64.max))"
        guard FileManager.default.createFile(atPath: temporary, contents: data), rename(temporary, path) == 0 else {
            unlink(temporary)
            throw TranscodeError(.io, "cannot write \(path)")
        }
        let index = self.sourceIndexDirectory(SourceHash(NormalizedURL(normalized: source.url)))
        try? FileManager.default.createDirectory(atPath: index, withIntermediateDirectories: true)
        for name in [urlKey.rawValue, "object-\(key)"] + (source.contentDigest.map { ["gif-\($0)"] } ?? []) {
            let descriptor = open("\(index)/\(name)", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else {
                throw TranscodeError(.io, "cannot index \(index)/\(name): \(String(cString: strerror(errno)))")
            }
            close(descriptor)
        }
    }

    /// The record of `urlKey`, if one was written.
    func sourceRecord(urlKey: URLKey) -> SourceRecord? {
        guard let data = FileManager.default.contents(atPath: self.sourceRecordPath(urlKey))
        else { return nil }
        return try? JSONDecoder().decode(SourceRecord.self, from: data)
    }

    /// Seconds since the URL was last fetched or revalidated (the link's own modification time).
    func linkAge(urlKey: URLKey) -> TimeInterval? {
        var info = stat()
        guard lstat(self.urlLinkPath(urlKey), &info) == 0 else { return nil }
        return Self.age(info)
    }

    /// Seconds since the file of `info` was modified.
    static func age(_ info: stat) -> TimeInterval {
        Date().timeIntervalSince1970 - (Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
    }

    /// Marks `urlKey` as just revalidated: the link's modification time becomes now.
    /// - Parameter age: make the link this many seconds old instead (a backoff after a failed revalidation:
    ///   fresh again for a short while, then stale).
    func renewLink(urlKey: URLKey, age: TimeInterval = 0) {
        // Times of the link itself, not of the object it points to.
        let when = Date().timeIntervalSince1970 - age
        let seconds = Int(when.rounded(.down))
        let stamp = timespec(tv_sec: seconds, tv_nsec: Int((when - Double(seconds)) * 1e9))
        var times = [stamp, stamp]
        utimensat(AT_FDCWD, self.urlLinkPath(urlKey), &times, AT_SYMLINK_NOFOLLOW)
    }

    /// Removes the link of `urlKey` and its record.
    func removeLink(urlKey: URLKey) {
        unlink(self.urlLinkPath(urlKey))
        unlink(self.sourceRecordPath(urlKey))
    }

    // MARK: Purge

    /// What a purge removed, and the tombstones a takedown left: the answer of the purge routes and of
    /// `cache purge`.
    struct PurgeReport: Encodable, Sendable {
        /// Object keys whose files were deleted.
        var objects: [ObjectKey] = []
        /// URL links removed.
        var links = 0
        /// Tombstones written (`object-<key>`, `gif-<sha256>`, `source-<hash>`).
        var tombstones: [String] = []
        /// SHA-256 of the GIFs the deleted objects were made from.
        var gifHashes: [ContentDigest] = []
        /// The URL keys whose links were removed.
        var linkKeys: [URLKey] = []

        private enum CodingKeys: String, CodingKey { case objects, links, tombstones }
    }

    /// Deletes the object `key`. With a takedown `reason` (may be empty), also buries the key and the
    /// GIF's SHA-256, so neither is served or converted again.
    /// An object gone already (purged, evicted) still has its GIF's SHA-256 buried, from the ledger of sources
    /// (`recordSource`).
    func purge(key: ObjectKey, takedown reason: String? = nil) throws -> PurgeReport {
        var report = PurgeReport()
        let stored = self.storedMetadata(key)?.sourceSha256.flatMap(ContentDigest.init(rawValue:))
        if self.remove(key) { report.objects.append(key) }
        if let gifHash = stored ?? (reason == nil ? nil : self.recordedSource(of: key)) {
            report.gifHashes.append(gifHash)
        }
        if let reason {
            try self.bury([.object(key)] + report.gifHashes.map { .gif($0) }, reason: reason, into: &report)
        }
        return report
    }

    /// Deletes every link of the URL (whatever the options) and the objects they point to; other URLs
    /// that led to the same objects find them gone and convert again. With a takedown `reason`, also buries
    /// the URL, the objects and their GIFs' SHA-256.
    func purge(url: NormalizedURL, takedown reason: String? = nil) throws -> PurgeReport {
        var report = PurgeReport()
        let index = self.sourceIndexDirectory(SourceHash(url))
        var objectKeys: Set<ObjectKey> = []
        for name in (try? FileManager.default.contentsOfDirectory(atPath: index)) ?? [] {
            if name.hasPrefix("object-"), let key = ObjectKey(name.dropFirst(7)) {
                objectKeys.insert(key)
            } else if name.hasPrefix("gif-"), let hash = ContentDigest(String(name.dropFirst(4))) {
                // The bytes of a fetch, whether or not their object is still stored.
                if !report.gifHashes.contains(hash) { report.gifHashes.append(hash) }
            } else if let urlKey = URLKey(name) {
                // A link's current object (links indexed before objects were).
                if let target = Self.readLink(self.urlLinkPath(urlKey)),
                    let key = ObjectKey((target.split(separator: "/").last ?? "").prefix { $0 != "." })
                {
                    objectKeys.insert(key)
                }
                self.removeLink(urlKey: urlKey)
                report.links += 1
                report.linkKeys.append(urlKey)
            }
        }
        let sortedKeys = objectKeys.sorted()
        for key in sortedKeys {
            let removed = try self.purge(key: key)
            report.objects += removed.objects
            // Gone already: what it was made from, from the ledger, for the takedown.
            if reason != nil, removed.gifHashes.isEmpty, let hash = self.recordedSource(of: key),
                !report.gifHashes.contains(hash)
            {
                report.gifHashes.append(hash)
            }
            for hash in removed.gifHashes where !report.gifHashes.contains(hash) { report.gifHashes.append(hash) }
        }
        try? FileManager.default.removeItem(atPath: index)
        if let reason {
            // Every object the URL led to, stored now or not (an evicted one could be converted again).
            let tombstones: [Tombstone] =
                [.source(SourceHash(url))] + sortedKeys.map { .object($0) } + report.gifHashes.map { .gif($0) }
            try self.bury(tombstones, reason: reason, into: &report)
        }
        return report
    }

    /// The ledger of what each object was made from: one line `<object key> <source SHA-256>` appended per object
    /// stored, never rewritten, so a takedown by key can name the bytes after the object is gone. About 130 bytes
    /// per conversion; read only by a takedown.
    var sourceLedgerPath: String { self.sourcesDirectory + "/objects.log" }

    /// Appends `key`'s line to the ledger (one `write` with `O_APPEND`: lines never interleave). Best effort: a
    /// line lost to a full disk costs only a later takedown of a gone object its digest.
    func recordSource(of key: ObjectKey, _ digest: ContentDigest) {
        let line = Array("\(key.rawValue) \(digest.rawValue)\n".utf8)
        let descriptor = open(self.sourceLedgerPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return }
        _ = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
    }

    /// The source digest the ledger records for `key` (its last line for it), nil when it has none.
    func recordedSource(of key: ObjectKey) -> ContentDigest? {
        guard let data = FileManager.default.contents(atPath: self.sourceLedgerPath) else { return nil }
        let prefix = Array(key.rawValue.utf8) + [UInt8(ascii: " ")]
        var found: ContentDigest?
        for line in data.split(separator: UInt8(ascii: "\n")) where line.count == 129 && line.starts(with: prefix) {
            found = ContentDigest(String(decoding: line.suffix(64), as: UTF8.self)) ?? found
        }
        return found
    }

    private func bury(_ tombstones: [Tombstone], reason: String, into report: inout PurgeReport) throws {
        try self.bury(tombstones, reason: reason)
        report.tombstones += tombstones.map(\.fileName)
    }

    /// The GIF digest object `key`'s stored manifest records, read without the serving checks (nothing is
    /// quarantined or marked used); nil when it is not stored or records none.
    func storedSourceDigest(_ key: ObjectKey) -> ContentDigest? {
        self.storedMetadata(key)?.sourceSha256.flatMap(ContentDigest.init(rawValue:))
    }

    /// The metadata as stored, without the serving checks (a purge must find what it deletes).
    private func storedMetadata(_ key: ObjectKey) -> TranscodeMetadata? {
        guard let data = FileManager.default.contents(atPath: self.objectPath(key, ObjectFiles.manifest)) else {
            return nil
        }
        return try? JSONDecoder().decode(TranscodeMetadata.self, from: data)
    }

    // MARK: Tombstones

    /// What a tombstone names.
    enum Tombstone: Hashable, Sendable {
        /// A result object, by key (`/media/<key>.*`).
        case object(ObjectKey)
        /// A GIF's bytes, by SHA-256, whatever URL or upload brings them.
        case gif(ContentDigest)
        /// A URL, by source hash, whatever the options.
        case source(SourceHash)

        /// What a stored object is buried under: its key, and the bytes it was made from (when its metadata
        /// records them). Every check of an object asks these, here and in a fleet's shared store.
        static func of(_ key: ObjectKey, metadata: TranscodeMetadata) -> [Tombstone] {
            [.object(key)] + (metadata.sourceSha256.flatMap(ContentDigest.init(rawValue:)).map { [.gif($0)] } ?? [])
        }

        var fileName: String {
            switch self {
            case .object(let key): "object-\(key.rawValue)"
            case .gif(let hash): "gif-\(hash.rawValue)"
            case .source(let hash): "source-\(hash.rawValue)"
            }
        }
    }

    /// Records takedowns: from now on these are answered 451 and never converted again.
    func bury(_ tombstones: [Tombstone], reason: String) throws {
        struct Stone: Encodable {
            let reason: String
            let at: String
        }
        let data = try JSONEncoder().encode(Stone(reason: reason, at: ISO8601DateFormatter().string(from: Date())))
        for tombstone in tombstones {
            let path = "\(self.tombstonesDirectory)/\(tombstone.fileName)"
            guard FileManager.default.createFile(atPath: path, contents: data) else {
                throw TranscodeError(.io, "cannot write \(path)")
            }
        }
    }

    /// Whether any of `tombstones` was recorded: looked up in the directory's names as last read while the
    /// directory is unchanged (one `stat`, for a cache hit that asks this on an event loop), else one `access`
    /// per name.
    func isBuried(_ tombstones: Tombstone...) -> Bool {
        self.isBuried(anyOf: tombstones)
    }

    func isBuried(anyOf tombstones: [Tombstone]) -> Bool {
        self.isBuried(lazily: { tombstones })
    }

    /// `tombstones` are made only when there are any in the directory: nothing taken down is the common case,
    /// and a cache hit asks this with names it would otherwise build for nothing.
    func isBuried(lazily tombstones: () -> [Tombstone]) -> Bool {
        if let names = self.settledTombstones() {
            return !names.isEmpty && tombstones().contains { names.contains($0.fileName) }
        }
        return tombstones().contains { access("\(self.tombstonesDirectory)/\($0.fileName)", F_OK) == 0 }
    }

    /// The names in `tombstones/`, read again whenever the directory's stamp (inode, size, modification and
    /// change times) differs from the last read. Any file created, renamed or removed there (by this process,
    /// `cache` commands beside it, an operator) changes the directory's times. They are coarse (a clock tick),
    /// so names are read only from a directory unchanged for the last two seconds: a change in the same tick as
    /// the read could not be told from it. `nil` while it is not settled: ask the disk.
    private func settledTombstones() -> Set<String>? {
        let directory = self.tombstonesDirectory
        guard let stamp = DirectoryStamp(directory) else { return nil }
        if let names = self.tombstoneNames.withLock({ $0?.stamp == stamp ? $0?.names : nil }) { return names }
        guard stamp.isSettled, let listed = try? FileManager.default.contentsOfDirectory(atPath: directory),
            DirectoryStamp(directory) == stamp
        else { return nil }
        let names = Set(listed)
        self.tombstoneNames.withLock { $0 = (stamp, names) }
        return names
    }
}

/// What tells whether a directory's entries changed: its identity (device, inode, size, modification and change
/// times), as for a file.
struct DirectoryStamp: Equatable, Sendable {
    let identity: DiskCache.FileIdentity

    init?(_ path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        self.identity = DiskCache.FileIdentity(info)
    }

    /// Unchanged for the last two seconds, by the real-time clock the kernel stamps files with.
    var isSettled: Bool {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return now.tv_sec - max(self.identity.modified.tv_sec, self.identity.changed.tv_sec) >= 2
    }
}
