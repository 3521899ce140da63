import HTTPTypes
import Hummingbird
import Synchronization
import TranscodeCore

/// The router's routes (path and method), for the one question the router does not answer: which methods a path
/// takes. A request whose path exists but not with its method gets 405 with `Allow` (RFC 9110 §15.5.6), not
/// 404. Filled once the routes are added (`buildRouter`).
package final class RouteTable: Sendable {
    private let routes = Mutex<[(path: RouterPath, method: HTTPRequest.Method)]>([])

    package init() {}

    /// Takes the router's routes.
    package func fill(from router: Router<some RequestContext>) {
        let routes = router.routes.map { (path: $0.path, method: $0.method) }
        self.routes.withLock { $0 = routes }
    }

    /// The methods routes take at `path` (a request's path, without its query), in a stable order; empty when
    /// no route has this path.
    func methods(at path: String) -> [HTTPRequest.Method] {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        let found = self.routes.withLock { routes in
            routes.filter { Self.matches($0.path, segments) }.map(\.method)
        }
        return Set(found.map(\.rawValue)).sorted().compactMap { HTTPRequest.Method($0) }
    }

    /// Whether `route` matches the path's `segments`, as the router's trie would.
    static func matches(_ route: RouterPath, _ segments: [Substring]) -> Bool {
        var index = 0
        for element in route.components {
            if element == .recursiveWildcard { return index < segments.count }
            guard index < segments.count, element ~= segments[index] else { return false }
            index += 1
        }
        return index == segments.count
    }
}
