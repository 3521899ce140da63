// Written by scripts/config-keys from docs/configuration.md's table: edit the table and run the script.

/// Every configuration key with its default and meaning, as docs/configuration.md gives them: what
/// `transcode-server config` prints (ConfigurationTests holds the two equal, and every key read to a row).
enum ConfigurationKeys {
    struct Key: Sendable, Equatable {
        let name: String
        let defaultValue: String
        let meaning: String
    }

    static let all: [Key] = [
        Key(name: "host", defaultValue: "127.0.0.1", meaning: "address to listen on (`0.0.0.0` in the Docker image)"),
        Key(name: "port", defaultValue: "8080", meaning: "port"),
        Key(name: "cache.directory", defaultValue: "./cache", meaning: "the disk cache"),
        Key(
            name: "cache.maxBytes", defaultValue: "10737418240",
            meaning:
                "cache size cap; least recently used objects are evicted, never one being served (an object's last use survives a restart as its `.json`'s modification time, written at most once a minute)"
        ),
        Key(
            name: "cache.minFreeBytes", defaultValue: "268435456",
            meaning: "`/readyz` answers 503 while the cache's file system has less free space"),
        Key(
            name: "cache.urlTTLSeconds", defaultValue: "86400",
            meaning: "a URL's result is served this long, then revalidated with the origin"),
        Key(
            name: "cache.staleIfErrorSeconds", defaultValue: "604800",
            meaning:
                "while the origin fails (5xx, timeout), the stored result is served this long past the TTL, the origin retried at most once a minute"
        ),
        Key(name: "download.maxBytes", defaultValue: "50000000", meaning: "largest GIF fetched"),
        Key(name: "download.connectTimeoutSeconds", defaultValue: "5", meaning: "connect timeout"),
        Key(
            name: "download.timeoutSeconds", defaultValue: "30",
            meaning: "deadline for a whole download, redirects included"),
        Key(name: "download.maxRedirects", defaultValue: "5", meaning: "redirects followed"),
        Key(name: "download.allowLoopback", defaultValue: "false", meaning: "allow 127/8 and ::1 (tests only)"),
        Key(
            name: "download.allowedHosts", defaultValue: "[]", meaning: "when set, only these host names may be fetched"
        ),
        Key(
            name: "download.notFoundTTLSeconds", defaultValue: "60",
            meaning:
                "a URL whose origin answered 404 or 410 is answered so again, without asking the origin, for this long (0: ask every time)"
        ),
        Key(
            name: "download.failureTTLSeconds", defaultValue: "30",
            meaning:
                "a URL whose origin failed (5xx, timeout, transport or DNS) is answered so again, without asking the origin, for this long (0: ask every time)"
        ),
        Key(
            name: "transcode.workers", defaultValue: "0",
            meaning:
                "transcode threads; 0 = one per core. Worst case per worker: 649 MiB (a transparent AVIF at 1080x1080), which `transcode.memoryBudgetBytes` bounds for the whole process ([Memory per conversion](benchmarks.md#memory-per-conversion--scriptsbench-memory-formats))"
        ),
        Key(name: "transcode.queueLength", defaultValue: "32", meaning: "jobs that may wait for a worker; beyond: 429"),
        Key(
            name: "transcode.upgradeQueueLength", defaultValue: "64",
            meaning:
                "format upgrades (`.auto`'s AVIF and WebP, a lazy rewrite's prefetch) that may wait, in a room of their own; beyond, the upgrade is queued by a later request (`transcode_auto_fallbacks_total{reason=\"upgrade-refused\"}`)"
        ),
        Key(
            name: "transcode.memoryBudgetBytes", defaultValue: "1073741824",
            meaning:
                "the process's memory budget: a conversion starts only while the predicted peaks of those running and its own fit it, less 96 MiB for the process itself; one predicted above it alone is refused 503 `overloaded`. The prediction table and the worst case per worker: [Memory per conversion](benchmarks.md#memory-per-conversion--scriptsbench-memory-formats). 0: no memory admission. At least 268435456"
        ),
        Key(
            name: "transcode.syncWaitSeconds", defaultValue: "30",
            meaning: "how long `POST /transcode` waits before answering 202"),
        Key(name: "transcode.background", defaultValue: "#ffffff", meaning: "default background for transparency"),
        Key(
            name: "transcode.crf", defaultValue: "25",
            meaning: "x264 CRF (1-51; 0, lossless, needs a profile browsers do not play)"),
        Key(name: "transcode.preset", defaultValue: "medium", meaning: "x264 preset"),
        Key(
            name: "transcode.threads", defaultValue: "2",
            meaning:
                "x264 frame threads per job, under any load; part of the cache key (the bytes depend on it). 2 converts a lone large GIF 10-35% sooner; 1 gives about 7% more throughput when every worker is busy (see [One key, one file](fidelity.md#one-key-one-file))"
        ),
        Key(name: "transcode.maxOutputWidth", defaultValue: "1920", meaning: "larger canvases are scaled down"),
        Key(name: "transcode.maxOutputHeight", defaultValue: "1080", meaning: "larger canvases are scaled down"),
        Key(
            name: "transcode.maxSizeRatio", defaultValue: "1.0",
            meaning: "size guard: a video not smaller than this fraction of the GIF is encoded again"),
        Key(
            name: "transcode.maxExtraAttempts", defaultValue: "2",
            meaning:
                "size guard: extra encodes at most (0: off), besides the first and, when the first was stopped early and nothing else qualifies, the first again whole; when the first was stopped at its key frame and that misjudged the whole, the guard runs once more from the start (at most twice this many and 3 encodes in all: 7 by default)"
        ),
        Key(
            name: "transcode.minSSIM", defaultValue: "0.98",
            meaning: "size guard: no re-encode may fall under this SSIM (luma, x264's own, vs the encoded pictures)"),
        Key(name: "limits.maxInputBytes", defaultValue: "50000000", meaning: "largest GIF accepted"),
        Key(name: "limits.maxWidth", defaultValue: "4096", meaning: "largest canvas or frame"),
        Key(name: "limits.maxHeight", defaultValue: "4096", meaning: "largest canvas or frame"),
        Key(name: "limits.maxFrames", defaultValue: "3000", meaning: "most frames"),
        Key(name: "limits.maxTotalPixels", defaultValue: "1500000000", meaning: "canvas pixels x frames"),
        Key(name: "http.maxBodyBytes", defaultValue: "50000000", meaning: "largest request body"),
        Key(
            name: "http.idleTimeoutSeconds", defaultValue: "30",
            meaning: "idle connections are closed, and those whose client takes none of an answer's bytes for this long"
        ),
        Key(
            name: "http.headerTimeoutSeconds", defaultValue: "10",
            meaning: "a request head must arrive in full within this (slow-header clients are cut off)"),
        Key(
            name: "http.bodyTimeoutSeconds", defaultValue: "30",
            meaning:
                "an uploaded GIF must arrive in full within this; a dripping body is answered 408 `request-timeout`"),
        Key(
            name: "http.publicBaseURL", defaultValue: "\"\"",
            meaning: "when set (`https://media.example.com`), answers carry absolute URLs"),
        Key(
            name: "http.mediaMaxAgeSeconds", defaultValue: "31536000",
            meaning: "`Cache-Control: max-age` of `/media` (immutable)"),
        Key(
            name: "http.sourceMaxAgeSeconds", defaultValue: "3600",
            meaning:
                "`Cache-Control: max-age` of `GET /v1/...` (with `immutable` on an `.auto` answer from its finished object)"
        ),
        Key(
            name: "http.interimMaxAgeSeconds", defaultValue: "60",
            meaning:
                "`Cache-Control: max-age` of an `.auto` answer given while its better formats are made (a redirect to the GIF, or Safari's MP4)"
        ),
        Key(
            name: "http.sourceAnswer", defaultValue: "bytes",
            meaning: "`GET /v1/...` answers with the file, or `redirect` (302 to `/media`)"),
        Key(
            name: "http.answerAhead", defaultValue: "true",
            meaning:
                "cache hits are answered from the bytes read, ahead of the HTTP decoder; `false` leaves them to the same logic behind it (for measuring what that saves, `scripts/bench-hits-ab --new-env`)"
        ),
        Key(
            name: "http.maxConnections", defaultValue: "0",
            meaning:
                "connections open at once; one more is answered 503 `overloaded` and closed. `0`: three quarters of the descriptor limit (which `serve` raises to the hard limit at startup). Set near or above that limit, idle connections can take every descriptor, and what needs one (an object's files, a download) is answered 503 `overloaded` until they close"
        ),
        Key(
            name: "signing.keys", defaultValue: "[]",
            meaning:
                "hex HMAC keys (16 bytes or more) and salts of the signed URLs, paired by position; the first signs"),
        Key(
            name: "signing.salts", defaultValue: "[]",
            meaning:
                "hex HMAC keys (16 bytes or more) and salts of the signed URLs, paired by position; the first signs"),
        Key(
            name: "signing.clients", defaultValue: "[]",
            meaning:
                "the client each signing key's URLs count against, paired with `signing.keys` by position (`key-1`, `key-2`, ... where not named): the site whose pages carry them, whoever reads them; a name is 1-32 of `a-z`, `0-9`, `-`, `_`. Fair scheduling and quotas count by client ([Clients, fairness and quotas](operations.md#clients-fairness-and-quotas))"
        ),
        Key(
            name: "signing.disabled", defaultValue: "false",
            meaning: "accept unsigned `GET /v1/...` URLs: development only"),
        Key(
            name: "cors.allowedOrigins", defaultValue: "[]",
            meaning: "origins whose pages may call `POST /transcode` (`*`: any)"),
        Key(
            name: "auth.tokens", defaultValue: "[]",
            meaning:
                "bearer tokens accepted on `POST /transcode`, `POST /v1/batches` (and its status and results), `POST /v1/rewrite` and the purge routes (several, for rotation); empty: those routes are open; placeholders, tokens under 16 characters, empty tokens and tokens with whitespace are refused"
        ),
        Key(
            name: "auth.clients", defaultValue: "[]",
            meaning:
                "the client each of `auth.tokens` belongs to, paired by position (`token-1`, `token-2`, ... where not named); tokens that share a name are one client (a rotated token keeps its quota)"
        ),
        Key(
            name: "quota.limits", defaultValue: "[]",
            meaning:
                "token buckets per client, `<client>=<requests per second>/<burst>` (`cms=5/20`): each request that spends work (a URL that misses the cache at interactive priority, an upload) takes a token first; none left: 429 `quota-exceeded` with `Retry-After`, `RateLimit` and `RateLimit-Policy`. `open=<rate>/<burst>` gives each address of an open route its own bucket. In a fleet (`queue.kind: postgres`) a configured client's bucket is the fleet's, kept in the job database; addresses keep one per node. A client without an entry has no quota; a name that is no client is refused"
        ),
        Key(
            name: "tracing.enabled", defaultValue: "false",
            meaning:
                "export OpenTelemetry spans over OTLP/HTTP (protobuf): each request's server span (continuing a W3C `traceparent`), the queue wait, download, conversion steps, storage and webhook deliveries ([Tracing](operations.md#tracing)); off, no span is made"
        ),
        Key(
            name: "tracing.endpoint", defaultValue: "http://127.0.0.1:4318/v1/traces",
            meaning: "the collector's OTLP/HTTP traces URL (`OTEL_EXPORTER_OTLP_*` variables are read too)"),
        Key(
            name: "tracing.sampleRatio", defaultValue: "1",
            meaning: "share of new traces kept, 0 to 1; a request continuing a sampled `traceparent` is kept"),
        Key(
            name: "tracing.propagate", defaultValue: "false",
            meaning:
                "send `traceparent` to origins, S3 and webhook receivers, and keep it with fleet batch items queued in PostgreSQL (off: the trace stops at this service)"
        ),
        Key(
            name: "tracing.batchDelaySeconds", defaultValue: "5",
            meaning: "how long finished spans wait to be sent together, 0.01 to 60"),
        Key(name: "log.level", defaultValue: "info", meaning: "trace … critical"),
        Key(
            name: "log.format", defaultValue: "text",
            meaning:
                "`json`: one JSON object per line (`time`, `level`, `label`, `message` and the metadata, e.g. `request.id`, `http.status`)"
        ),
        Key(
            name: "shutdown.graceSeconds", defaultValue: "30",
            meaning: "how long in-flight work may take after SIGTERM (counted once the drain is over)"),
        Key(
            name: "shutdown.drainSeconds", defaultValue: "5",
            meaning:
                "after SIGTERM, how long `/readyz` answers 503 `shutting-down` while every route keeps serving and new connections are accepted, so a balancer stops sending before the listener closes; 0: close at once; at most 3600. Kubernetes: at least the readiness probe's period times its failure threshold, and `terminationGracePeriodSeconds` above this plus `shutdown.graceSeconds`"
        ),
        Key(
            name: "webhooks.secrets", defaultValue: "[]",
            meaning:
                "Standard Webhooks signing secrets (`whsec_` + base64, 16 bytes or more); each signs every delivery; empty: `callbackURL` is refused (501); needs `auth.tokens` (startup refuses secrets without a token)"
        ),
        Key(
            name: "webhooks.firstRetrySeconds", defaultValue: "1",
            meaning: "first retry of a failed delivery, then doubling (at most 5 minutes apart)"),
        Key(
            name: "webhooks.maxRetrySeconds", defaultValue: "3600",
            meaning: "a delivery is retried until this long after its first attempt"),
        Key(
            name: "webhooks.maxConcurrentDeliveries", defaultValue: "64",
            meaning: "delivery attempts under way at once (each holds a socket); the others wait their turn"),
        Key(name: "batch.maxUrls", defaultValue: "10000", meaning: "most URLs in one `POST /v1/batches`"),
        Key(
            name: "batch.retentionSeconds", defaultValue: "604800",
            meaning:
                "a complete batch (status and results) is deleted this long after it was created; `DELETE /v1/batches/{id}` deletes one sooner"
        ),
        Key(
            name: "rewrite.maxBodyBytes", defaultValue: "5000000",
            meaning: "largest document `POST /v1/rewrite` takes (413 beyond)"),
        Key(
            name: "rewrite.maxGifs", defaultValue: "500",
            meaning: "most GIFs in one document (422 `too-many-gifs` beyond, before any work)"),
        Key(
            name: "rewrite.maxParses", defaultValue: "0",
            meaning:
                "most documents taken for parsing at once, running, waiting or past their deadline (503 `overloaded` beyond); 0: 8 per parser thread (half the cores), at least 16"
        ),
        Key(
            name: "rewrite.parseTimeoutSeconds", defaultValue: "5",
            meaning:
                "longest a rewrite waits for its parse, from its arrival (422 `too-complex` when the parse began, which is stopped then; 503 `overloaded` when no parser thread took it in time)"
        ),
        Key(
            name: "storage.kind", defaultValue: "disk",
            meaning:
                "`disk`: results on this node's disk only; `s3`: shared through an S3-compatible bucket, the disk a read-through cache in front ([Running a fleet](fleet.md))"
        ),
        Key(
            name: "storage.s3.endpoint", defaultValue: "\"\"",
            meaning:
                "`http(s)://host[:port]` of the store (`https://s3.eu-west-1.amazonaws.com`, `http://127.0.0.1:8333`)"),
        Key(name: "storage.s3.bucket", defaultValue: "\"\"", meaning: "the bucket"),
        Key(name: "storage.s3.region", defaultValue: "us-east-1", meaning: "the region signed into each request"),
        Key(
            name: "storage.s3.pathStyle", defaultValue: "true",
            meaning: "`endpoint/bucket/key` (most self-hosted stores); `false`: `bucket.endpoint/key`"),
        Key(name: "storage.s3.timeoutSeconds", defaultValue: "10", meaning: "each request to the store"),
        Key(
            name: "storage.s3.serve", defaultValue: "local",
            meaning:
                "an object this node's disk lacks: pulled onto it and served (`local`), or a 302 to a presigned URL (`redirect`)"
        ),
        Key(
            name: "storage.s3.presignSeconds", defaultValue: "3600",
            meaning: "lifetime of presigned URLs (clients may keep the redirect half as long)"),
        Key(
            name: "storage.s3.createBucket", defaultValue: "false", meaning: "create the bucket at startup when missing"
        ),
        Key(
            name: "storage.s3.tombstoneCheckSeconds", defaultValue: "10",
            meaning:
                "a cache hit trusts the store's \"not taken down\" this long (a takedown on another node is obeyed within it; misses always ask)"
        ),
        Key(
            name: "queue.kind", defaultValue: "local",
            meaning:
                "`local`: batches on this node's disk, run by its workers; `postgres`: batches in a PostgreSQL database the fleet shares, run by every node's idle workers, answered by any node ([Running a fleet](fleet.md))"
        ),
        Key(
            name: "queue.url", defaultValue: "\"\"",
            meaning: "`postgres://user@host:port/database`; the password from `PGPASSWORD` only"),
        Key(
            name: "queue.leaseSeconds", defaultValue: "30",
            meaning:
                "a claimed job is its worker's this long unless renewed (every third of it); an expired lease is claimed again"
        ),
        Key(
            name: "queue.maxAttempts", defaultValue: "5",
            meaning:
                "claims of one job that may end without a report (its worker died or stalled) before it is kept as a dead letter with its last error; passing failures (the store down, shutting down) do not count"
        ),
        Key(
            name: "queue.timeoutSeconds", defaultValue: "5",
            meaning:
                "a batch route waits this long for the database, then answers 503 `queue-unavailable`; every other call to the database (claims, lease renewals, recording a job's end) is cut off after it too, and tried again"
        ),
    ]
}
