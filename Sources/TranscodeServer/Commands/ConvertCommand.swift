import ArgumentParser
import Foundation
import TranscodeCore
import TranscodeHTTP
import Transcoder

/// `transcode-server convert IN... --out DIR`: converts files on disk, one result triple per input.
struct ConvertCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "convert",
        abstract: "Convert GIF, APNG and animated WebP files to DIR/NAME.mp4, DIR/NAME.jpg and DIR/NAME.json.",
        discussion: """
            Exits 0 when every input converted, 1 otherwise. Each failure is one line on standard error: \
            NAME: CODE: message.
            """
    )

    @Argument(help: "GIF, APNG or animated WebP files to convert (told apart by their signatures).")
    var inputs: [String]

    @Option(name: .long, help: "Output directory (created if missing).")
    var out: String

    @Option(name: .long, help: "Background colour transparency is flattened over, RRGGBB or #RRGGBB.")
    var background: String = TranscodeOptions().background.description

    @Option(name: .long, help: "x264 constant rate factor, 1-51 (lower: better and larger).")
    var crf: Int = TranscodeOptions.defaultCRF

    @Option(name: .long, help: "x264 preset (ultrafast ... veryslow).")
    var preset: String = TranscodeOptions.defaultPreset

    @Option(name: .long, help: "x264 threads per file (part of the output: the service's transcode.threads).")
    var threads: Int = TranscodeOptions.defaultThreads

    @Option(name: .long, help: "Size guard: re-encode a video not smaller than this fraction of the GIF.")
    var maxSizeRatio: Double = TranscodeOptions().maxSizeRatio

    @Option(name: .long, help: "Size guard: extra encodes at most (0 switches the guard off).")
    var maxExtraAttempts: Int = TranscodeOptions().maxExtraAttempts

    @Option(name: .long, help: "Size guard: the SSIM (luma, 0-1) no re-encode may fall under.")
    var minSSIM: Double = TranscodeOptions.defaultMinSSIM

    @Option(name: .customLong("also"), help: ArgumentHelp(Self.alsoHelp))
    var extraFormats: [String] = []

    /// `--also`'s help: every extra of the registry (`ObjectFiles.extras`) with its summary, so a format added there
    /// is listed here without an edit.
    static var alsoHelp: String {
        "Also make this file of each input (repeatable, or several comma-separated as in the signed URL's "
            + "also:webm,poster.webp): "
            + ObjectFiles.extras.map { "\($0.name), \($0.summary)" }.joined(separator: "; ") + "."
    }

    /// `--also`'s formats, each of its values split at commas.
    var alsoFormats: [String] {
        self.extraFormats.flatMap { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) }
    }

    @Option(
        name: .long,
        help:
            "A preview: the first SECONDS (1-2) only, the video at most 50,000 bytes (a higher CRF, then a smaller size, when it must)."
    )
    var preview: Int?

    @Flag(
        name: .customLong("dump-yuv"),
        help: """
            Write the pictures the encoder would get instead of converting: DIR/NAME.yuv (yuv420p) and \
            DIR/NAME.tc (x264 timecodes, v2), and print NAME WIDTHxHEIGHT PICTURES REFS LOOKAHEAD (x264's \
            reference frames and lookahead for --threads, - for the preset's: scripts/bench-floor).
            """)
    var dumpYUV = false

    @Flag(
        name: .customLong("print-seconds"),
        help: "Print NAME SECONDS per converted file: the time spent converting, without process start-up.")
    var printSeconds = false

    @Flag(
        name: .customLong("without-simd"),
        help: """
            Convert without the CPU's SIMD instructions (FFmpeg's and x264's), as a CPU without them would: \
            to check that the bytes do not depend on the CPU. They do not; it is slower.
            """)
    var withoutSIMD = false

    /// The options the flags describe; `validate()` and `run()` share it.
    var options: TranscodeOptions {
        var options = TranscodeOptions()
        options.background = RGBColor(hex: self.background) ?? options.background
        options.crf = self.crf
        options.preset = self.preset
        options.threads = self.threads
        options.maxSizeRatio = self.maxSizeRatio
        options.maxExtraAttempts = self.maxExtraAttempts
        options.minSSIM = self.minSSIM
        options.rendition = options.rendition.withExtraFormats(self.alsoFormats.compactMap(ObjectFiles.extra(named:)))
        options.rendition.previewSeconds = self.preview
        return options
    }

    func validate() throws {
        guard RGBColor(hex: self.background) != nil else {
            throw ValidationError("--background must be RRGGBB or #RRGGBB, got \(self.background)")
        }
        for name in self.alsoFormats where ObjectFiles.extra(named: name) == nil {
            let known = ObjectFiles.extras.map(\.name).joined(separator: ", ")
            throw ValidationError("--also: unknown format \"\(name)\"; the formats are \(known)")
        }
        do {
            try self.options.validate()
        } catch let error as TranscodeError {
            throw ValidationError(error.message)
        }
        // Two inputs would write one file, the second over the first: one name (`d1/x.gif`, `d2/x.gif`), or one name
        // and an extension of two parts (`a.gif` with `--also poster.webp`, `a.poster.gif` with `--also webp`).
        let extensions =
            [ObjectFiles.video, ObjectFiles.poster, ObjectFiles.manifest].map(\.fileExtension)
            + self.options.rendition.extraFormats.map(\.fileExtension)
        var seen: [String: String] = [:]
        for input in self.inputs {
            let name = Self.name(of: input)
            for file in extensions.map({ name + "." + $0 }) {
                if let earlier = seen[file] {
                    throw ValidationError("\(earlier) and \(input) would both be written as \(file): rename one")
                }
                seen[file] = input
            }
        }
    }

    /// The output name of an input: its file name without the extension.
    static func name(of input: String) -> String {
        URL(fileURLWithPath: input).deletingPathExtension().lastPathComponent
    }

    func run() throws {
        #if canImport(Glibc)
            EncoderHeap.enable()
        #endif
        let options = self.options
        var transcoder = Transcoder(options: options)
        if self.withoutSIMD {
            Transcoder.stopFFmpegSIMD()
            transcoder.x264UsesSIMD = false
        }
        do {
            try FileManager.default.createDirectory(atPath: self.out, withIntermediateDirectories: true)
        } catch {
            Self.report("\(self.out): io: cannot create the output directory")
            throw ExitCode.failure
        }

        var failures = 0
        for input in self.inputs {
            let name = Self.name(of: input)
            do {
                let bytes = try self.read(input, limit: options.limits.maxInputBytes)
                if self.dumpYUV {
                    let base = URL(fileURLWithPath: self.out).appendingPathComponent(name).path
                    let dump = try transcoder.dumpPictures(bytes, yuvPath: base + ".yuv")
                    let timecodes = "# timecode format v2\n" + dump.starts.map { "\($0)\n" }.joined()
                    try Data(timecodes.utf8).write(to: URL(fileURLWithPath: base + ".tc"))
                    let lookahead = dump.lookahead.map(String.init) ?? "-"
                    print("\(name) \(dump.width)x\(dump.height) \(dump.starts.count) \(dump.references) \(lookahead)")
                } else {
                    let started = ContinuousClock.now
                    try transcoder.convert(bytes, directory: self.out, name: name)
                    if self.printSeconds {
                        let elapsed = ContinuousClock.now - started
                        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                        print("\(name) \(seconds)")
                    }
                }
            } catch let error as TranscodeError {
                failures += 1
                Self.report("\(name): \(error.code): \(error.message)")
            } catch {
                failures += 1
                Self.report("\(name): io: \((error as NSError).localizedDescription)")
            }
        }
        if failures > 0 {
            throw ExitCode.failure
        }
    }

    /// Reads a file, refusing one larger than the input limit before reading it.
    private func read(_ path: String, limit: Int) throws -> [UInt8] {
        let attributes: [FileAttributeKey: Any]
        do {
            attributes = try FileManager.default.attributesOfItem(atPath: path)
        } catch {
            throw TranscodeError(.io, "cannot read \(path)")
        }
        if let size = attributes[.size] as? Int, size > limit {
            throw TranscodeError(.tooLarge, "the GIF is \(size) bytes; the limit is \(limit)")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TranscodeError(.io, "cannot read \(path)")
        }
        return [UInt8](data)
    }

    private static func report(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
