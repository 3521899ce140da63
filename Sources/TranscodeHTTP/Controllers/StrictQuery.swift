import Hummingbird
import TranscodeCore

/// The one rule for a route's query: only the parameters it takes, each at most once. A parameter given twice is
/// refused (400) rather than read as its first value: a proxy or a firewall that reads the last one would see
/// another request than the service (`?formats=webp&formats=avif`).
enum StrictQuery {
    /// - Throws: `bad-request` naming the first parameter `request` gives that is not in `allowed`, or the first given
    ///   more than once.
    static func check(_ request: Request, allowed: [String], route: String) throws {
        var seen: Set<String> = []
        for (name, _) in request.uri.queryParameters {
            let name = String(name)
            guard allowed.contains(name) else {
                throw ServiceError.badRequest(
                    "unknown query parameter \"\(name)\"; \(route) takes only \(allowed.joined(separator: ", "))")
            }
            guard seen.insert(name).inserted else {
                throw ServiceError.badRequest("query parameter \"\(name)\" is given more than once; give it once")
            }
        }
    }
}
