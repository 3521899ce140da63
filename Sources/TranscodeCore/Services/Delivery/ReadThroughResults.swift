import Foundation
import Transcoder

/// This node's results: its disk (`DiskCache`), read through to the fleet's shared store (`SharedResults`) when
/// there is one. Every write goes to both, the disk first; every read asks the disk and, on a miss, the shared
/// store, copying what it finds onto the disk. On a single node there is no shared store and each operation is
/// the disk's alone.
///
/// The routes, the resolver and the jobs hold this, not the two stores: whether the node is alone or in a fleet
/// is decided here, once, instead of at every call site.
package struct ReadThroughResults: Sendable {
    /// This node's disk.
    package let local: DiskCache
    /// The results a fleet shares (S3), nil on a single node.
    let shared: SharedResults?

    /// Whether something may be converted or served: the one takedown rule, here and in a fleet.
    var takedowns: Takedowns { Takedowns(cache: self.local, shared: self.shared) }

    // MARK: Objects

    /// Object `key` when this disk has it. One converted here whose publish failed is published first: a
    /// result the fleet cannot find is no result; nil when its files turned out damaged (then set aside).
    /// - Throws: `storage-unavailable` when that publish fails.
    func localObject(_ key: ObjectKey) async throws -> TranscodeMetadata? {
        guard let metadata = try self.local.objects.metadata(key), try await self.publishIfPending(key) else {
            return nil
        }
        return metadata
    }

    /// Publishes object `key` (on this disk) if its publish failed when it was converted here.
    /// - Returns: false when its files turned out damaged and were set aside: it is a miss now.
    /// - Throws: `storage-unavailable` when it fails again.
    func publishIfPending(_ key: ObjectKey) async throws -> Bool {
        try await self.shared?.publishIfPending(key) ?? true
    }

    /// Object `key` from this disk or, when it lacks it, copied from the shared store onto it.
    /// - Returns: nil when neither has it. - Throws: `storage-unavailable` when the shared store fails.
    func object(_ key: ObjectKey) async throws -> TranscodeMetadata? {
        if let metadata = try await self.localObject(key) { return metadata }
        return try await self.shared?.pull(key)
    }

    /// Object `key`, already committed to this disk (`LocalObjects.commit`), written to the shared store.
    func publish(_ key: ObjectKey) async throws {
        try await self.shared?.publish(key)
    }

    /// Whether object `key` was converted here and waits to be published (a hit then publishes it first).
    func isUnpublished(_ key: ObjectKey) -> Bool {
        self.shared?.isUnpublished(key) == true
    }

    // MARK: Links

    /// The shared store's link of `urlKey`: another node's (or this one's, before a restart) conversion of
    /// the URL. Nil on a single node.
    func sharedLink(urlKey: URLKey) async throws -> ResultLink? {
        try await self.shared?.link(urlKey: urlKey)
    }

    /// Points `urlKey` at object `key` with the URL's source record, here and in the shared store.
    func link(urlKey: URLKey, to key: ObjectKey, source: SourceRecord) async throws {
        try self.local.links.link(urlKey: urlKey, to: key, source: source)
        try await self.shared?.putLink(urlKey: urlKey, ResultLink(key: key, source: source))
    }

    /// Records a revalidation the origin answered 304 to: the record here and, best effort, in the shared
    /// store (a node that cannot reach it still has a fresh link; another node revalidates on its own).
    func revalidated(urlKey: URLKey, key: ObjectKey, record: SourceRecord) async {
        try? self.local.links.writeSource(record, urlKey: urlKey, key: key)
        try? await self.shared?.putLink(urlKey: urlKey, ResultLink(key: key, source: record))
    }

    /// Forgets `urlKey`'s link here and, best effort, in the shared store (its origin no longer has it).
    func dropLink(urlKey: URLKey) async {
        self.local.links.removeLink(urlKey: urlKey)
        try? await self.shared?.deleteLink(urlKey: urlKey)
    }

    // MARK: Purges

    /// Purges object `key` here and in the shared store; with a takedown `reason`, buries it in both.
    package func purge(key: ObjectKey, takedown reason: String?) async throws -> DiskCache.PurgeReport {
        var report = try self.local.purge(key: key, takedown: reason)
        try await self.shared?.purge(objects: [key], links: [], source: nil, takedown: reason, into: &report)
        return report
    }

    /// Purges what the URL `normalized` led to, here and in the shared store; with a takedown `reason`, buries
    /// it in both. - Parameter defaultLink: the link of the URL under the default options, which any node may
    ///   have made (this node knows only its own links).
    package func purge(url normalized: NormalizedURL, defaultLink: URLKey, takedown reason: String?) async throws
        -> DiskCache.PurgeReport
    {
        var report = try self.local.purge(url: normalized, takedown: reason)
        try await self.shared?.purge(
            objects: report.objects, links: Array(Set(report.linkKeys + [defaultLink])).sorted(),
            source: SourceHash(normalized), takedown: reason, into: &report)
        return report
    }

    /// Undoes a conversion whose URL was taken down while it ran: object `key` purged and buried here and, as
    /// it was published already, in the shared store. Best effort: the request fails `taken-down` either way.
    func purgeConverted(_ key: ObjectKey, source: SourceHash, takedown reason: String) async {
        guard var report = try? self.local.purge(key: key, takedown: reason) else { return }
        try? await self.shared?.purge(objects: [key], links: [], source: source, takedown: reason, into: &report)
    }
}
