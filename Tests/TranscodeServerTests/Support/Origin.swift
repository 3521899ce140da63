import Foundation
import Hummingbird
import NIOCore
import Synchronization
import Testing

/// The corpus, next to the repository: `../shared/corpus`.
let corpusDirectory: String = {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("shared/corpus").path
}()

/// Fails the calling test with a message that says what is missing when the corpus is not there (a clone
/// without `../shared/corpus`).
func requireCorpus(sourceLocation: SourceLocation = #_sourceLocation) throws {
    try #require(
        FileManager.default.fileExists(atPath: corpusDirectory + "/MANIFEST.tsv"),
        "the test corpus is missing: \(corpusDirectory)/MANIFEST.tsv (the suite needs ../shared/corpus beside the repository)",
        sourceLocation: sourceLocation)
}

func corpusBytes(_ name: String) throws -> [UInt8] {
    [UInt8](try Data(contentsOf: URL(fileURLWithPath: corpusDirectory + "/" + name)))
}

/// A local origin on 127.0.0.1, port 0, that serves corpus files and misbehaves on request. It counts
/// every request by path, so tests can prove how many downloads happened.
final class Origin: Sendable {
    private let hits = Mutex<[String: Int]>([:])
    /// `/versioned/{name}`: which corpus file each name serves now, and the conditional headers received.
    private let versions = Mutex<[String: String]>([:])
    private let conditions = Mutex<[(ifNoneMatch: String?, ifModifiedSince: String?)]>([])

    func count(_ path: String) -> Int { self.hits.withLock { $0[path, default: 0] } }
    var total: Int { self.hits.withLock { $0.values.reduce(0, +) } }

    /// Makes `/versioned/{name}` serve the corpus file `file` (with an ETag of its own).
    func setVersion(_ name: String, _ file: String) { self.versions.withLock { $0[name] = file } }
    /// `If-None-Match` and `If-Modified-Since` of every request to `/versioned/...`, in order.
    var conditionalHeaders: [(ifNoneMatch: String?, ifModifiedSince: String?)] { self.conditions.withLock { $0 } }

    func router() -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: CountingMiddleware(origin: self))
        // The file as is.
        router.get("corpus/{name}") { _, context in
            try Self.file(try context.parameters.require("name"))
        }
        // The same bytes at another URL.
        router.get("copy/{name}") { _, context in
            try Self.file(try context.parameters.require("name"))
        }
        // The file after a pause, so concurrent requests overlap.
        router.get("delayed/{ms}/{name}") { _, context in
            let milliseconds = try context.parameters.require("ms", as: Int.self)
            try await Task.sleep(for: .milliseconds(milliseconds))
            return try Self.file(try context.parameters.require("name"))
        }
        // One byte every 200 ms for 20 s: never finishes inside a short download deadline.
        router.get("drip") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "image/gif"],
                body: ResponseBody { writer in
                    for _ in 0..<100 {
                        try await writer.write(ByteBuffer(bytes: [0x47]))
                        try await Task.sleep(for: .milliseconds(200))
                    }
                    try await writer.finish(nil)
                })
        }
        // A body larger than any limit the tests set, without Content-Length (chunked).
        router.get("endless") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "image/gif"],
                body: ResponseBody { writer in
                    let chunk = ByteBuffer(bytes: [UInt8](repeating: 0x47, count: 64 * 1024))
                    for _ in 0..<64 { try await writer.write(chunk) }
                    try await writer.finish(nil)
                })
        }
        // The corpus file set with `setVersion`, with validators; 304 when the client's validator matches.
        router.get("versioned/{name}") { request, context in
            let name = try context.parameters.require("name")
            guard let file = self.versions.withLock({ $0[name] }) else { return Response(status: .notFound) }
            // "status:500": the origin fails.
            if file.hasPrefix("status:"), let code = Int(file.dropFirst(7)) {
                return Response(status: .init(code: code))
            }
            let etag = "\"v-\(file)\""
            let lastModified = "Sun, 22 Nov 2026 10:00:00 GMT"
            self.conditions.withLock {
                $0.append((request.headers[.ifNoneMatch], request.headers[.ifModifiedSince]))
            }
            if request.headers[.ifNoneMatch] == etag {
                return Response(status: .notModified, headers: [.eTag: etag, .lastModified: lastModified])
            }
            var response = try Self.file(file)
            response.headers[.eTag] = etag
            response.headers[.lastModified] = lastModified
            return response
        }
        router.get("status/{code}") { _, context in
            let code = try context.parameters.require("code", as: Int.self)
            return Response(status: .init(code: code))
        }
        // Redirect to the URL in `?to=`.
        router.get("redirect") { request, _ in
            let target = request.uri.queryParameters.get("to") ?? "/"
            return Response(status: .found, headers: [.location: target])
        }
        // A chain of n redirects ending at a corpus file.
        router.get("chain/{n}/{name}") { _, context in
            let n = try context.parameters.require("n", as: Int.self)
            let name = try context.parameters.require("name")
            let next = n <= 1 ? "/corpus/\(name)" : "/chain/\(n - 1)/\(name)"
            return Response(status: .movedPermanently, headers: [.location: next])
        }
        router.get("html") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/html"],
                body: .init(byteBuffer: ByteBuffer(string: "<html><body>not a gif</body></html>")))
        }
        return router
    }

    private static func file(_ name: String) throws -> Response {
        guard !name.contains("/"), let data = FileManager.default.contents(atPath: corpusDirectory + "/" + name) else {
            return Response(status: .notFound)
        }
        return Response(
            status: .ok, headers: [.contentType: "image/gif"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    private struct CountingMiddleware: RouterMiddleware {
        let origin: Origin
        func handle(
            _ request: Request, context: BasicRequestContext,
            next: (Request, BasicRequestContext) async throws -> Response
        ) async throws -> Response {
            self.origin.hits.withLock { $0[request.uri.path, default: 0] += 1 }
            return try await next(request, context)
        }
    }
}
