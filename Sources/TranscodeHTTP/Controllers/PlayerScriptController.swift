import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import TranscodeCore

/// `GET /player.js`: the small script the `html` snippet of a finite-loop GIF references, so that the video
/// plays exactly `playCount` times and stops on its last frame, as the GIF does in a browser. The script is a
/// resource file (`Resources/player.js`), so that a linter reads it; an installation without it answers 404
/// `not-found` here, as for the demo's sample.
package struct PlayerScriptController<Context: RequestContext>: Sendable {

    package init() {}
    package func addRoutes(to router: Router<Context>) {
        router.get("player.js", use: self.script)
    }

    @Sendable func script(_ request: Request, context: Context) async throws -> Response {
        guard PlayerScript.source != nil else {
            throw ServiceError.notFound("player.js is not installed beside the executable")
        }
        if let tags = request.headers[.ifNoneMatch], EntityTag.matches(tags, PlayerScript.etag) {
            return Response(status: .notModified, headers: PlayerScript.headers)
        }
        return Response(status: .ok, headers: PlayerScript.headers, body: .init(byteBuffer: PlayerScript.body))
    }
}

/// The script and its headers, built once.
enum PlayerScript {
    /// The path the snippets reference.
    static let path = "/player.js"

    static let etag: String = {
        let digest = SHA256.hash(data: Data((Self.source ?? "").utf8))
        return "\"" + digest.prefix(16).map { String(format: "%02x", $0) }.joined() + "\""
    }()

    /// A day of caching: the URL is stable across releases, so it is not `immutable`; the ETag revalidates.
    /// Any page may load it (`*`), since every page embedding a snippet does.
    static let headers: HTTPFields = [
        .contentType: "text/javascript; charset=utf-8",
        .cacheControl: "public, max-age=86400",
        .eTag: Self.etag,
        .xContentTypeOptions: "nosniff",
        .accessControlAllowOrigin: "*",
    ]

    static let body = ByteBuffer(string: Self.source ?? "")

    /// The script: `Resources/player.js`, shipped with the executable (`ServerResources`) and checked by `make lint`
    /// (`node --check`); nil when it is not installed.
    static let source: String? = ServerResources.bytes("player.js").map { String(decoding: $0, as: UTF8.self) }
}
