import Foundation
import Hummingbird
import TranscodeCore

/// `DELETE /v1/objects/{key}` and `DELETE /v1/sources?url=...` (bearer token): purge and takedown.
///
/// A purge deletes the files; the next request converts again. With `takedown=true` it also leaves
/// tombstones (the object key, the GIF's SHA-256, and for a URL its source hash), so the same bytes or URL
/// are never converted or served again: those requests answer 451 (`taken-down`). A response already
/// streaming a purged file finishes (it reads from an open descriptor).
package struct PurgeController<Context: RequestContext>: Sendable {
    /// Its results: purges reach the shared store too, in a fleet.
    let service: TranscodeService

    package init(service: TranscodeService) {
        self.service = service
    }

    package func addRoutes(to router: Router<Context>, authenticator: BearerAuthenticator<Context>) {
        let group = router.group("v1").add(middleware: authenticator)
        group.delete("objects/{key}", use: self.purgeObject)
        group.delete("sources", use: self.purgeSource)
    }

    @Sendable func purgeObject(_ request: Request, context: Context) async throws -> Response {
        guard let key = ObjectKey(try context.parameters.require("key")) else {
            throw ServiceError.badRequest("an object key is 64 lowercase hex digits")
        }
        let reason = try Self.takedownReason(request, allowed: [])
        let report = try await self.service.results.purge(key: key, takedown: reason)
        return try TranscodeController<Context>.json(report)
    }

    @Sendable func purgeSource(_ request: Request, context: Context) async throws -> Response {
        let reason = try Self.takedownReason(request, allowed: ["url"])
        guard let text = request.uri.queryParameters.get("url") else {
            throw ServiceError.badRequest("give the source URL: DELETE /v1/sources?url=...")
        }
        let normalized = NormalizedURL(try Downloader.validate(text))
        let report = try await self.service.results.purge(
            url: normalized, defaultLink: URLKey(normalized, options: self.service.defaultOptions), takedown: reason)
        return try TranscodeController<Context>.json(report)
    }

    /// With `takedown=true`, the takedown's reason (`reason=...`, may be empty); nil for a plain purge. Any
    /// query parameter but these and `allowed` is refused.
    private static func takedownReason(_ request: Request, allowed: [String]) throws -> String? {
        try StrictQuery.check(request, allowed: ["takedown", "reason"] + allowed, route: "DELETE")
        switch request.uri.queryParameters.get("takedown") {
        case nil, "false": return nil
        case "true": return request.uri.queryParameters.get("reason") ?? ""
        case let other?: throw ServiceError.badRequest("takedown must be true or false, got \(other)")
        }
    }
}
