import Foundation
import Transcoder

/// The local disk as a result store: content stored once, reached by key through symlinks. Its parts, each the
/// owner of its directories:
///
/// ```
/// objects/ab/<key>.mp4 .jpg .json    LocalObjects: key = SHA-256 of the GIF's bytes and the output options
/// tmp/                                  LocalObjects: renders and copies in progress; emptied at startup
/// quarantine/<key>.<ext>.<time>         LocalObjects: objects found damaged or tampered with, for inspection
/// urls/, sources/                       LinkIndex: URL keys' links, source records, the index of each URL
/// sources/objects.log                   LocalObjects: the ledger of what each object was made from
/// tombstones/<kind>-<hash>              LocalTombstones: taken down (the rule is `Takedowns`')
/// ```
/// plus the hit memory (`HitMemory`) the objects and links share. What crosses the parts lives here: a lookup
/// (a link whose object is complete), purges, readiness.
///
/// File operations are short syscalls; the transcode itself runs on the transcode pool.
package final class DiskCache: Sendable {
    package let root: String
    let objects: LocalObjects
    let links: LinkIndex
    let tombstones: LocalTombstones
    /// What hits are answered from without reading the disk: decoded metadata, kept bytes, link targets.
    let memory = HitMemory()

    /// Opens (or creates) the cache at `root`, removes what a killed process left behind, and indexes
    /// the objects. - Throws: when the directories cannot be created.
    /// - Parameters:
    ///   - cleanUp: remove what a killed process left behind (the server, which owns the cache); false to only
    ///     index it (a command run beside a live server must not touch its temporary files).
    ///   - now: the clock of the objects' last uses (eviction order).
    ///   - fileSystemClock: the real-time clock the kernel stamps files with, against which the tombstone
    ///     directory's times are read; a test moves it instead of waiting, never the objects' clock.
    package init(
        root: String, maxBytes: Int64, cleanUp: Bool = true, onEviction: @escaping @Sendable (Int) -> Void = { _ in },
        onQuarantine: @escaping @Sendable (ObjectKey) -> Void = { _ in },
        now: @escaping @Sendable () -> Date = { Date() },
        fileSystemClock: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        self.root = URL(fileURLWithPath: root).standardizedFileURL.path
        self.links = try LinkIndex(root: self.root, cleanUp: cleanUp, memory: self.memory)
        self.tombstones = try LocalTombstones(root: self.root, now: fileSystemClock)
        self.objects = try LocalObjects(
            root: self.root, maxBytes: maxBytes, cleanUp: cleanUp, memory: self.memory,
            ledgerPath: self.links.sourcesDirectory + "/objects.log", onEviction: onEviction,
            onQuarantine: onQuarantine, now: now)
    }

    /// The object a URL key links to, if the link exists and its object is complete.
    func lookup(urlKey: URLKey) -> ObjectKey? {
        guard let key = self.links.target(urlKey: urlKey), self.objects.contains(key) else { return nil }
        return key
    }

    // MARK: Readiness

    /// Where downloads and uploads are received before they are hashed (on the cache's file system, so a
    /// finished object is renamed into place).
    package var temporaryDirectory: String { self.objects.temporaryDirectory }

    /// Opens object `key`'s `.fileExtension` to send past the bytes a hit keeps in memory, when it is still the
    /// file `identity` names, and keeps the object from eviction until `release` is called. nil when it is gone
    /// or changed. The caller owns the descriptor.
    package func openForServing(
        _ key: ObjectKey, fileExtension: String, identity: FileIdentity
    ) -> (descriptor: CInt, release: @Sendable () -> Void)? {
        guard self.objects.beginServing(key) else { return nil }
        guard let descriptor = self.objects.openUnchanged(key, fileExtension: fileExtension, identity: identity)
        else {
            self.objects.endServing(key)
            return nil
        }
        let objects = self.objects
        return (descriptor, { objects.endServing(key) })
    }

    /// Checks every object byte for byte (`cache verify`), in key order, and quarantines each damaged one when
    /// `repair` is set. `report` hears each object's verdict.
    package func verifyObjects(repair: Bool, report: (ObjectKey, LocalObjects.Verdict) -> Void) {
        for key in self.objects.indexedKeys {
            let verdict = self.objects.verify(key)
            report(key, verdict)
            if repair, case .damaged = verdict { self.objects.quarantine(key) }
        }
    }

    /// Whether files can be created in the cache (readiness).
    package var isWritable: Bool {
        let probe = "\(self.objects.temporaryDirectory)/.ready-\(UInt64.random(in: 0...UInt64.max))"
        let descriptor = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { return false }
        close(descriptor)
        unlink(probe)
        return true
    }

    /// Bytes the cache's objects take (`/metrics`).
    package var usedBytes: Int64 { self.objects.usage.bytes }

    /// Bytes available to this process on the cache's file system, or nil when it cannot be read.
    package var freeBytes: Int64? {
        var info = statvfs()
        guard statvfs(self.root, &info) == 0 else { return nil }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    // MARK: Purge

    /// What a purge removed, and the tombstones a takedown left: the answer of the purge routes and of
    /// `cache purge`.
    package struct PurgeReport: Encodable, Sendable {
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
    /// (`LocalObjects.recordSource`).
    package func purge(key: ObjectKey, takedown reason: String? = nil) throws -> PurgeReport {
        var report = PurgeReport()
        let stored = self.objects.storedSourceDigest(key)
        if self.objects.remove(key) { report.objects.append(key) }
        if let gifHash = stored ?? (reason == nil ? nil : self.objects.recordedSource(of: key)) {
            report.gifHashes.append(gifHash)
        }
        if let reason {
            try self.bury([.object(key)] + report.gifHashes.map { .gif($0) }, reason: reason, into: &report)
        }
        return report
    }

    /// Deletes every link of the URL (whatever the options) and the objects they point to; other URLs
    /// that led to the same objects find them gone and convert again. With a takedown `reason`, also buries
    /// the URL, the objects and their GIFs' SHA-256: also those of an earlier purge of the URL, whose index keeps
    /// what the URL led to and was fetched as.
    package func purge(url: NormalizedURL, takedown reason: String? = nil) throws -> PurgeReport {
        var report = PurgeReport()
        let indexed = self.links.indexed(url: url)
        // The bytes of a fetch, whether or not their object is still stored.
        report.gifHashes = indexed.gifHashes
        for urlKey in indexed.links {
            self.links.removeLink(urlKey: urlKey)
            report.links += 1
            report.linkKeys.append(urlKey)
        }
        let sortedKeys = indexed.objects.sorted()
        for key in sortedKeys {
            let removed = try self.purge(key: key)
            report.objects += removed.objects
            // Gone already: what it was made from, from the ledger, for the takedown.
            if reason != nil, removed.gifHashes.isEmpty, let hash = self.objects.recordedSource(of: key),
                !report.gifHashes.contains(hash)
            {
                report.gifHashes.append(hash)
            }
            for hash in removed.gifHashes where !report.gifHashes.contains(hash) { report.gifHashes.append(hash) }
        }
        self.links.removeLinks(fromIndexOf: url)
        if let reason {
            // Every object the URL led to, stored now or not (an evicted one could be converted again).
            let tombstones: [Tombstone] =
                [.source(SourceHash(url))] + sortedKeys.map { .object($0) } + report.gifHashes.map { .gif($0) }
            try self.bury(tombstones, reason: reason, into: &report)
        }
        return report
    }

    private func bury(_ tombstones: [Tombstone], reason: String, into report: inout PurgeReport) throws {
        try self.tombstones.bury(tombstones, reason: reason)
        report.tombstones += tombstones.map(\.fileName)
    }
}
