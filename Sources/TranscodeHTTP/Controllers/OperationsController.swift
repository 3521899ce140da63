import Foundation
import Hummingbird
import TranscodeCore

/// `GET /healthz` (the process answers), `GET /readyz` (the cache is writable, has `cache.minFreeBytes`
/// free, and the service is not shutting down nor draining, `ShutdownDrain`), `GET /metrics` (Prometheus text format) and `GET /openapi.yaml` (the API description).
package struct OperationsController<Context: RequestContext>: Sendable {
    let cache: DiskCache
    let pool: TranscodePool
    let transcodes: TranscodeService
    let drain: ShutdownDrain
    /// `cache.minFreeBytes`: below it, not ready.
    let minFreeBytes: Int64

    package init(
        cache: DiskCache, pool: TranscodePool, transcodes: TranscodeService, drain: ShutdownDrain, minFreeBytes: Int64
    ) {
        self.cache = cache
        self.pool = pool
        self.transcodes = transcodes
        self.drain = drain
        self.minFreeBytes = minFreeBytes
    }

    package func addRoutes(to router: Router<Context>) {
        router.get("healthz") { _, _ in Self.text("ok\n") }
        router.get("readyz") { _, _ in
            guard self.pool.isAccepting, !self.drain.isDraining else {
                throw ServiceError.shuttingDown
            }
            guard self.cache.isWritable else {
                throw ServiceError.notReady(.cacheNotWritable, "the cache directory is not writable")
            }
            // Checked on every probe, so readiness comes back by itself once space is freed.
            let floor = self.minFreeBytes
            if let free = self.cache.freeBytes, free < floor {
                throw ServiceError.notReady(
                    .insufficientStorage, "\(free) bytes free on the cache's file system; the floor is \(floor)")
            }
            return Self.text("ready\n")
        }
        router.get("openapi.yaml") { _, _ in
            guard let document = openAPIDocument else {
                throw ServiceError.notFound("the OpenAPI document is not installed beside the executable")
            }
            return Response(
                status: .ok, headers: [.contentType: "application/yaml; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: document)))
        }
        router.get("metrics") { request, _ in
            let metrics = self.transcodes.metrics
            let load = self.pool.load
            let bytes = self.cache.usedBytes
            // OpenMetrics for scrapers that ask for it, the classic text format otherwise.
            if request.headers[.accept]?.contains("application/openmetrics-text") == true {
                return Response(
                    status: .ok,
                    headers: [
                        .contentType: "application/openmetrics-text; version=1.0.0; charset=utf-8", .vary: "Accept",
                        .cacheControl: "no-store",
                    ],
                    body: .init(
                        byteBuffer: ByteBuffer(string: metrics.renderOpenMetrics(queueDepth: load, cacheBytes: bytes))))
            }
            return Response(
                status: .ok,
                headers: [
                    .contentType: "text/plain; version=0.0.4; charset=utf-8", .vary: "Accept",
                    .cacheControl: "no-store",
                ],
                body: .init(byteBuffer: ByteBuffer(string: metrics.render(queueDepth: load, cacheBytes: bytes))))
        }
    }

    private static func text(_ body: String) -> Response {
        Response(
            status: .ok, headers: [.contentType: "text/plain; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

/// The OpenAPI document (`ServerResources`).
let openAPIDocument: String? = ServerResources.bytes("openapi.yaml").map { String(decoding: $0, as: UTF8.self) }
