import Foundation
import ServiceLifecycle
import Synchronization
import Transcoder

/// The results a fleet shares (`storage.kind: s3`), with the node's disk cache as a read-through cache in
/// front: a local miss asks the shared store and copies the object onto the local disk (`pull`), and each
/// transcode is published to it (`publish`) before the request is answered. A single node has none.
///
/// Takedowns recorded by any node are tombstones in the shared store; a node asks the store on every local
/// miss, and on a local hit at most once per `tombstoneCheckSeconds` per name. A tombstone found there is
/// also written locally, so it is never asked again.
///
/// An object converted here whose publish failed is recorded on disk (`<cache>/unpublished/<key>`): the next
/// request for it publishes it first, and as a service this publishes every one of them at startup and every
/// `republishSeconds` while any is left, so the fleet gets it even if no one asks this node again.
package final class SharedResults: Service, Sendable {
    let store: any ResultStore
    let cache: DiskCache
    /// How long a "not buried" answer of the shared store is trusted for a cache hit.
    let tombstoneCheckSeconds: Double
    /// Presigned URLs to send clients to instead of pulling objects onto the local disk
    /// (`storage.s3.serve: redirect`); nil: pull and serve.
    let redirect: Redirect?
    private let checked = Mutex<[String: ContinuousClock.Instant]>([:])
    private let downUntil = Mutex<ContinuousClock.Instant?>(nil)
    /// Objects converted here whose publish failed: published again when next asked for, and by `run`. Each
    /// is also an empty file in `unpublishedDirectory`, so a restart knows them.
    private let unpublished = Mutex<Set<ObjectKey>>([])
    private var unpublishedDirectory: String { self.cache.root + "/unpublished" }
    private let metrics: ServiceMetrics

    /// How clients are sent to the shared store.
    package struct Redirect: Sendable {
        /// The presigned URL of an object name.
        let url: @Sendable (String) -> String
        /// How long a client may keep the redirect (less than the URL's lifetime).
        let cacheSeconds: Int

        package init(url: @escaping @Sendable (String) -> String, cacheSeconds: Int) {
            self.url = url
            self.cacheSeconds = cacheSeconds
        }
    }

    package init(
        store: any ResultStore, cache: DiskCache, tombstoneCheckSeconds: Double = 10, redirect: Redirect? = nil,
        metrics: ServiceMetrics
    ) {
        self.redirect = redirect
        self.store = store
        self.cache = cache
        self.tombstoneCheckSeconds = tombstoneCheckSeconds
        self.metrics = metrics
        try? FileManager.default.createDirectory(atPath: self.unpublishedDirectory, withIntermediateDirectories: true)
        let recorded = (try? FileManager.default.contentsOfDirectory(atPath: self.unpublishedDirectory)) ?? []
        // Only objects still on this disk: one evicted or purged meanwhile has nothing to publish.
        let pending = recorded.compactMap(ObjectKey.init).filter { cache.objects.contains($0) }
        for name in recorded where !pending.contains(where: { $0.rawValue == name }) {
            unlink("\(self.unpublishedDirectory)/\(name)")
        }
        self.unpublished.withLock { $0 = Set(pending) }
    }

    /// How often objects whose publish failed are published again while any is left.
    static var republishSeconds: Double { 30 }

    /// Publishes what earlier publishes left behind (after a restart too), then again every `republishSeconds`
    /// while any is left, until shutdown.
    package func run() async throws {
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            for key in self.unpublished.withLock({ $0.sorted() }) {
                // Gone from this disk, or taken down here or on another node since: nothing to publish.
                guard let metadata = try? self.cache.objects.metadata(key),
                    case let tombstones = Tombstone.of(key, metadata: metadata),
                    !self.cache.tombstones.isBuried(anyOf: tombstones)
                else {
                    self.forgetUnpublished(key)
                    continue
                }
                guard let buried = try? await self.isBuried(tombstones) else { break }  // the store is down
                if buried {
                    self.forgetUnpublished(key)
                    continue
                }
                do {
                    try await self.publish(key)
                } catch let error as ServiceError where error.code == .storageUnavailable {
                    break  // the store is down: the next round
                } catch {
                    // This key's own fault (its files disagree with its manifest: set aside by `publish`, and
                    // converted again when next asked for): the others are published still.
                    if Task.isCancelled || Task.isShuttingDownGracefully { break }
                }
            }
            // Until the next round, or shutdown if it comes first.
            try? await cancelWhenGracefulShutdown {
                try await Task.sleep(for: .milliseconds(Int64(Self.republishSeconds * 1000)))
            }
        }
    }

    /// Copies object `key` from the shared store into the local cache.
    /// - Returns: its metadata; nil when the shared store does not have it.
    /// - Throws: `storage-unavailable` when the store fails.
    func pull(_ key: ObjectKey) async throws -> TranscodeMetadata? {
        let directory = "\(self.cache.objects.temporaryDirectory)/pull-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        guard let metadata = try await self.guarded({ try await self.store.getObject(key, into: directory) }) else {
            return nil
        }
        try await self.cache.putObject(key, from: directory)
        self.metrics.storage(.pull)
        return metadata
    }

    /// Writes object `key` (already in the local cache) to the shared store, the JSON last.
    /// - Throws: `ObjectFilesDisagree` when this disk's copy is not what its manifest says (a file missing, of
    ///   another size, or of the right size with other bytes, which a hit's checks do not see): the object is then
    ///   set aside (`quarantine/`), so that the next request converts it again rather than failing to publish it
    ///   every time. One purged or evicted meanwhile is only forgotten.
    func publish(_ key: ObjectKey) async throws {
        let directory = (self.cache.objects.objectPath(key, ObjectFiles.manifest) as NSString).deletingLastPathComponent
        do {
            try await self.guarded { try await self.store.putObject(key, from: directory) }
        } catch let error as ObjectFilesDisagree {
            if self.cache.objects.contains(key) { self.cache.objects.quarantine(key) }
            self.forgetUnpublished(key)
            throw error
        } catch {
            // The object is complete on this disk: the next request for it publishes it (a retry must not find
            // it locally and leave the fleet without it).
            if self.unpublished.withLock({ $0.insert(key).inserted }) {
                // Best effort: without the file a restart forgets it, and the next request publishes it still.
                _ = FileManager.default.createFile(atPath: "\(self.unpublishedDirectory)/\(key)", contents: nil)
            }
            throw error
        }
        self.forgetUnpublished(key)
        self.metrics.storage(.publish)
        // What the object was made from, for a takedown by key once it is gone. Best effort, as on the disk: a
        // store that refuses it (a bucket policy without `sources/`) costs only that takedown the GIF's digest.
        if let digest = self.cache.objects.storedSourceDigest(key) {
            do {
                try await self.store.recordSource(of: key, digest)
            } catch {
                self.metrics.storage(.ledgerFailed)
            }
        }
    }

    /// Removes `key` from the objects waiting to be published, here and on disk.
    private func forgetUnpublished(_ key: ObjectKey) {
        if self.unpublished.withLock({ $0.remove(key) != nil }) { unlink("\(self.unpublishedDirectory)/\(key)") }
    }

    /// Publishes `key` if an earlier publish of it failed.
    /// - Returns: false when this disk's copy turned out damaged and was set aside: the object is a miss now.
    /// - Throws: `storage-unavailable` when it fails again.
    func publishIfPending(_ key: ObjectKey) async throws -> Bool {
        guard self.isUnpublished(key) else { return true }
        do {
            try await self.publish(key)
        } catch is ObjectFilesDisagree {
            return false
        }
        return true
    }

    /// The shared link of `urlKey`.
    func link(urlKey: URLKey) async throws -> ResultLink? {
        try await self.guarded { try await self.store.link(urlKey: urlKey) }
    }

    func putLink(urlKey: URLKey, _ link: ResultLink) async throws {
        try await self.guarded { try await self.store.putLink(urlKey: urlKey, link) }
    }

    func deleteLink(urlKey: URLKey) async throws {
        try await self.guarded { try await self.store.deleteLink(urlKey: urlKey) }
    }

    func deleteObject(_ key: ObjectKey) async throws {
        try await self.guarded { _ = try await self.store.deleteObject(key) }
    }

    func metadata(_ key: ObjectKey) async throws -> TranscodeMetadata? {
        try await self.guarded { try await self.store.metadata(key) }
    }

    func bury(_ tombstones: [Tombstone], reason: String) async throws {
        try await self.guarded { try await self.store.bury(tombstones, reason: reason) }
    }

    /// Whether the store said, less than `tombstoneCheckSeconds` ago, that none of `tombstones` is buried.
    func notBuriedRecently(_ tombstones: [Tombstone]) -> Bool {
        self.unchecked(tombstones, at: .now).isEmpty
    }

    /// Whether object `key` was converted here and waits to be published (a hit then publishes it first).
    func isUnpublished(_ key: ObjectKey) -> Bool {
        self.unpublished.withLock { $0.contains(key) }
    }

    /// Those of `tombstones` not found absent in the last `tombstoneCheckSeconds`.
    private func unchecked(_ tombstones: [Tombstone], at now: ContinuousClock.Instant)
        -> [Tombstone]
    {
        self.checked.withLock { checked in
            tombstones.filter { tombstone in
                guard let at = checked[tombstone.fileName] else { return true }
                return now - at > .milliseconds(Int64(self.tombstoneCheckSeconds * 1000))
            }
        }
    }

    /// Whether any of `tombstones` is recorded in the shared store (then also locally, from now on).
    /// - Parameter recently: trust a "no" given less than `tombstoneCheckSeconds` ago (cache hits).
    func isBuried(_ tombstones: [Tombstone], recently: Bool = false) async throws -> Bool {
        let now = ContinuousClock.now
        let asked = recently ? self.unchecked(tombstones, at: now) : tombstones
        guard !asked.isEmpty else { return false }
        for tombstone in asked {
            let buried: Bool
            do {
                buried = try await self.guarded { try await self.store.isBuried([tombstone]) }
            } catch  where recently {
                // A cache hit is served while the store is down, as a single node would serve it; the store
                // is asked again on the next hit.
                return false
            }
            if buried {
                try? self.cache.tombstones.bury([tombstone], reason: "taken down on another node")
                return true
            }
        }
        self.checked.withLock { checked in
            if checked.count >= 100_000 { checked.removeAll(keepingCapacity: true) }
            for tombstone in asked { checked[tombstone.fileName] = now }
        }
        return false
    }

    /// Deletes from the shared store the objects `objects` and those `links` lead to, and the links; with a
    /// takedown `reason`, buries there what the local purge buried, so every node refuses it.
    func purge(
        objects: [ObjectKey], links: [URLKey], source: SourceHash?, takedown reason: String?,
        into report: inout DiskCache.PurgeReport
    ) async throws {
        // What to delete, and what it was made from, read first; with a takedown the tombstones are written
        // before anything is deleted, so a takedown cut short can be retried and still finds the GIF's digest.
        var keys = Set(objects)
        var gifHashes = Set(report.gifHashes)
        var foundLinks: [URLKey] = []
        for urlKey in links {
            if let link = try await self.link(urlKey: urlKey) {
                keys.insert(link.key)
                // The bytes the link's URL was fetched as: buried even when their object is gone.
                if let hash = link.source?.contentDigest { gifHashes.insert(hash) }
                foundLinks.append(urlKey)
            }
        }
        var stored: [ObjectKey] = []
        for key in keys.sorted() {
            guard let metadata = try await self.metadata(key) else {
                // Gone from the store already: what it was made from, from the store's ledger.
                if reason != nil, let hash = try await self.guarded({ try await self.store.recordedSource(of: key) }) {
                    gifHashes.insert(hash)
                }
                continue
            }
            stored.append(key)
            if let hash = metadata.sourceSha256.flatMap(ContentDigest.init(rawValue:)) { gifHashes.insert(hash) }
        }
        if let source {
            // What the URL was fetched as, kept in the store past this purge: a takedown of the URL after it (on
            // any node, whose own index never saw the URL) still buries those bytes. Written before the links go.
            if reason != nil {
                for hash in try await self.guarded({ try await self.store.recordedURLSources(source) }) {
                    gifHashes.insert(hash)
                }
            }
            let found = gifHashes.sorted()
            if !found.isEmpty {
                try await self.guarded { try await self.store.recordURLSources(source, found) }
            }
        }
        if let reason {
            var tombstones: [Tombstone] = source.map { [.source($0)] } ?? []
            tombstones +=
                keys.sorted().map { .object($0) }
                + gifHashes.sorted().map { .gif($0) }
            try await self.bury(tombstones, reason: reason)
            try self.cache.tombstones.bury(tombstones, reason: reason)
            for tombstone in tombstones where !report.tombstones.contains(tombstone.fileName) {
                report.tombstones.append(tombstone.fileName)
            }
        }
        for urlKey in foundLinks {
            try await self.deleteLink(urlKey: urlKey)
            if !report.linkKeys.contains(urlKey) {
                report.links += 1
                report.linkKeys.append(urlKey)
            }
        }
        for key in stored {
            try await self.deleteObject(key)
            if !report.objects.contains(key) { report.objects.append(key) }
        }
    }

    /// Runs a store operation, reporting its failure as `storage-unavailable` (503): the shared store being
    /// down or misconfigured is the service's trouble, not the client's. A store that could not be reached
    /// is not asked again for `outageSeconds`: requests fail at once instead of each waiting out the
    /// client's timeout (AsyncHTTPClient retries a refused connection until the request's deadline).
    func guarded<Value>(_ operation: () async throws -> Value) async throws -> Value {
        if let until = self.downUntil.withLock({ $0 }), ContinuousClock.now < until {
            throw ServiceError.storageUnavailable("the shared result store cannot be reached; retrying shortly")
        }
        do {
            return try await operation()
        } catch let error as S3Error {
            if error.status == nil {
                self.downUntil.withLock { $0 = ContinuousClock.now + .milliseconds(Int64(Self.outageSeconds * 1000)) }
            }
            throw ServiceError.storageUnavailable("the shared result store failed: \(error)")
        }
    }

    /// How long a store that could not be reached is left alone.
    static var outageSeconds: Double { 2 }
}
