import HTTPTypes
import Hummingbird
import Logging
import TranscodeCore

/// One `info` line per request, failures included: method, route template (never the raw path, which may
/// carry anything), status, body bytes, milliseconds until the response head, request id, and the error
/// code on failures. The request id is the client's `X-Request-Id` when well-formed (1-128 characters of
/// letters, digits and `-._:`), else Hummingbird's own; it is returned on every answer and is in the
/// metadata of every line logged while handling the request. The same measurement feeds the request metrics
/// (count by route template and status, duration by route template).
package struct AccessLogMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServiceMetrics

    package init(metrics: ServiceMetrics) {
        self.metrics = metrics
    }

    static var requestIDField: HTTPField.Name { ResponsePolicy.requestIDField }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws
        -> Response
    {
        let id = request.headers[Self.requestIDField].flatMap(Self.wellFormed) ?? context.id
        var context = context
        context.logger[metadataKey: "request.id"] = "\(id)"
        // One id per line: Hummingbird's own differs from the client's X-Request-Id, which is the one to search by.
        context.logger[metadataKey: "hb.request.id"] = nil
        let started = ContinuousClock.now
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            // ErrorMiddleware answers every error inside; this only guards the line and the header.
            response = ErrorMiddleware<Context>.serviceError(error).response()
        }
        response.headers[Self.requestIDField] = id
        Self.record(
            method: request.method, route: context.endpointPath ?? "unmatched", status: response.status,
            bytes: response.body.contentLength, errorCode: response.headers[ServiceError.errorCodeField],
            elapsed: ContinuousClock.now - started, logger: context.logger, metrics: self.metrics)
        return response
    }

    /// The line and the request metrics of one answer; `MediaHitHandler` records its answers here too.
    static func record(
        method: HTTPRequest.Method, route: String, status: HTTPResponse.Status, bytes: Int?, errorCode: String?,
        elapsed: Duration, logger: Logger, metrics: ServiceMetrics
    ) {
        metrics.request(route: route, status: Int(status.code), duration: elapsed)
        guard logger.logLevel <= .info else { return }
        var metadata: Logger.Metadata = [
            "http.method": "\(method)",
            "http.route": "\(route)",
            // Numbers as numbers (`log.format: json` writes them unquoted).
            "http.status": .stringConvertible(Int(status.code)),
            "http.ms": .stringConvertible(
                elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000),
        ]
        // Unknown for a body streamed without a length: left out rather than written as text.
        if let bytes { metadata["http.bytes"] = .stringConvertible(bytes) }
        if let errorCode { metadata["error.code"] = "\(errorCode)" }
        logger.info("request", metadata: metadata)
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
