import HTTPTypes
import Hummingbird
import TranscodeCore

/// Which routes browsers on other origins may call (`ResponsePolicy.cors`, the rule the hit handlers ahead of the
/// router follow too), applied with Hummingbird's `CORSMiddleware`:
///
/// - `/media/...` and `GET /v1/...` are public (content-addressed or signed): `Access-Control-Allow-Origin: *`,
///   with the headers a video player reads (`Content-Range`, `Accept-Ranges`, ...) exposed.
/// - `POST /transcode` and `GET /jobs/{id}`: only origins in `cors.allowedOrigins` (`*` for any), echoed
///   with `Vary: Origin`; preflights from other origins get no CORS headers, so the browser refuses.
///
/// Added outside the error middleware, so error answers carry the headers too (a page can read why).
package struct CORSPolicyMiddleware<Context: RequestContext>: RouterMiddleware {
    let allowedOrigins: [String]
    private let publicPolicy: CORSMiddleware<Context>
    private let apiPolicy: CORSMiddleware<Context>

    package init(allowedOrigins: [String]) {
        self.allowedOrigins = allowedOrigins
        self.publicPolicy = CORSMiddleware(
            allowOrigin: .all, allowHeaders: [.range, .ifNoneMatch, .ifRange, .ifModifiedSince],
            allowMethods: [.get, .head, .options], exposedHeaders: CORSHeaders.publicExposed,
            maxAge: .seconds(86400))
        self.apiPolicy = CORSMiddleware(
            allowOrigin: .originBased, allowHeaders: [.authorization, .contentType],
            allowMethods: [.post, .get, .options], exposedHeaders: CORSHeaders.apiExposed, maxAge: .seconds(600))
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws
        -> Response
    {
        let path = request.uri.path
        let policy: CORSMiddleware<Context>
        let exposed: String
        switch ResponsePolicy.cors(path: path, method: request.method) {
        case .publicRead:
            (policy, exposed) = (self.publicPolicy, CORSHeaders.publicExposedValue)
        case .api:
            guard let origin = request.headers[.origin],
                self.allowedOrigins.contains("*") || self.allowedOrigins.contains(origin)
            else { return try await next(request, context) }
            (policy, exposed) = (self.apiPolicy, CORSHeaders.apiExposedValue)
        case .none:
            return try await next(request, context)
        }
        var response = try await policy.handle(request, context: context, next: next)
        // CORSMiddleware lists exposed headers on preflights only; a page reads them on the answer itself
        // (`fetch(...).headers.get("Content-Range")`).
        if request.method != .options, request.headers.contains(.origin) {
            response.headers[.accessControlExposeHeaders] = exposed
        }
        return response
    }
}

/// The headers pages on other origins may read, listed once and joined once (the middleware is generic and
/// cannot hold them).
enum CORSHeaders {
    /// On the public routes (`/media`, signed `GET /v1/...`).
    static let publicExposed = [
        "Content-Length", "Content-Range", "Accept-Ranges", "ETag", "X-Error-Code", "Retry-After", "X-Request-Id",
    ]
    /// On `POST /transcode` and `GET /jobs/{id}`.
    static let apiExposed = publicExposed + ["Location", "X-Cache"]
    static let publicExposedValue = publicExposed.joined(separator: ", ")
    static let apiExposedValue = apiExposed.joined(separator: ", ")

    /// The public policy on an answer to a request that came from another origin, for answers given below
    /// the router (`MediaHitHandler`).
    static func addPublic(to headers: inout some HeaderFieldSink) {
        headers.add(.accessControlAllowOrigin, "*")
        headers.add(.accessControlExposeHeaders, Self.publicExposedValue)
    }
}
