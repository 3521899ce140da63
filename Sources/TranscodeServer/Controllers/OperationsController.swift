import Hummingbird

/// `GET /healthz` (the process answers), `GET /readyz` (the cache is writable and the service is not
/// shutting down) and `GET /metrics` (Prometheus text format).
struct OperationsController<Context: RequestContext>: Sendable {
    let services: AppServices

    func addRoutes(to router: Router<Context>) {
        router.get("healthz") { _, _ in Self.text("ok\n") }
        router.get("readyz") { _, _ in
            guard self.services.pool.isAccepting else { throw ServiceError.shuttingDown }
            guard self.services.cache.isWritable else {
                throw ServiceError("cache-not-writable", .serviceUnavailable, "the cache directory is not writable")
            }
            return Self.text("ready\n")
        }
        router.get("metrics") { _, _ in
            let text = self.services.transcodes.metrics.render(
                queueDepth: self.services.pool.load, cacheBytes: self.services.cache.usage.bytes)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: text)))
        }
    }

    private static func text(_ body: String) -> Response {
        Response(
            status: .ok, headers: [.contentType: "text/plain; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

/// Counts every answered request by route template (never the raw path: unknown paths count as
/// `unmatched`) and status.
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServiceMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        let response = try await next(request, context)
        self.metrics.request(route: context.endpointPath ?? "unmatched", status: Int(response.status.code))
        return response
    }
}
