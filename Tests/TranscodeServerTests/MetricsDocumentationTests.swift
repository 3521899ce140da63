import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// docs/operations.md's list of metrics is what `/metrics` exposes: no family left out of the docs, none named
/// there that the service does not have.
@Suite(.tags(.integration), .timeLimit(.minutes(2))) struct MetricsDocumentationTests {
    /// The metric names of the docs' "Health, readiness and metrics" section: every `name` or `name{labels}` in
    /// backticks that starts with `transcode_` or `process_`.
    static func documented() throws -> Set<String> {
        let text = try PackagingTests.read("docs/operations.md")
        let start = try #require(text.range(of: "## Health, readiness and metrics"))
        let end = text.range(of: "\n## ", range: start.upperBound..<text.endIndex)?.lowerBound ?? text.endIndex
        let section = text[start.upperBound..<end]
        var names: Set<String> = []
        for span in section.split(separator: "`", omittingEmptySubsequences: false).enumerated()
        where span.offset % 2 == 1 {
            let name = span.element.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
            // Whole names only (the text also speaks of the `transcode_` namespace).
            if (name.hasPrefix("transcode_") || name.hasPrefix("process_")) && !name.hasSuffix("_") {
                names.insert(String(name))
            }
        }
        return names
    }

    @Test func theDocsListEveryMetricAndNoOther() async throws {
        try await withHarness { harness in
            // Families with labels appear once they have a sample: a request and an error first.
            #expect(try await harness.request(.GET, "/healthz").status == 200)
            #expect(try await harness.request(.GET, "/no-such-path").status == 404)
            let reply = try await harness.request(.GET, "/metrics")
            #expect(reply.status == 200)
            let exposed = Set(
                reply.text.split(separator: "\n").filter { $0.hasPrefix("# HELP ") }.compactMap {
                    $0.split(separator: " ").dropFirst(2).first.map(String.init)
                })
            try #require(!exposed.isEmpty, "no # HELP line in /metrics")
            let documented = try Self.documented()
            #expect(
                exposed.subtracting(documented).isEmpty,
                "exposed but not in docs/operations.md: \(exposed.subtracting(documented).sorted())")
            #expect(
                documented.subtracting(exposed).isEmpty,
                "in docs/operations.md but not exposed: \(documented.subtracting(exposed).sorted())")
        }
    }
}
