import ArgumentParser
import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.integration), .timeLimit(.minutes(20))) struct ConvertCommandTests {
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

    /// `a.gif` with `--also poster.webp` and `a.poster.gif` with `--also webp` would both write `a.poster.webp`.
    @Test func twoInputsWritingOneFileAreRefused() throws {
        do {
            _ = try ConvertCommand.parse([
                "a.gif", "a.poster.gif", "--also", "webp", "--also", "poster.webp", "--out", "/nonexistent/out",
            ])
            Issue.record("accepted")
        } catch {
            let message = ConvertCommand.message(for: error)
            #expect(message.contains("a.gif and a.poster.gif would both be written as a.poster.webp"), "\(message)")
        }
        // Without the poster, nothing collides.
        #expect(throws: Never.self) {
            _ = try ConvertCommand.parse(["a.gif", "a.poster.gif", "--also", "webp", "--out", "/nonexistent/out"])
        }
    }

    /// `--also` takes a list as the signed URL's `also:` does: `--also webm,poster.webp` is `--also webm --also
    /// poster.webp`; an unknown or empty one is refused (a format named twice is made once, as when repeated).
    @Test func alsoTakesACommaSeparatedList() throws {
        let listed = try ConvertCommand.parse(["a.gif", "--also", "webm,poster.webp", "--out", "/nonexistent/out"])
        let repeated = try ConvertCommand.parse([
            "a.gif", "--also", "webm", "--also", "poster.webp", "--out", "/nonexistent/out",
        ])
        #expect(listed.alsoFormats == ["webm", "poster.webp"] && listed.alsoFormats == repeated.alsoFormats)
        let twice = try ConvertCommand.parse(["a.gif", "--also", "webm,webm", "--out", "/nonexistent/out"])
        #expect(twice.options.rendition.extraFormats == [.webm])
        for refused in ["webm,", "webm,gif"] {
            #expect(throws: (any Error).self, "\(refused)") {
                _ = try ConvertCommand.parse(["a.gif", "--also", refused, "--out", "/nonexistent/out"])
            }
        }
    }

    /// The same GIF gives the same MP4 whatever the process converted before it (`EncoderHeap`), against the
    /// file converted alone; four runs of the real binary each. On the host where it was found, without
    /// `EncoderHeap`, cartoon_hotdog.gif after the ten corpus GIFs before it came out 7,964-7,977 bytes from run to
    /// run, and odd_30x20_muybridge.gif after these five differed in 2 runs of 6. On a later host (AMD EPYC, AVX2
    /// and no AVX-512) neither the build of then nor today's varies, with or without `EncoderHeap`
    /// (docs/fidelity.md, "One key, one file").
    @Test(
        .tags(.childProcess),
        arguments: [
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
                let result = try await runProcess(binary, arguments, timeout: .seconds(120), heavy: true)
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

    /// The same bytes on any CPU: converted without SIMD instructions (FFmpeg's and x264's, `--without-simd`), as
    /// a CPU without them would, the video and the poster are those converted with all this one has. Without
    /// x264's `cpu-independent`, cartoon_hotdog.gif's packets were 6,999 bytes without SIMD (or with SSE2 alone)
    /// and 6,991 with SSE4.2 and up; without the poster's C DCT, every poster differed.
    @Test(.tags(.childProcess)) func theBytesDoNotDependOnTheCPU() async throws {
        let binary = try OperationsTests.debugBinary()
        let names = [
            "cartoon_hotdog.gif", "cartoon_dancing_banana.gif", "odd_30x20_muybridge.gif", "apng_101f_320x240.apng",
        ]
        let inputs = names.map { corpusDirectory + "/" + $0 }
        try await withTemporaryDirectory { directory in
            for (folder, extra) in [("simd", [String]()), ("plain", ["--without-simd"])] {
                let result = try await runProcess(
                    binary, ["convert"] + inputs + ["--out", directory + "/" + folder] + extra, timeout: .seconds(120),
                    heavy: true)
                try #require(result.status == 0, "\(result.stderr)")
            }
            for name in names {
                let base = URL(fileURLWithPath: name).deletingPathExtension().lastPathComponent
                for ext in ["mp4", "jpg"] {
                    let simd = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/simd/\(base).\(ext)"))
                    let plain = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/plain/\(base).\(ext)"))
                    #expect(simd == plain, "\(base).\(ext): \(simd.count) bytes with SIMD, \(plain.count) without")
                }
            }
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
