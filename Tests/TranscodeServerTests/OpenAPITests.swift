import Foundation
import Hummingbird
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// `openapi.yaml` and the router describe the same API.
@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct OpenAPITests {
    static let specPath = ConfigurationTests.repositoryRoot
        .appendingPathComponent("Sources/TranscodeServer/Resources/openapi.yaml").path

    /// `METHOD /path` for every operation of the spec (paths at two spaces, methods at four).
    static func operations(in text: String) -> Set<String> {
        var operations = Set<String>()
        var path: String?
        let methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                path = String(line.dropFirst(2).dropLast())
            } else if line.hasPrefix("    "), !line.hasPrefix("     "), line.hasSuffix(":"), let current = path {
                let word = line.trimmingCharacters(in: .whitespaces).dropLast()
                if methods.contains(String(word)) { operations.insert("\(word.uppercased()) \(current)") }
            } else if !line.hasPrefix(" "), !line.isEmpty {
                path = nil
            }
        }
        return operations
    }

    @Test func specAndRouterAgree() async throws {
        try await withTemporaryDirectory { directory in
            var configuration = ServerConfiguration()
            configuration.cache.directory = directory
            let (_, services) = try buildApplication(configuration: configuration)
            let router = buildRouter(services: services)
            // The router's `**` (the signed path spans segments) is written as a parameter in the spec.
            let routes = Set(
                router.routes.map {
                    "\($0.method) \($0.path)".replacingOccurrences(of: "/v1/**", with: "/v1/{signature}/{path}")
                })
            let spec = Self.operations(in: try String(contentsOfFile: Self.specPath, encoding: .utf8))
            #expect(spec.count >= 9)
            #expect(
                routes == spec,
                "only in the router: \(routes.subtracting(spec).sorted()); only in the spec: \(spec.subtracting(routes).sorted())"
            )
        }
    }

    /// The formats the spec lists are the output-format registry's (every format but the manifest, which is not
    /// asked for), and `sign --extension`'s help names every extension the signed route takes (issue 54: the help
    /// lacked `poster.webp` and `poster.avif`, and nothing tied the spec's lists to the registry).
    @Test(.tags(.childProcess)) func formatListsAreTheRegistrys() async throws {
        let text = try String(contentsOfFile: Self.specPath, encoding: .utf8)
        let asked = OutputFormat.all.filter { $0 != ObjectFiles.manifest }.map(\.name)
        #expect(text.contains("enum: [\(asked.joined(separator: ", "))]"), "the formats' enum is not \(asked)")
        #expect(text.contains("Its format's name: \(asked.joined(separator: ", "))."))
        // The extras, where the spec lists them in prose (the query's `formats`, the signed path's `also:`), and the
        // media route's file pattern.
        let extras = ObjectFiles.extras.map { "`\($0.name)`" }.joined(separator: ", ")
        #expect(text.components(separatedBy: "(\(extras))").count - 1 == 1, "the query's formats are not \(extras)")
        #expect(text.contains("`also:webm`: \(extras) in that order"), "also: does not list \(extras)")
        let pattern = OutputFormat.all.map { $0.fileExtension.replacingOccurrences(of: ".", with: "\\\\.") }
        #expect(text.contains("\\\\.(\(pattern.joined(separator: "|")))$"), "the media pattern is not \(pattern)")
        // `convert --also`'s help names every extra.
        let convertHelp = ConvertCommand.helpMessage(columns: 10_000)
        for extra in ObjectFiles.extras {
            #expect(convertHelp.contains(" \(extra.name), "), "convert --help does not name \(extra.name)")
        }
        let help = try await runProcess(try OperationsTests.debugBinary(), ["sign", "--help"], timeout: .seconds(60))
        let words = help.stdout.replacingOccurrences(of: "\n", with: " ").split(whereSeparator: \.isWhitespace)
            .joined(separator: " ")
        for fileExtension in SourcePath.extensions {
            #expect(
                words.contains(" \(fileExtension) ("), "sign --help does not name .\(fileExtension): \(help.stdout)")
        }
    }

    /// A job's statuses in the spec are `ItemStatus`'s but `kept-gif`, which only a batch's line and counts have (a
    /// job that made its files is `done`, and its result's recommendation says the rest).
    @Test func jobStatusesAreItemStatuses() throws {
        let text = try String(contentsOfFile: Self.specPath, encoding: .utf8)
        let statuses = ItemStatus.allCases.filter { $0 != .keptGIF }.map(\.rawValue)
        #expect(text.contains("status: { type: string, enum: [\(statuses.joined(separator: ", "))] }"))
        #expect(text.contains("keptGif: { type: integer }"))
    }

    @Test func servedAtOpenAPIYAML() async throws {
        try await withHarness { harness in
            let reply = try await harness.request(.GET, "/openapi.yaml")
            #expect(reply.status == 200)
            #expect(reply.headers.first(name: "Content-Type")?.hasPrefix("application/yaml") == true)
            #expect(reply.text == (try String(contentsOfFile: Self.specPath, encoding: .utf8)))
        }
    }
}
