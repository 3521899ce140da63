import Foundation
import Hummingbird

/// `DELETE /v1/objects/{key}` and `DELETE /v1/sources?url=...` (bearer token): purge and takedown.
///
/// A purge deletes the files; the next request converts again. With `takedown=true` it also leaves
/// tombstones (the object key, the GIF's SHA-256, and for a URL its source hash), so the same bytes or URL
/// are never converted or served again: those requests answer 451 (`taken-down`). A response already
/// streaming a purged file finishes (it reads from an open descriptor).
struct PurgeController<Context: RequestContext>: Sendable {
    let cache: DiskCache

    func addRoutes(to router: Router<Context>, authenticator: BearerAuthenticator<Context>) {
        let group = router.group("v1").add(middleware: authenticator)
        group.delete("objects/{key}", use: self.purgeObject)
        group.delete("sources", use: self.purgeSource)
    }

    @Sendable func purgeObject(_ request: Request, context: Context) async throws -> Response {
        let key = try context.parameters.require("key")
        guard DiskCache.isValidKey(key) else {
            throw ServiceError.badRequest("an object key is 64 lowercase hex digits")
        }
        let reason = try Self.takedownReason(request, allowed: [])
        return try TranscodeController<Context>.json(try self.cache.purge(key: key, takedown: reason))
    }

    @Sendable func purgeSource(_ request: Request, context: Context) async throws -> Response {
        let reason = try Self.takedownReason(request, allowed: ["url"])
        guard let text = request.uri.queryParameters.get("url") else {
            throw ServiceError.badRequest("give the source URL: DELETE /v1/sources?url=...")
        }
        let normalized = DiskCache.normalize(try Downloader.validate(text))
        return try TranscodeController<Context>.json(try self.cache.purge(normalizedURL: normalized, takedown: reason))
    }

    /// With `takedown=true`, the takedown's reason (`reason=...`, may be empty); nil for a plain purge. Any
    /// query parameter but these and `allowed` is refused.
    private static func takedownReason(_ request: Request, allowed: [String]) throws -> String? {
        for (name, _) in request.uri.queryParameters where !(["takedown", "reason"] + allowed).contains(String(name)) {
            throw ServiceError.badRequest("unknown query parameter \"\(name)\"")
        }
        switch request.uri.queryParameters.get("takedown") {
        case nil, "false": return nil
        case "true": return request.uri.queryParameters.get("reason") ?? ""
        case let other?: throw ServiceError.badRequest("takedown must be true or false, got \(other)")
        }
    }
}
