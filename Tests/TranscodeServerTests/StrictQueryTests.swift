import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// A parameter given twice, or a list with an empty entry, is refused (400 `bad-request`) before any work, on every
/// route that takes a query: the first value is not read as the request while a proxy reads the last.
@Suite(.tags(.integration), .timeLimit(.minutes(2))) struct StrictQueryTests {
    @Test(arguments: [
        ("POST /transcode, formats twice", "/transcode?formats=webp&formats=avif", "image/gif"),
        ("POST /transcode, background twice", "/transcode?background=000000&background=ffffff", "image/gif"),
        ("POST /transcode, an empty format", "/transcode?formats=webp,,avif", "image/gif"),
        ("POST /transcode, a trailing comma", "/transcode?formats=webp,", "image/gif"),
        ("POST /v1/rewrite, mode twice", "/v1/rewrite?mode=lazy&mode=eager", "text/html"),
    ])
    func repeatedOrEmptyIsRefused(name: String, path: String, contentType: String) async throws {
        try await withHarness(configure: RewriteTests.configure) { harness in
            let body = contentType == "text/html" ? Array("<img src=x.gif>".utf8) : try corpusBytes("loop_1.gif")
            let reply = try await harness.request(
                .POST, path, headers: [("Content-Type", contentType)], body: body)
            #expect(reply.status == 400, "\(name): \(reply.text)")
            #expect(reply.errorCode == "bad-request", "\(name)")
            #expect(harness.services.transcodes.counters.transcodes == 0, "\(name)")
        }
    }

    /// Purges and batch pages the same way.
    @Test func purgesAndBatchPagesAreStrictToo() async throws {
        try await withHarness { harness in
            let purge = try await harness.request(
                .DELETE, "/v1/sources?url=http://a.example/x.gif&url=http://b.example/y.gif")
            #expect(purge.status == 400, "\(purge.text)")
            #expect(purge.text.contains("more than once"), "\(purge.text)")
            let page = try await harness.request(
                .GET, "/v1/batches/0123456789abcdef0123456789abcdef/results?offset=0&offset=5")
            #expect(page.status == 400, "\(page.text)")
        }
    }
}
