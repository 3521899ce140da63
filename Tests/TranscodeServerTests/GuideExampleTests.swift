import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The examples of docs/cms.md are the service's own output: each `curl` of the guide is sent to the real app (the
/// corpus as its origin, `http.publicBaseURL: https://media.example.com`), and its answer compared with the block the
/// guide shows after it, signatures and the base64url of the origin's URLs (which depend on the origin's port) read
/// as placeholders.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct GuideExampleTests {
    /// `text` with every signature and every base64url source of a `/v1/` URL replaced by a placeholder.
    static func normalized(_ text: String) -> String {
        var result = text
        for (pattern, template) in [
            (#"/v1/[A-Za-z0-9_-]{43}/"#, "/v1/SIG/"), (#"/aHR0c[A-Za-z0-9_-]+\."#, "/SOURCE."),
        ] {
            let expression = try! NSRegularExpression(pattern: pattern)
            result = expression.stringByReplacingMatches(
                in: result, range: NSRange(result.startIndex..., in: result), withTemplate: template)
        }
        return result
    }

    /// The document and query of the guide's `curl` that sends `marker` (`--data-binary '...'` and the URL's query),
    /// and the ```html block after it.
    static func example(_ guide: String, marker: String) throws -> (document: String, query: String, html: String) {
        let command = try #require(guide.range(of: marker), "docs/cms.md has no \(marker)")
        let before = guide[..<command.lowerBound]
        let dataStart = try #require(before.range(of: "--data-binary \\\n  '", options: .backwards))
        let document = String(guide[dataStart.upperBound...].prefix { $0 != "'" })
        let queryStart = try #require(guide[command.lowerBound...].range(of: "?"))
        let query = String(guide[queryStart.lowerBound...].prefix { $0 != "\"" })
        let htmlStart = try #require(guide[command.upperBound...].range(of: "```html\n"))
        let html = String(guide[htmlStart.upperBound...].prefix { $0 != "\n" })
        return (document, query, html)
    }

    /// `mode=eager` with `output=video`: the GIF it converted becomes a `<video>` of the object's signed URLs (its
    /// WebM listed first when it has one), the three it leaves (kept-gif twice, a 404) stay as they are.
    @Test func theEagerVideoExampleIsTheServicesOutput() async throws {
        let guide = try PackagingTests.read("docs/cms.md")
        let example = try Self.example(guide, marker: "/v1/rewrite?output=video&mode=eager")
        try await withHarness(configure: {
            RewriteTests.configure(&$0)
            $0.http.publicBaseURL = "https://media.example.com"
        }) { harness in
            // The guide's base is the corpus served at an origin's root.
            let query = example.query.replacingOccurrences(
                of: #"base=http://127.0.0.1:18932/"#, with: "base=" + harness.originURL("/corpus/"))
            let reply = try await harness.rewrite(example.document, query: query, timeout: .seconds(120))
            #expect(reply.status == 200, "\(reply.text)")
            print(reply.text)
            #expect(Self.normalized(reply.text) == Self.normalized(example.html))
        }
    }
}
