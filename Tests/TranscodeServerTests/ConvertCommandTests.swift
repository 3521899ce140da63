import ArgumentParser
import Foundation
import TestSupport
import Testing

@testable import TranscodeServer

@Suite(.tags(.system), .timeLimit(.minutes(10))) struct ConvertCommandTests {
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

    /// The same GIF gives the same MP4 whatever the process converted before it (`EncoderHeap`), against the
    /// file converted alone; four runs of the real binary each. Without `EncoderHeap`, cartoon_hotdog.gif after
    /// the ten corpus GIFs before it came out 7,964-7,977 bytes from run to run (a fixed `mmap` threshold alone
    /// fixed it). odd_30x20_muybridge.gif, whose blocks are all small, still came out different in 2 runs of 6
    /// after these five with the threshold alone: only zeroing x264's small blocks fixed it.
    @Test(arguments: [
        (
            "cartoon_hotdog",
            [
                "cartoon_3d_machine_101f", "cartoon_anime_table", "cartoon_christmas_tree_loop1000",
                "cartoon_dancing_banana", "cartoon_earth_3d_loop65535", "cartoon_flag_delaware",
                "cartoon_floppybuddy", "cartoon_gifjs_logo", "cartoon_giphy_logo", "cartoon_giphy_new_feature",
            ]
        ),
        (
            "odd_30x20_muybridge",
            [
                "loop_none_no_netscape", "loop_once_libgd", "many_186f_giphy_sdk_logo", "many_380f_terminal",
                "odd_11x29_anim",
            ]
        ),
    ])
    func outputIsTheSameWhateverWasConvertedBefore(name: String, before: [String]) async throws {
        let binary = try OperationsTests.debugBinary()
        let inputs = before.map { corpusDirectory + "/\($0).gif" }
        let gif = corpusDirectory + "/\(name).gif"
        try await withTemporaryDirectory { directory in
            func convert(_ inputs: [String], into folder: String) async throws -> [UInt8] {
                let out = directory + "/" + folder
                let arguments = ["convert"] + inputs + ["--out", out]
                let result = try await runProcess(binary, arguments, timeout: .seconds(120))
                try #require(result.status == 0, "\(result.stderr)")
                return [UInt8](try Data(contentsOf: URL(fileURLWithPath: out + "/\(name).mp4")))
            }
            let alone = try await convert([gif], into: "alone")
            var differing: [Int] = []
            for run in 0..<4 {
                let after = try await convert(inputs + [gif], into: "after\(run)")
                // Compared as one Bool: a failure prints no kilobytes of bytes.
                let same = after == alone
                if !same { differing.append(run) }
            }
            #expect(differing.isEmpty, "runs \(differing) differ from the file converted alone")
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
