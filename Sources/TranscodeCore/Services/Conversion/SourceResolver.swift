import Foundation
import Logging
import Transcoder

/// What the cache has for a URL, before anything is downloaded.
package enum Resolution: Sendable {
    /// Its result, fetched or revalidated less than the URL TTL ago: served as it is.
    case fresh(TranscodeOutcome)
    /// Its result, due for revalidation with the origin; served while the origin fails (stale-if-error).
    case stale(TranscodeOutcome)
    /// Nothing: the URL is downloaded.
    case miss
}

/// The cache's side of a URL: request → link → fresh, stale or miss, here or in the fleet's shared store, and
/// the revalidation policy (the URL TTL, stale-if-error, the backoff after a failing origin). It decides on
/// typed error codes; it downloads and converts nothing (`TranscodeWork` does).
package struct SourceResolver: Sendable {
    /// This node's disk, read through to the fleet's shared store.
    let results: ReadThroughResults
    let downloader: Downloader
    /// How long a URL's result is served before the origin is asked again (`cache.urlTTLSeconds`).
    let urlTTLSeconds: Double
    /// How long past its TTL a URL's result may still be served while its origin fails
    /// (`cache.staleIfErrorSeconds`).
    let staleIfErrorSeconds: Double
    /// How long an origin's failure is answered again without asking it.
    var originFailureTTL = OriginFailureTTL()
    let metrics: ServiceMetrics
    let logger: Logger

    /// After a failed revalidation, the stored result is served without asking the origin for this long.
    static var revalidationBackoffSeconds: Double { 60 }

    var cache: DiskCache { self.results.local }

    /// How long a URL's origin failure is answered again without asking the origin: a 404 or 410
    /// (`download.notFoundTTLSeconds`) and a 5xx, timeout or transport failure (`download.failureTTLSeconds`)
    /// separately; 0 asks every time. Other failures (the bytes are not a GIF, a takedown) are the bytes' and
    /// stay with the object key.
    package struct OriginFailureTTL: Sendable, Equatable {
        var notFoundSeconds: Double = 0
        var failureSeconds: Double = 0

        package init(notFoundSeconds: Double = 0, failureSeconds: Double = 0) {
            self.notFoundSeconds = notFoundSeconds
            self.failureSeconds = failureSeconds
        }
    }

    /// `failure` (a URL job's last), when it is an origin's failure still within its TTL.
    func cachedFailure(_ failure: JobFailure?) -> ServiceError? {
        guard let failure else { return nil }
        let ttl: Double
        switch failure.error.code {
        case .originNotFound: ttl = self.originFailureTTL.notFoundSeconds
        case .originError, .originTimeout: ttl = self.originFailureTTL.failureSeconds
        default: return nil
        }
        guard Date().timeIntervalSince(failure.at) < ttl else { return nil }
        return failure.error
    }
    var takedowns: Takedowns { self.results.takedowns }

    /// What this node's link for `url` leads to. A fresh result comes with its files checked and held open.
    /// - Throws: `taken-down` when the URL or its object is buried; the destination policy's refusal of a URL
    ///   it now forbids; the shared store's error when a result waiting to be published cannot be.
    func resolve(_ url: URL, keys: SourceKeys) async throws -> Resolution {
        if try await self.takedowns.isBuried([.source(keys.sourceHash)], recently: true) {
            throw ServiceError.takenDown("this URL was taken down")
        }
        guard let key = self.cache.lookup(urlKey: keys.urlKey), let object = try self.cache.objects.verifiedObject(key)
        else {
            return .miss
        }
        try await self.takedowns.check(key, metadata: object.metadata, recently: true)
        // The policy of today decides, not the one the URL was fetched under.
        try await self.downloader.checkCachedDestination(url)
        guard try await self.results.publishIfPending(key) else { return .miss }
        if let age = self.cache.links.linkAge(urlKey: keys.urlKey), age < self.urlTTLSeconds {
            return .fresh(TranscodeOutcome(key: key, metadata: object.metadata, object: object))
        }
        return .stale(TranscodeOutcome(key: key, metadata: object.metadata))
    }

    /// What the shared store's link for `url` leads to, adopted onto this disk: another node (or this one,
    /// before a restart) converted it. `.miss` on a single node, without a link, or when its object is gone.
    func resolveShared(_ url: URL, keys: SourceKeys) async throws -> Resolution {
        guard let link = try await self.results.sharedLink(urlKey: keys.urlKey) else { return .miss }
        // Another node fetched it under its policy; this node's decides here too.
        try await self.downloader.checkCachedDestination(url)
        guard let outcome = try await self.adopt(link, urlKey: keys.urlKey) else { return .miss }
        let validated = link.source?.validatedAt ?? 0
        let age = max(0, Date().timeIntervalSince1970 - validated)
        self.cache.links.renewLink(urlKey: keys.urlKey, age: age)
        return age < self.urlTTLSeconds ? .fresh(outcome) : .stale(outcome)
    }

    /// Follows a link of the shared store: the object onto the local disk, the link beside it.
    /// - Returns: nil when the object is gone from the store.
    func adopt(_ link: ResultLink, urlKey: URLKey) async throws -> TranscodeOutcome? {
        guard self.results.shared != nil else { return nil }
        if try await self.takedowns.isBuried([.object(link.key)]) {
            throw ServiceError.takenDown("this was taken down")
        }
        guard let metadata = try await self.results.object(link.key) else { return nil }
        try await self.takedowns.check(link.key, metadata: metadata)
        try self.cache.links.link(urlKey: urlKey, to: link.key, source: link.source)
        return TranscodeOutcome(key: link.key, metadata: metadata)
    }

    /// The origin answered 304 to a revalidation: the stored result is fresh again.
    func notModified(_ stale: TranscodeOutcome, urlKey: URLKey, record: SourceRecord?) async {
        if var record {
            record.validatedAt = Date().timeIntervalSince1970
            await self.results.revalidated(urlKey: urlKey, key: stale.key, record: record)
        }
        self.cache.links.renewLink(urlKey: urlKey)
        self.metrics.revalidated(.notModified)
    }

    /// A revalidation the origin did not answer: the stored result stays in service (stale-if-error) when
    /// the origin is down or slow; a URL the origin no longer has, or may no longer be fetched, fails.
    func revalidationFailed(
        _ error: ServiceError, stale: TranscodeOutcome, urlKey: URLKey, record: SourceRecord?
    ) async throws -> TranscodeOutcome {
        switch error.code {
        case .originError, .originTimeout:
            self.metrics.revalidated(.failed)
            // Stale for too long: the origin has been failing past the grace; answer its error.
            let now = Date().timeIntervalSince1970
            let validated = record?.validatedAt ?? (now - (self.cache.links.linkAge(urlKey: urlKey) ?? .infinity))
            guard now - validated < self.urlTTLSeconds + self.staleIfErrorSeconds else { throw error }
            self.logger.warning(
                "revalidation failed; serving the stored result",
                metadata: ["request.key": "\(urlKey.rawValue.prefix(16))", "error.code": "\(error.code)"])
            // Back off: the next minute's requests are answered from the cache at once instead of each waiting
            // for the failing origin. The grace counts from the last validation, which this does not move.
            let backoff = min(Self.revalidationBackoffSeconds, self.urlTTLSeconds)
            self.cache.links.renewLink(urlKey: urlKey, age: self.urlTTLSeconds - backoff)
            return stale
        case .originNotFound, .originRefused:
            await self.results.dropLink(urlKey: urlKey)
            throw error
        default:
            throw error
        }
    }
}
