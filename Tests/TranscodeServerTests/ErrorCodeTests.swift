import Foundation
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// The error registry is the one place codes and statuses are decided; the documents say what it says.
@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct ErrorCodeTests {
    /// Every code of the transcoder is a code of the API (else it would answer `internal`).
    @Test func everyTranscoderCodeIsRegistered() {
        for code in TranscodeError.Code.allCases {
            #expect(ErrorCode(rawValue: code.rawValue) != nil, "\(code) is not in ErrorCode")
        }
    }

    /// One status per code: a failure's status comes from its code, `/readyz` aside.
    @Test func aFailureTakesItsCodesStatus() {
        for code in ErrorCode.allCases {
            let error = ServiceError(code, "m")
            #expect(error.status == code.status)
            #expect(error.retryAfterSeconds == code.retryAfterSeconds)
        }
        #expect(ServiceError(TranscodeError(.corrupt, "x")).status.code == 422)
        #expect(ServiceError.notReady(.insufficientStorage, "low").status.code == 503)
    }

    /// The error table of docs/api.md is the registry's (`ErrorCode.markdownTable`).
    @Test func readmeTableIsTheRegistry() throws {
        let readme = try PackagingTests.read("docs/api.md")
        let lines = readme.split(separator: "\n", omittingEmptySubsequences: false)
        let start = lines.firstIndex(of: "| code | status | meaning |")
        let table = start.map { lines[$0...].prefix { !$0.isEmpty }.joined(separator: "\n") }
        #expect(table == ErrorCode.markdownTable, "docs/api.md's error table should read:\n\(ErrorCode.markdownTable)")
    }

    /// The OpenAPI document's `ErrorDetail.code` enum lists exactly the registry's codes.
    @Test func openAPIEnumIsTheRegistry() throws {
        let spec = try String(contentsOfFile: OpenAPITests.specPath, encoding: .utf8)
        let marker = "ErrorDetail:"
        let start = try #require(spec.range(of: marker)).upperBound
        let enumLine = try #require(
            spec[start...].split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("enum:") })
        let listed =
            enumLine.split(separator: "[").last?.split(separator: "]").first?
            .split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } ?? []
        #expect(Set(listed) == Set(ErrorCode.allCases.map(\.rawValue)))
        #expect(listed.count == ErrorCode.allCases.count)
    }
}
