import Foundation
import Logging
import Synchronization

/// A token bucket's policy: `burst` requests at once, refilled at `ratePerSecond`.
package struct QuotaPolicy: Sendable, Equatable, CustomStringConvertible {
    let ratePerSecond: Double
    let burst: Int

    /// `<rate>/<burst>`, e.g. `0.5/4`: half a request per second, four at once.
    init?(_ text: some StringProtocol) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let rate = Double(parts[0]), rate.isFinite, rate > 0, rate <= 1_000_000,
            let burst = Int(parts[1]), (1...1_000_000).contains(burst)
        else { return nil }
        self.init(ratePerSecond: rate, burst: burst)
    }

    init(ratePerSecond: Double, burst: Int) {
        self.ratePerSecond = ratePerSecond
        self.burst = burst
    }

    /// Seconds for an empty bucket to fill: the draft's window `w`.
    var windowSeconds: Int { max(1, Int((Double(self.burst) / self.ratePerSecond).rounded(.up))) }

    package var description: String { "\(self.ratePerSecond)/\(self.burst)" }
}

/// Token-bucket quotas per client (`quota.limits`): each request that spends work (a URL that misses the cache, an
/// upload) takes one token from its client's bucket first; with none left it is refused 429 before any work, with
/// `Retry-After` the seconds until a token is back.
///
/// A configured client has one bucket, the fleet's when the nodes share a job database (`SharedQuotaBuckets`: a
/// client's quota is then the fleet's, whichever node it reaches); every address on an open route has its own
/// under the `open` policy, on each node.
/// Address buckets are bounded: a full bucket is the same as none, so full ones are dropped when the table grows
/// past `maxAddressBuckets`.
///
/// The answer's `RateLimit-Policy` and `RateLimit` fields follow draft-ietf-httpapi-ratelimit-headers-10:
/// `"<name>";q=<burst>;w=<seconds to fill>` and `"<name>";r=<tokens left>;t=<seconds until full>`.
package final class ClientQuotas: Sendable {
    /// What a take left, for the answer's fields.
    package struct Reading: Sendable, Equatable {
        let name: String
        let policy: QuotaPolicy
        /// Whole tokens left.
        let remaining: Int
        /// Seconds until the bucket is full again.
        let secondsUntilFull: Double
        /// Whether the fleet's bucket said it (`shared`), not this node's.
        var fleet = false

        /// `RateLimit-Policy`'s value.
        package var policyField: String { "\"\(self.name)\";q=\(self.policy.burst);w=\(self.policy.windowSeconds)" }
        /// `RateLimit`'s value.
        package var field: String {
            "\"\(self.name)\";r=\(self.remaining);t=\(Int(self.secondsUntilFull.rounded(.up)))"
        }
    }

    package enum Verdict: Sendable, Equatable {
        /// The client has no quota.
        case unlimited
        /// A token was taken.
        case taken(Reading)
        /// No token: try again in `retryAfter` seconds (`retryAfterSeconds` rounded up, at least 1).
        case refused(Reading, retryAfter: Double)
    }

    /// A token taken for a request, to give back if its work never starts.
    package struct Charge: Sendable, Equatable {
        let client: RequestClient
        /// Taken from the fleet's bucket.
        let fleet: Bool
    }

    let policies: [String: QuotaPolicy]
    let maxAddressBuckets: Int
    private let now: @Sendable () -> Double
    private let buckets = Mutex<[String: Bucket]>([:])
    /// The fleet's buckets, for configured clients (addresses keep this node's: their table is bounded here).
    private let shared: (any SharedQuotaBuckets)?
    private let sharedTimeoutSeconds: Double
    /// After a failure of the shared buckets, this node's own are used until then (monotonic seconds).
    private let sharedUnavailableUntil = Mutex(-Double.infinity)
    private let logger: Logger

    private struct Bucket {
        var tokens: Double
        var updated: Double
        /// When the client was last refused (never: minus infinity).
        var refusedAt = -Double.infinity
    }

    /// How long after its last refusal a client counts as pressing its quota (`isPressing`).
    static let pressingSeconds = 10.0

    /// - Parameters:
    ///   - policies: by client name; `open` applies to each address on open routes.
    ///   - now: a monotonic clock in seconds (tests pass their own).
    ///   - shared: the fleet's buckets (`queue.kind: postgres`); a take that fails or takes longer than
    ///     `sharedTimeoutSeconds` is made from this node's bucket, as are the takes of the next
    ///     `sharedRetrySeconds`.
    package init(
        policies: [String: QuotaPolicy], maxAddressBuckets: Int = 65_536,
        now: @escaping @Sendable () -> Double = ClientQuotas.monotonicSeconds,
        shared: (any SharedQuotaBuckets)? = nil, sharedTimeoutSeconds: Double = 5,
        logger: Logger = Logger(label: "transcode.quotas")
    ) {
        self.policies = policies
        self.maxAddressBuckets = maxAddressBuckets
        self.now = now
        self.shared = shared
        self.sharedTimeoutSeconds = sharedTimeoutSeconds
        self.logger = logger
    }

    /// How long this node uses its own buckets after the fleet's failed.
    static let sharedRetrySeconds = 5.0

    /// Takes one token for `client`: from the fleet's bucket when there is one for it (a configured client, with
    /// `shared` answering), else from this node's (`take`).
    func charge(_ client: RequestClient) async -> Verdict {
        guard let policy = self.policies[client.label] else { return .unlimited }
        guard let shared = self.shared, client.label != RequestClient.openLabel,
            self.now() >= self.sharedUnavailableUntil.withLock({ $0 })
        else { return self.take(client) }
        do {
            let took = try await PostgresQueue.bounded(seconds: self.sharedTimeoutSeconds) {
                try await shared.take(client.key, policy: policy)
            }
            var reading = ClientQuotas.Reading(
                name: client.label, policy: policy, remaining: Int(max(0, took.tokens).rounded(.down)),
                secondsUntilFull: max(0, Double(policy.burst) - took.tokens) / policy.ratePerSecond)
            reading.fleet = true
            guard took.taken else {
                let now = self.now()
                self.buckets.withLock {
                    $0[client.key, default: Bucket(tokens: Double(policy.burst), updated: now)].refusedAt = now
                }
                return .refused(reading, retryAfter: (1 - took.tokens) / policy.ratePerSecond)
            }
            return .taken(reading)
        } catch {
            self.sharedUnavailableUntil.withLock { $0 = self.now() + Self.sharedRetrySeconds }
            self.logger.warning(
                "the fleet's quota buckets did not answer; this node's own count for \(Int(Self.sharedRetrySeconds)) s",
                metadata: ["error": "\(String(reflecting: error))"])
            return self.take(client)
        }
    }

    /// Gives back the token of `charge`, where it was taken.
    func refund(_ charge: Charge) async {
        guard charge.fleet, let shared = self.shared, let policy = self.policies[charge.client.label] else {
            return self.giveBack(charge.client)
        }
        do {
            try await PostgresQueue.bounded(seconds: self.sharedTimeoutSeconds) {
                try await shared.giveBack(charge.client.key, policy: policy)
            }
        } catch {
            self.logger.warning(
                "cannot give a token back to the fleet's quota bucket",
                metadata: ["error": "\(String(reflecting: error))"])
        }
    }

    var isEmpty: Bool { self.policies.isEmpty }

    /// Takes one token from `client`'s bucket, if it has a quota.
    func take(_ client: RequestClient) -> Verdict {
        guard let policy = self.policies[client.label] else { return .unlimited }
        let now = self.now()
        return self.buckets.withLock { buckets in
            var bucket = buckets[client.key] ?? Bucket(tokens: Double(policy.burst), updated: now)
            bucket.tokens = min(
                Double(policy.burst), bucket.tokens + max(0, now - bucket.updated) * policy.ratePerSecond)
            bucket.updated = now
            let verdict: Verdict
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                verdict = .taken(Self.reading(client, policy, bucket))
            } else {
                bucket.refusedAt = now
                verdict = .refused(
                    Self.reading(client, policy, bucket), retryAfter: (1 - bucket.tokens) / policy.ratePerSecond)
            }
            if buckets[client.key] == nil, client.label == RequestClient.openLabel,
                buckets.count >= self.maxAddressBuckets
            {
                Self.dropFull(&buckets, now: now, policies: self.policies)
            }
            buckets[client.key] = bucket
            return verdict
        }
    }

    /// Whether the client of `key` (`RequestClient.key`) was refused by its quota in the last `pressingSeconds`:
    /// it asks for more than its share, so the conversions it was admitted for yield the CPU to other clients'
    /// (`TranscodePool` runs them at the background's nice value).
    package func isPressing(_ key: String) -> Bool {
        let now = self.now()
        return self.buckets.withLock { $0[key].map { now - $0.refusedAt <= Self.pressingSeconds } ?? false }
    }

    /// Gives back a token taken for work that then never started (its job was refused).
    func giveBack(_ client: RequestClient) {
        guard let policy = self.policies[client.label] else { return }
        self.buckets.withLock { buckets in
            guard var bucket = buckets[client.key] else { return }
            bucket.tokens = min(Double(policy.burst), bucket.tokens + 1)
            buckets[client.key] = bucket
        }
    }

    /// Address buckets held now (tests read the bound).
    var addressBuckets: Int {
        self.buckets.withLock { $0.keys.count(where: { $0.hasPrefix("address:") }) }
    }

    private static func reading(_ client: RequestClient, _ policy: QuotaPolicy, _ bucket: Bucket) -> Reading {
        Reading(
            name: client.label, policy: policy, remaining: Int(bucket.tokens.rounded(.down)),
            secondsUntilFull: (Double(policy.burst) - bucket.tokens) / policy.ratePerSecond)
    }

    /// Drops the address buckets that have refilled (the same as no bucket); if none has, every address bucket
    /// (the table stays bounded; the addresses start full).
    private static func dropFull(_ buckets: inout [String: Bucket], now: Double, policies: [String: QuotaPolicy]) {
        guard let policy = policies[RequestClient.openLabel] else { return }
        let before = buckets.count
        buckets = buckets.filter { key, bucket in
            !key.hasPrefix("address:")
                || bucket.tokens + max(0, now - bucket.updated) * policy.ratePerSecond < Double(policy.burst)
        }
        if buckets.count == before {
            buckets = buckets.filter { !$0.key.hasPrefix("address:") }
        }
    }

    static let monotonicSeconds: @Sendable () -> Double = {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}

/// What a request's quota said, kept for its answer's `RateLimit` fields (`ClientMiddleware` reads it).
package final class QuotaNote: Sendable {
    private let reading = Mutex<ClientQuotas.Reading?>(nil)

    package init() {}

    package var value: ClientQuotas.Reading? { self.reading.withLock { $0 } }

    func record(_ reading: ClientQuotas.Reading) {
        self.reading.withLock { $0 = reading }
    }

    /// The note of the request this task serves; nil outside a request.
    @TaskLocal package static var current: QuotaNote?
}
