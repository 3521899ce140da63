import Foundation
import PostgresNIO

/// `queue.*`: where batches live and who runs their items. `local` (the default): this node's disk and
/// workers, nothing else needed. `postgres`: a PostgreSQL database the fleet shares; every node's idle
/// workers take batch items, and any node answers for any batch.
package struct QueueConfiguration: Sendable, Equatable {
    package init() {}

    package enum Kind: String, Sendable { case local, postgres }

    /// `queue.kind`, default `local`.
    package var kind = Kind.local
    /// `queue.url`: `postgres://user@host:port/database`. The password comes from `PGPASSWORD` only, never from
    /// a file or a flag. Set when `kind` is `postgres`.
    package var url: URL?
    var password: String?
    /// How long a claimed job is a worker's before another may take it, unless renewed (the worker renews it
    /// every third of this). `queue.leaseSeconds`, default 30.
    var leaseSeconds: Double = 30
    /// Claims of one job that may end without a report (its worker died or stalled) before it is kept as a dead
    /// letter; passing failures give the claim back uncounted. `queue.maxAttempts`, default 5.
    var maxAttempts = 5
    /// How long a batch route waits for the database before answering 503 `queue-unavailable`.
    /// `queue.timeoutSeconds`, default 5.
    package var timeoutSeconds: Double = 5

    /// The client's configuration; nil unless `kind` is `postgres`.
    package var client: PostgresClient.Configuration? {
        guard self.kind == .postgres, let url = self.url, let host = url.host else { return nil }
        var configuration = PostgresClient.Configuration(
            host: host, port: url.port ?? 5432, username: url.user ?? "postgres", password: self.password,
            database: url.path.count > 1 ? String(url.path.dropFirst()) : nil, tls: .disable)
        configuration.options.connectTimeout = .milliseconds(Int64(self.timeoutSeconds * 1000))
        return configuration
    }
}

extension QueueConfiguration {
    /// Reads `section` (`queue`); a key not set keeps its default. The password comes from `environment`
    /// (`PGPASSWORD`).
    package init(_ section: ConfigSection, environment: [String: String]) {
        self.init()
        let reader = section.reader
        let kind = reader.string(forKey: "kind", default: self.kind.rawValue)
        let url = reader.string(forKey: "url", default: "")
        self.leaseSeconds = reader.double(forKey: "leaseSeconds", default: self.leaseSeconds)
        section.check("leaseSeconds", self.leaseSeconds >= 1, "1 or more")
        self.maxAttempts = reader.int(forKey: "maxAttempts", default: self.maxAttempts)
        section.check("maxAttempts", self.maxAttempts >= 1, "1 or more")
        self.timeoutSeconds = reader.double(forKey: "timeoutSeconds", default: self.timeoutSeconds)
        section.check("timeoutSeconds", self.timeoutSeconds > 0, "positive")
        switch Kind(rawValue: kind) {
        case .local:
            self.kind = .local
        case .postgres:
            self.kind = .postgres
            let parsed = URL(string: url)
            if parsed?.host == nil || !["postgres", "postgresql"].contains(parsed?.scheme ?? "") {
                section.refuse("url", "must be a postgres:// URL, e.g. postgres://transcode@127.0.0.1:5432/transcode")
            } else if parsed?.password != nil {
                section.refuse("url", "the password goes in PGPASSWORD, not in the URL")
            } else {
                self.url = parsed
            }
            self.password = environment["PGPASSWORD"]
        case nil:
            section.refuse("kind", "must be local or postgres, got \(kind)")
        }
    }
}
