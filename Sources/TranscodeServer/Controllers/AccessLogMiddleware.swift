import HTTPTypes
import Hummingbird
import Logging

/// One `info` line per request, failures included: method, route template (never the raw path, which may
/// carry anything), status, body bytes, milliseconds until the response head, request id, and the error
/// code on failures. The request id is the client's `X-Request-Id` when well-formed (1-128 characters of
/// letters, digits and `-._:`), else Hummingbird's own; it is returned on every answer and is in the
/// metadata of every line logged while handling the request. The same measurement feeds the request metrics
/// (count by route template and status, duration by route template).
struct AccessLogMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServiceMetrics

    static var requestIDField: HTTPField.Name { HTTPField.Name("X-Request-Id")! }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        let id = request.headers[Self.requestIDField].flatMap(Self.wellFormed) ?? context.id
        var context = context
        context.logger[metadataKey: "request.id"] = "\(id)"
        let started = ContinuousClock.now
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            // ErrorMiddleware answers every error inside; this only guards the line and the header.
            response = ErrorMiddleware<Context>.serviceError(error).response()
        }
        response.headers[Self.requestIDField] = id
        let elapsed = ContinuousClock.now - started
        let route = context.endpointPath ?? "unmatched"
        var metadata: Logger.Metadata = [
            "http.method": "\(request.method)",
            "http.route": "\(route)",
            "http.status": "\(response.status.code)",
            "http.bytes": "\(response.body.contentLength.map(String.init) ?? "-")",
            "http.ms": "\(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)",
        ]
        if let code = response.headers[ServiceError.errorCodeField] {
            metadata["error.code"] = "\(code)"
        }
        self.metrics.request(
            route: route, status: Int(response.status.code), duration: elapsed)
        context.logger.info("request", metadata: metadata)
        return response
    }

    static func wellFormed(_ id: String) -> String? {
        guard (1...128).contains(id.utf8.count),
            id.utf8.allSatisfy({ $0.isASCIILetterOrDigit || [0x2D, 0x2E, 0x5F, 0x3A].contains($0) })
        else { return nil }
        return id
    }
}

extension UInt8 {
    fileprivate var isASCIILetterOrDigit: Bool {
        (0x30...0x39).contains(self) || (0x41...0x5A).contains(self) || (0x61...0x7A).contains(self)
    }
}
