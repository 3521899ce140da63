import Foundation
import Logging
import TranscodeCore
import TranscodeHTTP

/// Everything the service can be told at startup, by domain: each domain's type holds its keys' defaults (its
/// property values, the only place they are stated) and reads its own section, beside the type it configures.
/// `config/transcode-server.json` lists every key with its default; `ConfigurationTests` keeps the two, and the
/// table of docs/configuration.md, equal.
struct ServerConfiguration: Sendable, Equatable {
    /// Address to listen on. `host`, default 127.0.0.1.
    var host = "127.0.0.1"
    /// `port`, default 8080 (0 picks a free port; tests use it).
    var port = 8080
    /// `cache.*` (`Services/Storage/DiskCache+Configuration.swift`).
    var cache = CacheConfiguration()
    /// `download.*` (`Services/Fetch/Downloader+Configuration.swift`).
    var download = DownloadConfiguration()
    /// `transcode.*` and `limits.*` (`Services/Conversion/TranscodePool+Configuration.swift`).
    var transcode = TranscodeConfiguration()
    /// `http.*` (`Controllers/HTTPConfiguration.swift`).
    var http = HTTPConfiguration()
    /// `signing.*` (`Services/Signing/URLSigner+Configuration.swift`).
    var signing = SigningConfiguration()
    /// `webhooks.*` (`Services/Webhooks/Webhooks+Configuration.swift`).
    var webhooks = WebhookConfiguration()
    /// `rewrite.*` (`Controllers/RewriteController+Configuration.swift`).
    var rewrite = RewriteConfiguration()
    /// `log.*` (`Configuration/LogConfiguration.swift`).
    var log = LogConfiguration()
    /// `storage.*`: where results are kept beyond the local disk: nothing (one node), or an S3 bucket a fleet
    /// shares (`Services/S3/StorageConfiguration.swift`).
    var storage = StorageConfiguration()
    /// `queue.*`: batches on this node (`local`), or in a database the fleet shares (`postgres`)
    /// (`Services/Jobs/QueueConfiguration.swift`).
    var queue = QueueConfiguration()
    /// Bearer tokens accepted on `POST /transcode` and the purge routes; empty: no authentication.
    /// `auth.tokens`.
    var authTokens: [String] = []
    /// The client each token belongs to, paired by position (`token-<n>` where not named): what fairness and
    /// quotas count by (`RequestClient`). `auth.clients`.
    var authClients: [String] = []
    /// `quota.*` (`Services/Clients/ClientQuotas+Configuration.swift`).
    var quota = QuotaConfiguration()
    /// `tracing.*` (`Services/Tracing/TraceExport.swift`).
    var tracing = TracingConfiguration()
    /// Origins allowed to call `POST /transcode` from a browser (CORS); `*` for any. `cors.allowedOrigins`.
    /// `/media` and `GET /v1/...` allow every origin: they are public.
    var corsAllowedOrigins: [String] = []
    /// Grace period for in-flight transcodes on SIGTERM. `shutdown.graceSeconds`, default 30.
    var shutdownGraceSeconds: Double = 30
    /// How long `/readyz` answers 503 after SIGTERM while every route keeps serving, before the listener closes
    /// (`ShutdownDrain`). `shutdown.drainSeconds`, default 5.
    var shutdownDrainSeconds: Double = 5
    /// Most URLs in one `POST /v1/batches`. `batch.maxUrls`, default 10000.
    var batchMaxURLs = 10_000
    /// A complete batch (its results, its status) is deleted this long after it was created.
    /// `batch.retentionSeconds`, default 604800 (7 days).
    var batchRetentionSeconds: Double = 604_800
}

extension ServerConfiguration {
    /// What an operator checks first at startup: the file read, the address, where results are kept, and whether
    /// signing, tokens, webhooks and loopback origins are on (never a key or a token itself).
    /// - Parameter configFile: the configuration file read, nil when none was.
    func startupSummary(configFile: String?) -> Logger.Metadata {
        [
            "version": "\(TranscodeServerCommand.version)",
            "config.file": "\(configFile ?? "none (defaults, environment, flags)")",
            "address": "\(self.host):\(self.port)",
            "storage.kind": "\(self.storage.kind.rawValue)",
            "queue.kind": "\(self.queue.kind.rawValue)",
            "cache.directory": "\(self.cache.directory)",
            "transcode.workers": "\(self.transcode.workers)",
            "signing": "\(self.signing.keys.isEmpty ? "off" : "on (\(Self.count(self.signing.keys.count, "key")))")",
            "auth":
                "\(self.authTokens.isEmpty ? "off: anyone may POST" : "on (\(Self.count(self.authTokens.count, "token")))")",
            "webhooks": "\(self.webhooks.secrets.isEmpty ? "off" : "on")",
            "tracing": "\(self.tracing.enabled ? "on (\(self.tracing.endpoint))" : "off")",
            "quota": "\(self.quota.limits.isEmpty ? "off" : self.quota.limits.keys.sorted().joined(separator: ", "))",
            "download.allowLoopback": "\(self.download.allowLoopback)",
        ]
    }

    private static func count(_ number: Int, _ noun: String) -> String {
        "\(number) \(noun)\(number == 1 ? "" : "s")"
    }
}
