import Foundation
import Logging
import Transcoder

/// Everything the service can be told at startup. Defaults are the documented ones
/// (`config/transcode-server.json` lists them with their keys).
struct ServerConfiguration: Sendable {
    /// Address to listen on. `host`, default 127.0.0.1.
    var host = "127.0.0.1"
    /// `port`, default 8080 (0 picks a free port; tests use it).
    var port = 8080
    /// The disk cache. `cache.directory`, default `./cache`.
    var cacheDirectory = "./cache"
    /// `cache.maxBytes`, default 10 GiB. Least recently used results are evicted beyond it.
    var cacheMaxBytes: Int64 = 10 * 1024 * 1024 * 1024
    /// Below this much free space on the cache's file system, `/readyz` answers 503 so a balancer sends
    /// work elsewhere; writes that hit a full disk answer 507 anyway. `cache.minFreeBytes`.
    var cacheMinFreeBytes: Int64 = 256 * 1024 * 1024
    /// A URL's result is served this long after it was fetched; past it, the next request revalidates with
    /// the origin (`If-None-Match` / `If-Modified-Since`). `cache.urlTTLSeconds`, default 86400.
    var urlTTLSeconds: Double = 86400
    /// While a URL's origin fails (5xx, timeout), its stored result is served for up to this long past the
    /// TTL, the origin asked again at most once a minute. `cache.staleIfErrorSeconds`, default 604800 (7 days).
    var staleIfErrorSeconds: Double = 604_800
    var download = DownloadConfiguration()
    /// Threads that run transcodes. `transcode.workers`, default: the number of cores.
    var transcodeWorkers = ProcessInfo.processInfo.activeProcessorCount
    /// Jobs that may wait for a worker; beyond, requests get 429. `transcode.queueLength`, default 32.
    var transcodeQueueLength = 32
    /// Output options: background, CRF, preset, threads, output box and input limits.
    var transcodeOptions = TranscodeOptions()
    /// How long `POST /transcode` waits before answering 202. `transcode.syncWaitSeconds`, default 30.
    var syncWaitSeconds: Double = 30
    /// Largest request body (an uploaded GIF or JSON). `http.maxBodyBytes`, default 50 MB.
    var maxRequestBodyBytes = 50_000_000
    /// Idle connections are closed after this, and those whose client takes none of an answer's bytes for this
    /// long. `http.idleTimeoutSeconds`, default 30.
    var idleTimeoutSeconds: Double = 30
    /// A request head must arrive in full within this, from the connection's start or the previous
    /// response's end. `http.headerTimeoutSeconds`, default 10.
    var headerTimeoutSeconds: Double = 10
    /// An uploaded GIF must arrive in full within this many seconds of its first byte being read; a body
    /// that drips is answered 408. `http.bodyTimeoutSeconds`, default 30.
    var bodyTimeoutSeconds: Double = 30
    /// Bearer tokens accepted on `POST /transcode` and the purge routes; empty: no authentication.
    /// `auth.tokens`.
    var authTokens: [String] = []
    /// Prefixed to the URLs answers carry (`https://media.example.com`); empty: relative URLs.
    /// `http.publicBaseURL`.
    var publicBaseURL = ""
    /// `Cache-Control: max-age` of `/media` (content-addressed, immutable). `http.mediaMaxAgeSeconds`,
    /// default one year.
    var mediaMaxAgeSeconds = 31_536_000
    /// `Cache-Control: max-age` of `GET /v1/...`, whose answer follows the origin's GIF.
    /// `http.sourceMaxAgeSeconds`, default 3600.
    var sourceMaxAgeSeconds = 3600
    /// `bytes` (the file itself) or `redirect` (302 to `/media/...`) on `GET /v1/...`. `http.sourceAnswer`.
    var sourceAnswer = SourceController<AppRequestContext>.Answer.bytes
    /// HMAC keys and salts (hex, paired by position) of the signed `GET /v1/...` URLs; the first signs, any
    /// one is accepted. `signing.keys`, `signing.salts`.
    var signingKeys: [String] = []
    var signingSalts: [String] = []
    /// Accept `GET /v1/...` without a valid signature: for development only. `signing.disabled`.
    var signingDisabled = false
    /// Origins allowed to call `POST /transcode` from a browser (CORS); `*` for any. `cors.allowedOrigins`.
    /// `/media` and `GET /v1/...` allow every origin: they are public.
    var corsAllowedOrigins: [String] = []
    /// `log.level`, default info.
    var logLevel: Logger.Level = .info
    /// `text` (human-readable lines) or `json` (one JSON object per line). `log.format`.
    var logFormat = "text"
    /// Grace period for in-flight transcodes on SIGTERM. `shutdown.graceSeconds`, default 30.
    var shutdownGraceSeconds: Double = 30
    /// Standard Webhooks signing secrets (`whsec_` + base64, or base64; 16 bytes or more), each signing every
    /// delivery (rotation); empty: `callbackURL` is refused. `webhooks.secrets`.
    var webhookSecrets: [String] = []
    /// The first retry of a failed delivery after this, then twice as long each time (at most 5 minutes).
    /// `webhooks.firstRetrySeconds`, default 1.
    var webhookFirstRetrySeconds: Double = 1
    /// A delivery is retried until this long after its first attempt. `webhooks.maxRetrySeconds`, default 3600.
    var webhookMaxRetrySeconds: Double = 3600
    /// Most URLs in one `POST /v1/batches`. `batch.maxUrls`, default 10000.
    var batchMaxURLs = 10_000
    /// Largest document `POST /v1/rewrite` takes. `rewrite.maxBodyBytes`, default 5 MB.
    var rewriteMaxBodyBytes = 5_000_000
    /// Most GIFs one document may have; beyond, 422 `too-many-gifs`. `rewrite.maxGifs`, default 500.
    var rewriteMaxGIFs = 500
    /// Where results are kept beyond the local disk: nothing (one node), or an S3 bucket a fleet shares.
    var storage = StorageConfiguration()
}

/// `storage.*`: the local disk alone (`disk`, the default), or S3-compatible object storage shared by a fleet,
/// the local disk cache in front of it.
struct StorageConfiguration: Sendable {
    enum Kind: String, Sendable { case disk, s3 }
    /// How a node answers for an object its disk lacks.
    enum Serve: String, Sendable {
        /// Copy it from the store onto the local disk, then serve it with byte ranges (read-through).
        case local
        /// 302 to a presigned URL of the store.
        case redirect
    }

    /// `storage.kind`, default `disk`.
    var kind = Kind.disk
    /// `storage.s3.endpoint`, `.bucket`, `.region` (us-east-1), `.pathStyle` (true), `.timeoutSeconds` (10);
    /// credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` only. Set when
    /// `kind` is `s3`.
    var s3: S3Configuration?
    /// `storage.s3.serve`, default `local`.
    var serve = Serve.local
    /// Lifetime of presigned URLs (`redirect`). `storage.s3.presignSeconds`, default 3600.
    var presignSeconds = 3600
    /// Create the bucket at startup if it does not exist. `storage.s3.createBucket`, default false.
    var createBucket = false
    /// A cache hit trusts the store's "not taken down" for this long. `storage.s3.tombstoneCheckSeconds`,
    /// default 10.
    var tombstoneCheckSeconds: Double = 10
}

/// Limits of the downloader: what it may reach and for how long.
struct DownloadConfiguration: Sendable {
    /// Largest GIF fetched, checked on Content-Length and on the bytes streamed. `download.maxBytes`,
    /// default 50 MB.
    var maxBytes = 50_000_000
    /// `download.connectTimeoutSeconds`, default 5.
    var connectTimeoutSeconds: Double = 5
    /// The whole download, redirects included, must finish within this. `download.timeoutSeconds`, default 30.
    var timeoutSeconds: Double = 30
    /// `download.maxRedirects`, default 5.
    var maxRedirects = 5
    /// Allow 127.0.0.0/8 and ::1 as destinations (tests use it; never in production).
    /// `download.allowLoopback`, default false.
    var allowLoopback = false
    /// When not empty, only these host names (exact, case-insensitive) may be fetched.
    /// `download.allowedHosts`.
    var allowedHosts: [String] = []
}
