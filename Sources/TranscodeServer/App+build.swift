import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import ServiceLifecycle
import Synchronization
import TranscodeCore
import TranscodeHTTP
import Transcoder

/// The services a router needs, built once per application.
struct AppServices: Sendable {
    let cache: DiskCache
    let pool: TranscodePool
    let transcodes: TranscodeService
    let webhooks: WebhookDispatcher
    let batches: any BatchStore
    let configuration: ServerConfiguration
    /// What the routes learn for the hits `MediaHitHandler` answers ahead of them (opaque here: `HitTables`).
    let hitTables = HitTables()
    /// What SIGTERM does first (`serve` runs it beside the application).
    let drain: ShutdownDrain
}

/// Builds the whole application: cache, downloader, transcode pool, router and server. Tests build the
/// real thing with this same function (against a temporary cache directory and port 0).
/// - Throws: when the cache directory cannot be created.
/// - Parameter sharedStore: the store a fleet shares, instead of the S3 bucket `storage.s3` names (tests put a
///   store that fails on purpose here).
func buildApplication(
    configuration: ServerConfiguration, logger: Logger? = nil, sharedStore: (any ResultStore)? = nil,
    jobs replacingJobs: (@Sendable (any TranscodeJobs) -> any TranscodeJobs)? = nil,
    onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
) throws -> (application: some ApplicationProtocol, services: AppServices) {
    var logger = logger ?? Logger(label: "transcode-server")
    logger.logLevel = configuration.log.level
    let metrics = ServiceMetrics()
    let cacheLogger = logger
    let cache = try DiskCache(
        root: configuration.cache.directory, maxBytes: configuration.cache.maxBytes,
        onEviction: { metrics.evicted($0) },
        onQuarantine: { key in
            metrics.quarantined()
            cacheLogger.warning(
                "cache object failed its checks (a link, a hard link, a wrong size, or bytes its manifest does not describe); moved to quarantine/",
                metadata: ["cache.key": "\(key)"])
        })
    // The fleet's job database (`queue.kind: postgres`): batches, webhooks, quotas, and a lock per content key.
    let queueClient = configuration.queue.client.map { PostgresClient(configuration: $0, backgroundLogger: logger) }
    let quotas = ClientQuotas(
        policies: configuration.quota.limits,
        shared: queueClient.map { PostgresQuotaBuckets(client: $0, logger: logger) },
        sharedTimeoutSeconds: configuration.queue.timeoutSeconds, logger: logger)
    let pool = TranscodePool(
        workers: configuration.transcode.workers, queueLength: configuration.transcode.queueLength,
        graceSeconds: configuration.shutdownGraceSeconds,
        upgradeQueueLength: configuration.transcode.upgradeQueueLength,
        memoryBudgetBytes: configuration.transcode.memoryBudgetBytes, lowersCPU: quotas.isPressing)
    let downloader = Downloader(
        configuration: configuration.download, temporaryDirectory: cache.temporaryDirectory,
        eventLoopGroup: MultiThreadedEventLoopGroup.singleton, logger: logger)
    var shared: SharedResults?
    if configuration.storage.kind == .s3, let s3 = configuration.storage.s3 {
        let client = S3Client(configuration: s3)
        let storage = configuration.storage
        let redirect =
            storage.serve == .redirect
            ? SharedResults.Redirect(
                url: { client.presignedURL($0, expiresSeconds: storage.presignSeconds) },
                cacheSeconds: storage.presignSeconds / 2) : nil
        shared = SharedResults(
            store: S3ResultStore(client: client), cache: cache, tombstoneCheckSeconds: storage.tombstoneCheckSeconds,
            redirect: redirect, metrics: metrics)
    }
    if let sharedStore {
        shared = SharedResults(
            store: sharedStore, cache: cache, tombstoneCheckSeconds: configuration.storage.tombstoneCheckSeconds,
            metrics: metrics)
    }
    let webhooks = WebhookDispatcher(
        signer: WebhookSigner(secrets: configuration.webhooks.secrets) ?? WebhookSigner(decoded: []),
        downloader: downloader, metrics: metrics, firstRetrySeconds: configuration.webhooks.firstRetrySeconds,
        maxRetrySeconds: configuration.webhooks.maxRetrySeconds,
        maxConcurrentDeliveries: configuration.webhooks.maxConcurrentDeliveries, logger: logger)
    // In a fleet, how conversion jobs end (leases, results, batch items) is known before the service that runs them:
    // requests' jobs that outlive their wait are recorded there (`FleetJobs`), batch workers' claims too.
    let conversions = queueClient.map { client in
        let queue = PostgresQueue(client: client, logger: logger)
        let schema = JobSchema(queue: queue, logger: logger)
        return ConversionJobs(
            queue: queue, schema: schema,
            outbox: PostgresWebhookOutbox(
                queue: queue, schema: schema, webhooks: webhooks, metrics: metrics,
                configuration: configuration.queue, logger: logger),
            pool: pool, metrics: metrics, configuration: configuration.queue,
            retentionSeconds: configuration.batchRetentionSeconds, logger: logger)
    }
    let transcodes = TranscodeService(
        cache: cache, downloader: downloader, pool: pool, defaultOptions: configuration.transcode.options,
        syncWaitSeconds: configuration.transcode.syncWaitSeconds, urlTTLSeconds: configuration.cache.urlTTLSeconds,
        staleIfErrorSeconds: configuration.cache.staleIfErrorSeconds,
        originFailureTTL: SourceResolver.OriginFailureTTL(
            notFoundSeconds: configuration.download.notFoundTTLSeconds,
            failureSeconds: configuration.download.failureTTLSeconds),
        shared: shared,
        contentLocks: queueClient.map {
            PostgresContentLocks(client: $0, timeoutSeconds: configuration.queue.timeoutSeconds, logger: logger)
        },
        jobs: { local in
            // Requests' jobs that outlive their wait are known fleet-wide.
            let jobs: any TranscodeJobs =
                conversions.map {
                    FleetJobs(local: local, conversions: $0, owner: PostgresBatches.nodeName(), logger: logger)
                } ?? local
            // The router tier's tests answer every job themselves (`RouterTierTests`).
            return replacingJobs?(jobs) ?? jobs
        },
        quotas: quotas, metrics: metrics, logger: logger)
    let links = PublicLinks(configuration: configuration)
    let batches: any BatchStore & Service
    var queueServices: [any Service] = []
    if let client = queueClient, let conversions {
        queueServices.append(client)
        // Webhooks survive restarts: kept in the database once their event is known, delivered by any node.
        webhooks.keep(in: conversions.outbox)
        batches = PostgresBatches(
            conversions: conversions, service: transcodes, links: links, metrics: metrics, logger: logger)
    } else {
        batches = try BatchRunner(
            directory: cache.root + "/batches", service: transcodes, links: links, webhooks: webhooks,
            retentionSeconds: configuration.batchRetentionSeconds, logger: logger)
    }
    let services = AppServices(
        cache: cache, pool: pool, transcodes: transcodes, webhooks: webhooks, batches: batches,
        configuration: configuration, drain: ShutdownDrain(seconds: configuration.shutdownDrainSeconds, logger: logger))
    let router = buildRouter(services: services)
    // The idle timeout is ConnectionTimeoutHandler's, not Hummingbird's (which does not see the requests
    // answered ahead of the HTTP codec).
    let http1 = HTTP1Channel.Configuration(
        additionalChannelHandlers: [
            ConnectionTimeoutHandler(
                headTimeout: .milliseconds(Int64(configuration.http.headerTimeoutSeconds * 1000)),
                idleTimeout: .milliseconds(Int64(configuration.http.idleTimeoutSeconds * 1000))),
            ParseErrorAnswer(),
        ],
        idleTimeout: nil)
    let hits = MediaHitHandler.Source(
        results: transcodes.results, metrics: metrics, logger: logger,
        cacheControl: MediaController<AppRequestContext>.cacheControl(
            maxAgeSeconds: configuration.http.mediaMaxAgeSeconds),
        signedRoute: configuration.http.sourceAnswer != .bytes
            ? nil
            : MediaHitHandler.SignedRoute(
                tables: services.hitTables, service: transcodes,
                cacheControl: SourceController<AppRequestContext>.cacheControl(
                    maxAgeSeconds: configuration.http.sourceMaxAgeSeconds)),
        transcodeRoute: MediaHitHandler.TranscodeRoute(
            tables: services.hitTables, service: transcodes,
            baseURL: links.baseURL,
            tokens: BearerAuthenticator<AppRequestContext>(
                tokens: configuration.authTokens, clients: configuration.authClients)))
    let connections = ConnectionLimit(
        limit: configuration.http.maxConnections > 0
            ? configuration.http.maxConnections
            : ConnectionLimit.automatic(descriptors: ServeCommand.descriptorLimit()))
    let application = Application(
        router: router,
        server: HTTPServerBuilder { responder in
            MediaHitChannel(
                http1: HTTP1Channel(responder: responder, configuration: http1), source: hits, connections: connections,
                answerAhead: configuration.http.answerAhead)
        },
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil),
        // Shut down in reverse: the queue's client outlives the webhooks and batches that use it, and the pool, whose
        // conversions still record their ends while it drains (`FleetJobs`, batch items).
        services: queueServices + [pool] + [webhooks, batches] + (shared.map { [$0] } ?? []),
        onServerRunning: onServerRunning,
        eventLoopGroupProvider: .shared(connectionLoops),
        logger: logger
    )
    return (application, services)
}

/// The event loops that read and write the server's connections: threads of their own, not
/// `MultiThreadedEventLoopGroup.singleton`, whose loops run Swift's tasks in `serve`
/// (`ServeCommand.runTasksOnEventLoops`). A task's slower work in async code (an object published to S3 or pulled
/// from it, a batch's JSON, a rewrite's signatures) then never holds up the connections, the cache hits answered on
/// them first of all, as it did not when tasks ran in libdispatch's pool. Made once and kept, as the singleton is.
let connectionLoops = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)

/// The routes: `GET /` (the demo page), `POST /transcode`, `GET /jobs/{id}`, `GET|HEAD /media/{key}.{ext}`,
/// `GET|HEAD /v1/{signature}/{options}/{source}.{ext}`, `POST /v1/rewrite`, `POST /v1/batches`,
/// `GET /v1/batches/{id}`, `GET /v1/batches/{id}/results`, `DELETE /v1/objects/{key}`,
/// `DELETE /v1/sources`,
/// `GET /player.js`, `GET /healthz`, `GET /readyz`, `GET /metrics`.
func buildRouter(services: AppServices) -> Router<AppRequestContext> {
    let configuration = services.configuration
    let router = Router(context: AppRequestContext.self)
    // The server span of each request (continuing a W3C `traceparent`): only when spans are exported.
    if Traces.isOn { router.add(middleware: TracingMiddleware()) }
    router.add(middleware: AccessLogMiddleware(metrics: services.transcodes.metrics))
    router.add(middleware: CORSPolicyMiddleware(allowedOrigins: configuration.corsAllowedOrigins))
    router.add(middleware: ClientMiddleware(quotas: !configuration.quota.limits.isEmpty))
    let routes = RouteTable()
    router.add(middleware: ErrorMiddleware(metrics: services.transcodes.metrics, routes: routes))
    let authenticator = BearerAuthenticator<AppRequestContext>(
        tokens: configuration.authTokens, clients: configuration.authClients)
    let links = PublicLinks(configuration: configuration)
    let signer = links.signer
    OperationsController<AppRequestContext>(
        cache: services.cache, pool: services.pool, transcodes: services.transcodes, drain: services.drain,
        minFreeBytes: configuration.cache.minFreeBytes
    ).addRoutes(to: router)
    TranscodeController<AppRequestContext>(
        service: services.transcodes, maxBodyBytes: configuration.http.maxBodyBytes,
        bodyTimeout: .milliseconds(Int64(configuration.http.bodyTimeoutSeconds * 1000)),
        temporaryDirectory: services.cache.temporaryDirectory, links: links, webhooks: services.webhooks,
        tables: services.hitTables
    ).addRoutes(to: router, authenticator: authenticator)
    let media = MediaController<AppRequestContext>(
        results: services.transcodes.results, bytesServed: { services.transcodes.metrics.served(bytes: $0) },
        maxAgeSeconds: configuration.http.mediaMaxAgeSeconds)
    media.addRoutes(to: router)
    SourceController<AppRequestContext>(
        service: services.transcodes, signer: signer, media: media, links: links,
        answer: configuration.http.sourceAnswer,
        maxAgeSeconds: configuration.http.sourceMaxAgeSeconds,
        interimMaxAgeSeconds: configuration.http.interimMaxAgeSeconds, tables: services.hitTables
    ).addRoutes(to: router)
    BatchController<AppRequestContext>(
        batches: services.batches, webhooks: services.webhooks, links: links, maxURLs: configuration.batchMaxURLs,
        maxBodyBytes: configuration.http.maxBodyBytes
    ).addRoutes(to: router, authenticator: authenticator)
    RewriteController<AppRequestContext>(
        service: services.transcodes, links: links, maxBodyBytes: configuration.rewrite.maxBodyBytes,
        maxGIFs: configuration.rewrite.maxGIFs, parseTimeoutSeconds: configuration.rewrite.parseTimeoutSeconds,
        parses: HTMLGIFScanner.parseLimit(configuration.rewrite.maxParses)
    ).addRoutes(to: router, authenticator: authenticator)
    PurgeController<AppRequestContext>(service: services.transcodes).addRoutes(
        to: router, authenticator: authenticator)
    DemoPageController<AppRequestContext>().addRoutes(to: router)
    PlayerScriptController<AppRequestContext>().addRoutes(to: router)
    routes.fill(from: router)
    return router
}
