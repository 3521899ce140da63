import Foundation
import Logging
import PostgresNIO

/// What a shared bucket said to one take: the tokens left after it, and whether it took one.
package struct SharedTake: Sendable, Equatable {
    let tokens: Double
    let taken: Bool
}

/// Token buckets every node of a fleet reads and takes from (`ClientQuotas`' `shared`): a configured client's quota
/// is then the fleet's, not each node's.
package protocol SharedQuotaBuckets: Sendable {
    /// Refills `client`'s bucket under `policy` and takes a token if one is there, in one step no other node can
    /// interleave with.
    func take(_ client: String, policy: QuotaPolicy) async throws -> SharedTake
    /// Puts back a token taken for work that never started.
    func giveBack(_ client: String, policy: QuotaPolicy) async throws
}

/// The fleet's buckets in its job database (`queue.kind: postgres`, table `transcode_quota_buckets`): one row per
/// configured client, refilled and taken by one statement on the database's clock, so the nodes' clocks never
/// disagree about a refill and two nodes' takes queue on the row's lock. A new client's bucket starts full.
package struct PostgresQuotaBuckets: SharedQuotaBuckets {
    let client: PostgresClient
    let logger: Logger

    package init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    package func take(_ client: String, policy: QuotaPolicy) async throws -> SharedTake {
        let burst = Double(policy.burst)
        let rate = policy.ratePerSecond
        // In `ON CONFLICT DO UPDATE` the SET expressions see the row as it was before this statement, and the row
        // stays locked until it ends: the refill and the take are one step.
        let rows = try await self.client.query(
            """
            INSERT INTO transcode_quota_buckets AS bucket (client, tokens, updated_at, taken)
            VALUES (\(client), \(burst - 1), extract(epoch FROM clock_timestamp())::float8, true)
            ON CONFLICT (client) DO UPDATE SET
                tokens = least(\(burst), bucket.tokens + greatest(0, excluded.updated_at - bucket.updated_at) * \(rate))
                    - CASE WHEN least(\(burst), bucket.tokens
                            + greatest(0, excluded.updated_at - bucket.updated_at) * \(rate)) >= 1
                        THEN 1 ELSE 0 END,
                taken = least(\(burst), bucket.tokens
                    + greatest(0, excluded.updated_at - bucket.updated_at) * \(rate)) >= 1,
                updated_at = greatest(bucket.updated_at, excluded.updated_at)
            RETURNING tokens, taken
            """, logger: self.logger)
        for try await (tokens, taken) in rows.decode((Double, Bool).self) {
            return SharedTake(tokens: tokens, taken: taken)
        }
        throw ServiceError.internal("the quota bucket of \(client) returned no row")
    }

    package func giveBack(_ client: String, policy: QuotaPolicy) async throws {
        try await self.client.query(
            """
            UPDATE transcode_quota_buckets SET tokens = least(\(Double(policy.burst)), tokens + 1)
            WHERE client = \(client)
            """, logger: self.logger)
    }
}
