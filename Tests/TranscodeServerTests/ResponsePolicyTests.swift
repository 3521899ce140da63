import HTTPTypes
import Hummingbird
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// `ResponsePolicy` is the one statement of the hit routes' templates and of the CORS rule: the router registers
/// the templates it names, and each hit route's CORS policy is what the rule gives its paths.
@Suite(.tags(.integration), .timeLimit(.minutes(2))) struct ResponsePolicyTests {
    static let hitRoutes = [ResponsePolicy.media, ResponsePolicy.signed, ResponsePolicy.transcode]

    @Test func theCORSRule() {
        let cases: [(String, HTTPRequest.Method, ResponsePolicy.CORS)] = [
            ("/media/abc.mp4", .get, .publicRead), ("/media/abc.mp4", .head, .publicRead),
            ("/v1/sig/rs:fit:320/aHR0cA.mp4", .get, .publicRead), ("/v1/objects/abc", .delete, .none),
            ("/v1/objects/abc", .get, .none), ("/v1/sources", .delete, .none), ("/v1/rewrite", .delete, .none),
            ("/transcode", .post, .api), ("/jobs/abc", .get, .api), ("/healthz", .get, .none), ("/", .get, .none),
        ]
        for (path, method, expected) in cases {
            #expect(ResponsePolicy.cors(path: path, method: method) == expected, "\(method) \(path)")
        }
        #expect(Self.hitRoutes.map(\.prefix) == ["/media/", "/v1/", "/transcode"])
        for route in Self.hitRoutes {
            let method: HTTPRequest.Method = route.cors == .api ? .post : .get
            #expect(ResponsePolicy.cors(path: route.template, method: method) == route.cors, "\(route.template)")
        }
    }

    /// The router's routes include each hit route's template, with the methods the hit handlers answer.
    @Test func theRouterRegistersTheHitRoutes() async throws {
        try await withTemporaryDirectory { directory in
            var configuration = ServerConfiguration()
            configuration.cache.directory = directory
            let (_, services) = try buildApplication(configuration: configuration)
            let routes = Set(buildRouter(services: services).routes.map { "\($0.method) \($0.path)" })
            for expected in [
                "GET \(ResponsePolicy.media.template)", "HEAD \(ResponsePolicy.media.template)",
                "GET \(ResponsePolicy.signed.template)", "HEAD \(ResponsePolicy.signed.template)",
                "POST \(ResponsePolicy.transcode.template)",
            ] {
                #expect(routes.contains(expected), "\(expected) not in \(routes.sorted())")
            }
        }
    }
}
