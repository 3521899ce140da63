import HTTPTypes
import TranscodeCore

/// The rules an answer follows whoever writes it: the router (its routes and middlewares) or the hit handlers ahead
/// of it (`MediaHitHandler`, `MediaHitFront`). The templates of the routes a hit is answered for, which CORS policy a
/// request gets, and the fields every answer ends with are stated here once; `HTTP/` holds none of its own.
enum ResponsePolicy {
    /// A route whose hits are also answered ahead of the router.
    struct HitRoute: Sendable {
        /// Its template, as the router's metrics and access log name it (`/media/{file}`).
        let template: String
        /// What every path of the route starts with: the template up to its first parameter or wildcard (`/media/`),
        /// derived once.
        let prefix: String
        /// Its CORS policy: what `cors(path:method:)` gives its paths (`ResponsePolicyTests`), held so that a hit
        /// does not work it out again.
        let cors: CORS

        init(template: String, cors: CORS) {
            self.template = template
            self.prefix = String(template.prefix { $0 != "{" && $0 != "*" })
            self.cors = cors
        }

        /// The template as the router is given it (no leading slash).
        var routerPath: String { String(self.template.dropFirst()) }
    }

    /// `GET|HEAD /media/{key}.{ext}`.
    static let media = HitRoute(template: "/media/{file}", cors: .publicRead)
    /// `GET|HEAD /v1/{signature}/{options}/{source}.{ext}`: its path spans segments.
    static let signed = HitRoute(template: "/v1/**", cors: .publicRead)
    /// `POST /transcode`.
    static let transcode = HitRoute(template: "/transcode", cors: .api)

    /// Which CORS policy a request gets (`CORSPolicyMiddleware` applies it).
    enum CORS: Equatable, Sendable {
        /// `/media/...` and `GET /v1/...` (content-addressed or signed): `Access-Control-Allow-Origin: *`, the
        /// headers a player reads exposed.
        case publicRead
        /// `POST /transcode` and `GET /jobs/{id}`: only the origins `cors.allowedOrigins` lists.
        case api
        /// Anything else (the purge routes, the operations routes): no CORS fields.
        case none
    }

    /// The policy of a request to `path` (no query) with `method`.
    static func cors(path: some StringProtocol, method: HTTPRequest.Method) -> CORS {
        if path.hasPrefix(Self.media.prefix)
            || (path.hasPrefix(Self.signed.prefix) && method != .delete && !isAdmin(path))
        {
            return .publicRead
        }
        if path == Self.transcode.template || path.hasPrefix("/jobs/") { return .api }
        return .none
    }

    /// The purge routes, which no page calls.
    private static func isAdmin(_ path: some StringProtocol) -> Bool {
        path.hasPrefix("/v1/objects/") || path == "/v1/sources"
    }

    /// `X-Request-Id`, made once: every answer carries it, and a hit's answer is written without building it again.
    static let requestIDField = HTTPField.Name("X-Request-Id")!

    /// The fields a hit's answer ends with, in the order the router's answers have them: the request's id
    /// (`AccessLogMiddleware`), the public CORS fields when the request came from another origin
    /// (`CORSPolicyMiddleware`), `Date` (Hummingbird), and `Connection: close` when the request asked for it.
    static func addClosingFields(
        to sink: inout some HeaderFieldSink, id: String, publicCORS: Bool, date: String, closing: Bool
    ) {
        sink.add(Self.requestIDField, id)
        if publicCORS { CORSHeaders.addPublic(to: &sink) }
        sink.add(.date, date)
        if closing { sink.add(.connection, "close") }
    }
}
