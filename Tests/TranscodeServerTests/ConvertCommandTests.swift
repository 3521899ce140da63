import ArgumentParser
import Foundation
import Testing

@testable import TranscodeServer

@Suite struct ConvertCommandTests {
    /// `d1/x.gif` and `d2/x.gif` would both become `x.mp4`: refused before any work.
    @Test func twoInputsWithOneNameAreRefused() throws {
        do {
            _ = try ConvertCommand.parse(["d1/x.gif", "d2/x.gif", "--out", "/nonexistent/out"])
            Issue.record("accepted")
        } catch {
            let message = ConvertCommand.message(for: error)
            #expect(message.contains("d1/x.gif and d2/x.gif would both be written as x.mp4"), "\(message)")
            #expect(ConvertCommand.exitCode(for: error) == .validationFailure)
        }
    }

    /// An output directory that cannot be created is a `NAME: io: message` line and exit 1, not a raw
    /// Foundation error.
    @Test func anUnwritableOutputDirectoryIsAnIOFailure() throws {
        let command = try ConvertCommand.parse([
            corpusDirectory + "/loop_1.gif", "--out", "/proc/self/cannot-create-here",
        ])
        #expect(throws: ExitCode.failure) { try command.run() }
    }
}
