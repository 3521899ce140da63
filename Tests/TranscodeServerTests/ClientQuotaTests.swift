import Foundation
import Synchronization
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// Clients, their token buckets and their turns: the bucket's arithmetic on a clock the test moves, the turns the
/// pool gives clients within a class, the configuration's refusals, and a server's answers (429 `quota-exceeded`
/// with `Retry-After`, `RateLimit` and `RateLimit-Policy`) for a token's client, a signing key's and an address.
@Suite(.tags(.integration), .timeLimit(.minutes(2))) struct ClientQuotaTests {
    /// A clock the test moves.
    final class Clock: Sendable {
        private let seconds = Mutex(1_000.0)
        func advance(_ by: Double) { self.seconds.withLock { $0 += by } }
        var now: @Sendable () -> Double { { self.seconds.withLock { $0 } } }
    }

    @Test func aBucketRefusesWhenEmptyAndSaysWhenItsNextTokenComes() throws {
        let clock = Clock()
        let policy = try #require(QuotaPolicy("0.5/2"))
        let quotas = ClientQuotas(policies: ["cms": policy], now: clock.now)
        let cms = RequestClient.named("cms")
        guard case .taken(let first) = quotas.take(cms) else { Issue.record("the first was refused"); return }
        #expect(first.remaining == 1)
        #expect(first.policyField == #""cms";q=2;w=4"#)
        #expect(first.field == #""cms";r=1;t=2"#)
        guard case .taken(let second) = quotas.take(cms) else { Issue.record("the second was refused"); return }
        #expect(second.field == #""cms";r=0;t=4"#)
        #expect(quotas.take(cms) == .refused(second, retryAfter: 2))
        clock.advance(1)
        guard case .refused(_, let retryAfter) = quotas.take(cms) else { Issue.record("taken too soon"); return }
        #expect(abs(retryAfter - 1) < 1e-9)
        clock.advance(1)
        guard case .taken(let third) = quotas.take(cms) else { Issue.record("no token after 2 s"); return }
        #expect(third.remaining == 0)
        // A token given back (its job was refused before any work) is there again.
        quotas.giveBack(cms)
        guard case .taken = quotas.take(cms) else { Issue.record("the token given back is not there"); return }
        // A client without an entry has no quota; nor does an address without an `open` entry.
        #expect(quotas.take(.named("other")) == .unlimited)
        #expect(quotas.take(.address("192.0.2.1")) == .unlimited)
        // Refilled, never beyond the burst.
        clock.advance(3_600)
        guard case .taken(let full) = quotas.take(cms) else { Issue.record("refused after an hour"); return }
        #expect(full.remaining == 1)
    }

    @Test func everyAddressHasItsOwnBucketAndTheTableIsBounded() throws {
        let clock = Clock()
        let quotas = ClientQuotas(
            policies: ["open": try #require(QuotaPolicy("1/1"))], maxAddressBuckets: 8, now: clock.now)
        guard case .taken = quotas.take(.address("192.0.2.1")) else { Issue.record("refused"); return }
        guard case .refused = quotas.take(.address("192.0.2.1")) else { Issue.record("a second token"); return }
        guard case .taken(let other) = quotas.take(.address("192.0.2.2")) else { Issue.record("shared bucket"); return }
        #expect(other.name == "open")
        for index in 0..<1_000 {
            _ = quotas.take(.address("198.51.100.\(index % 250)-\(index)"))
            #expect(quotas.addressBuckets <= 8)
        }
    }

    @Test(arguments: ["0.5/4", "10/1", "1000000/1000000"]) func policiesParse(_ text: String) {
        #expect(QuotaPolicy(text) != nil)
    }

    @Test(arguments: ["0/4", "1/0", "-1/2", "x/1", "1", "1/2/3", "nan/2", "inf/2", "1/2.5", ""])
    func badPoliciesAreRefused(_ text: String) {
        #expect(QuotaPolicy(text) == nil)
    }

    /// One worker, held; client a queues four jobs, then client b one, all interactive. Released, b's starts
    /// second, not after a's four; an upgrade of a client with nothing running still waits behind them all.
    @Test func clientsTakeTurnsWithinAClass() async throws {
        let pool = TranscodePool(workers: 1, queueLength: 16, graceSeconds: 1)
        let latch = PoolSchedulingTests.Latch()
        let order = PoolSchedulingTests.Shared<[String]>([])
        let holder = Task { try await pool.run { latch.wait() } }
        try await PoolSchedulingTests.until { pool.startedByPriority[.interactive] == 1 }
        @Sendable func start(_ name: String, _ client: String, _ priority: JobPriority) -> Task<Void, any Error> {
            RequestClient.$current.withValue(.named(client)) {
                Task { try await pool.run(priority: priority) { order.withLock { $0.append(name) } } }
            }
        }
        var waiting: [Task<Void, any Error>] = []
        for (name, client, priority) in [
            ("c-upgrade", "c", JobPriority.upgrade), ("a1", "a", .interactive), ("a2", "a", .interactive),
            ("a3", "a", .interactive), ("a4", "a", .interactive), ("b1", "b", .interactive),
        ] {
            waiting.append(start(name, client, priority))
            let queued = waiting.count
            try await PoolSchedulingTests.until { pool.waiting == queued }
        }
        latch.release()
        try await holder.value
        for task in waiting { try await task.value }
        #expect(order.withLock { $0 } == ["a1", "b1", "a2", "a3", "a4", "c-upgrade"])
        try await pool.stop()
    }

    @Test func namedClientsAndTheirQuotasAreRead() async throws {
        let configuration = try await ServerConfiguration.load(
            filePath: nil,
            arguments: [
                "--auth-tokens", "first-bearer-token-0123,second-bearer-token-0123,third-bearer-token-0123",
                "--auth-clients", "cms,cms", "--quota-limits", "cms=5/20,token-3=0.5/4,open=1/2",
            ], environment: [:])
        #expect(configuration.authClients == ["cms", "cms", "token-3"])
        #expect(
            configuration.quota.limits == [
                "cms": QuotaPolicy(ratePerSecond: 5, burst: 20), "token-3": QuotaPolicy(ratePerSecond: 0.5, burst: 4),
                "open": QuotaPolicy(ratePerSecond: 1, burst: 2),
            ])
    }

    static let tokenA = "client-a-token-0123456789"
    static let tokenB = "client-b-token-0123456789"

    /// Two tokens of clients a and b; a may start 2 conversions at once and one more each 1,000 s (slow enough that
    /// no token comes back during the test, however loaded the machine); b has no quota. a's third
    /// cold request is refused 429 before any download, with the bucket's fields; b goes on; the refusal is counted
    /// under a's name.
    @Test func aTokensClientIsRefusedPastItsQuota() async throws {
        try await withHarness(configure: {
            $0.authTokens = [Self.tokenA, Self.tokenB]
            $0.authClients = ["a", "b"]
            $0.quota.limits = ["a": QuotaPolicy(ratePerSecond: 0.001, burst: 2)]
        }) { harness in
            let a = [("Authorization", "Bearer \(Self.tokenA)")]
            let b = [("Authorization", "Bearer \(Self.tokenB)")]
            // Cold and cheap: the origin answers 404 at once (each URL its own, so none is a cached failure).
            let first = try await harness.transcode(url: harness.originURL("/status/404?n=1"), headers: a)
            #expect(first.status == 404, "\(first.text)")
            #expect(first.headers.first(name: "RateLimit-Policy") == #""a";q=2;w=2000"#)
            #expect(first.headers.first(name: "RateLimit")?.hasPrefix(#""a";r=1;t="#) == true)
            let second = try await harness.transcode(url: harness.originURL("/status/404?n=2"), headers: a)
            #expect(second.headers.first(name: "RateLimit")?.hasPrefix(#""a";r=0;t="#) == true)
            let third = try await harness.transcode(url: harness.originURL("/status/404?n=3"), headers: a)
            #expect(third.status == 429, "\(third.text)")
            #expect(third.headers.first(name: "X-Error-Code") == "quota-exceeded")
            let retryAfter = try #require(third.headers.first(name: "Retry-After").flatMap(Int.init))
            #expect((1...1000).contains(retryAfter))
            #expect(third.headers.first(name: "RateLimit")?.hasPrefix(#""a";r=0;t="#) == true)
            #expect(harness.origin.count("/status/404") == 2, "the refused request reached the origin")
            // A cache hit costs nothing: the sample, converted for b, then asked for by a.
            let sample = harness.originURL("/corpus/cartoon_hotdog.gif")
            #expect(try await harness.transcode(url: sample, headers: b).status == 200)
            let hit = try await harness.transcode(url: sample, headers: a)
            #expect(hit.status == 200)
            #expect(hit.headers.first(name: "RateLimit") == nil)
            // b has no quota and no fields.
            for n in 4...6 {
                let reply = try await harness.transcode(url: harness.originURL("/status/404?n=\(n)"), headers: b)
                #expect(reply.status == 404 && reply.headers.first(name: "RateLimit") == nil)
            }
            let metrics = try await harness.request(.GET, "/metrics").text
            #expect(metrics.contains(#"transcode_quota_refusals_total{client="a"} 1"#), "\(metrics)")
        }
    }

    /// An upload is charged before its body is read; on open routes (no tokens) each address has the `open` bucket.
    @Test func anOpenRoutesAddressIsRefusedBeforeItsUploadIsRead() async throws {
        try await withHarness(configure: {
            $0.quota.limits = ["open": QuotaPolicy(ratePerSecond: 0.001, burst: 1)]
        }) { harness in
            let gif = try corpusBytes("cartoon_hotdog.gif")
            let first = try await harness.upload(gif)
            #expect(first.status == 200, "\(first.text)")
            #expect(first.headers.first(name: "RateLimit-Policy") == #""open";q=1;w=1000"#)
            let second = try await harness.upload(gif)
            #expect(second.status == 429 && second.headers.first(name: "X-Error-Code") == "quota-exceeded")
            let url = try await harness.transcode(url: harness.originURL("/status/404?n=1"))
            #expect(url.status == 429, "one bucket per address, whatever the route")
            let metrics = try await harness.request(.GET, "/metrics").text
            #expect(metrics.contains(#"transcode_quota_refusals_total{client="open"} 2"#), "\(metrics)")
        }
    }

    /// A signed URL counts against its key's client (`signing.clients`), whoever reads it.
    @Test func aSignedURLCountsAgainstItsKeysClient() async throws {
        try await withHarness(configure: {
            $0.signing.keys = [SourceRouteTests.key]
            $0.signing.salts = [SourceRouteTests.salt]
            $0.signing.clients = ["site"]
            $0.quota.limits = ["site": QuotaPolicy(ratePerSecond: 0.001, burst: 1)]
        }) { harness in
            let first = try await harness.request(.GET, SourceRouteTests.signed(harness.originURL("/status/404?n=1")))
            #expect(first.status == 404, "\(first.text)")
            #expect(first.headers.first(name: "RateLimit-Policy") == #""site";q=1;w=1000"#)
            let second = try await harness.request(.GET, SourceRouteTests.signed(harness.originURL("/status/404?n=2")))
            #expect(second.status == 429 && second.headers.first(name: "X-Error-Code") == "quota-exceeded")
            #expect(second.headers.first(name: "Retry-After").flatMap(Int.init).map { (1...1000).contains($0) } == true)
        }
    }
}
