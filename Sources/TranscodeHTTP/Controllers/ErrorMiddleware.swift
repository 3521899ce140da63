import Foundation
import HTTPTypes
import Hummingbird
import TranscodeCore

/// Every failure leaves as `{"error": {"code": ..., "message": ...}}` with the status `ServiceError` maps
/// it to; 429 and 503 carry `Retry-After`. Errors Hummingbird raises itself (an unknown route, a body
/// over the size limit) get codes of their own.
package struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServiceMetrics

    /// The routes, to answer a known path asked with another method 405 with `Allow` rather than 404.
    var routes = RouteTable()

    package init(metrics: ServiceMetrics, routes: RouteTable = RouteTable()) {
        self.metrics = metrics
        self.routes = routes
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch {
            var failure = Self.serviceError(error)
            if let error = error as? HTTPError, error.status == .notFound {
                let allowed = self.routes.methods(at: request.uri.path)
                if !allowed.isEmpty, !allowed.contains(request.method) {
                    failure = ServiceError.methodNotAllowed(request.method, allowed: allowed)
                }
            }
            self.metrics.error(code: failure.code.rawValue)
            if failure.status == .internalServerError {
                context.logger.error(
                    "request failed", metadata: ["error.code": "\(failure.code)", "error": "\(error)"])
            }
            return failure.response()
        }
    }

    static func serviceError(_ error: any Error) -> ServiceError {
        if let error = error as? HTTPError {
            switch error.status {
            case .notFound: return .notFound(error.body ?? "no such resource")
            case .contentTooLarge: return .tooLarge(error.body ?? "the request body is too large")
            case .methodNotAllowed: return ServiceError(.methodNotAllowed, "method not allowed")
            default:
                return .framework(error.status, error.body ?? error.status.reasonPhrase)
            }
        }
        return ServiceError.from(error)
    }
}

extension ServiceError {
    private struct Body: Encodable {
        struct Detail: Encodable {
            let code: String
            let message: String
        }
        let error: Detail
    }

    /// Carries the error code on every error answer: HEAD answers have no body, and the access log reads it.
    static var errorCodeField: HTTPField.Name { HTTPField.Name("X-Error-Code")! }

    /// The JSON error response.
    func response() -> Response {
        // Never cached: a 504 or a 429 cached for a year by a CDN is an outage (imgproxy #1677).
        var headers: HTTPFields = [
            .contentType: "application/json; charset=utf-8", Self.errorCodeField: self.code.rawValue,
            .cacheControl: "no-store",
        ]
        if let retryAfter = self.retryAfterSeconds {
            headers[.retryAfter] = String(retryAfter)
        }
        // RFC 9110 §11.6.1: a 401 names the scheme it wants.
        if self.code == .unauthorized { headers[.wwwAuthenticate] = #"Bearer realm="transcode-server""# }
        if let allowed = self.allowedMethods { headers[.allow] = allowed.map(\.rawValue).joined(separator: ", ") }
        return Response(
            status: self.status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: self.jsonBody)))
    }

    /// `{"error": {"code": ..., "message": ...}}`.
    var jsonBody: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = (try? encoder.encode(Body(error: .init(code: self.code.rawValue, message: self.message)))) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// The JSON error response as bytes, closing the connection: for answers written before NIO's HTTP codec,
    /// to requests it never sees (a connection over the limit, a head too long).
    var closingAnswer: ByteBuffer {
        let body = self.jsonBody
        var head = ResponseHeadBytes(self.status, into: ByteBuffer())
        head.add(.contentType, "application/json; charset=utf-8")
        head.add(.cacheControl, "no-store")
        if let retryAfter = self.retryAfterSeconds { head.add(.retryAfter, String(retryAfter)) }
        head.add(Self.errorCodeField, self.code.rawValue)
        head.add(.connection, "close")
        head.add(.contentLength, String(body.utf8.count))
        var bytes = head.end()
        bytes.writeString(body)
        return bytes
    }
}
