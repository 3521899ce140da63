import Foundation
import TestSupport
import Testing

/// Headless Chromium as the test oracle, through `Browser/chromium_oracle.py` (Debian's chromium,
/// chromium-driver and python3-selenium): how Chromium's `<video>` plays our MP4s, and how Chromium's own
/// image decoder (WebCodecs `ImageDecoder`) composites and times the source GIFs. A missing browser fails
/// the test; it never skips.
enum ChromiumOracle {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Browser/chromium_oracle.py").path

    /// What Chromium's `<video>` did with one MP4, played once from the start.
    struct Playback: Decodable {
        var file: String
        /// `video.duration`, seconds.
        var duration: Double?
        /// `requestVideoFrameCallback`'s `mediaTime` of every presented frame, seconds, in order.
        var mediaTimes: [Double]?
        var endedCurrentTime: Double?
        /// After the play, the `mediaTime` of the frame presented at each probed time (seconds).
        var probes: [Probe]?
        var error: String?
    }

    struct Probe: Decodable {
        var time: Double
        var mediaTime: Double?
    }

    /// Chromium's decoding of one image: its frames are in `<name>.rgba` beside the JSON. Fields are `nil`
    /// where Chromium refused the file before telling them.
    struct Decoding: Decodable {
        var width: Int?
        var height: Int?
        /// What the track header claims; `durationsMs.count` frames actually decoded.
        var frameCount: Int?
        /// Plays after the first; `nil`: forever (also what Chromium says of any single-frame GIF).
        var repetitionCount: Double?
        /// Each decoded frame's delay as written (0 cs is 0 ms: the browser rule is applied when playing).
        var durationsMs: [Double?]
        var error: String?

        /// The delays as browsers play them: 10 ms or less plays as 100 ms.
        var playedMilliseconds: [Int] {
            self.durationsMs.map { delay in
                let milliseconds = Int((delay ?? 0).rounded())
                return milliseconds <= 10 ? 100 : milliseconds
            }
        }
    }

    /// Plays every MP4 or WebM once in one browser session at `rate` (slow enough that every frame is presented).
    /// - Parameter probes: per path, times (seconds) to seek to after the play.
    /// - Parameter pixels: a directory for the picture shown at each probe over black and over white
    ///   (`probePicture`).
    static func play(
        _ paths: [String], rate: Double = 0.25, metadataOnly: Bool = false, probes: [String: [Double]] = [:],
        pixels: String? = nil
    ) async throws -> [Playback] {
        try requireBrowser()
        return try await withTemporaryDirectory { directory in
            let out = directory + "/playback.json"
            var arguments = [Self.script, "video", "--rate", String(rate), "--out", out]
            if metadataOnly { arguments.append("--metadata-only") }
            if let pixels { arguments += ["--pixels", pixels] }
            if !probes.isEmpty {
                let file = directory + "/probes.json"
                try JSONEncoder().encode(probes).write(to: URL(fileURLWithPath: file))
                arguments += ["--probes", file]
            }
            try await runOracle(arguments + paths)
            return try JSONDecoder().decode([Playback].self, from: Data(contentsOf: URL(fileURLWithPath: out)))
        }
    }

    /// The picture `play(pixels:)` saw at probe `index` of the video at `path`, over black or white (`width` x
    /// `height` RGBA as 0xAABBGGRR).
    static func probePicture(
        _ index: Int, of path: String, overWhite: Bool, in directory: String, width: Int, height: Int
    ) throws -> [UInt32] {
        let name = URL(fileURLWithPath: path).lastPathComponent
        let file = directory + "/\(name).probe\(index).\(overWhite ? "white" : "black").rgba"
        let data = try Data(contentsOf: URL(fileURLWithPath: file))
        guard data.count == width * height * 4 else { throw OracleError.shortFrame(name, index) }
        return data.withUnsafeBytes { Array($0.bindMemory(to: UInt32.self)) }
    }

    /// Decodes every image with Chromium's `ImageDecoder`, flattening each frame over `background`
    /// (0xRRGGBB), into `directory`: `<basename>.json` and `<basename>.rgba`.
    static func decode(_ paths: [String], background: UInt32, into directory: String) async throws {
        try requireBrowser()
        try await runOracle(
            [Self.script, "frames", "--background", String(format: "%06x", background), "--out", directory] + paths)
    }

    static func decoding(of path: String, in directory: String) throws -> Decoding {
        let name = URL(fileURLWithPath: path).lastPathComponent
        return try JSONDecoder().decode(
            Decoding.self, from: Data(contentsOf: URL(fileURLWithPath: directory + "/" + name + ".json")))
    }

    /// Frame `index` of a decoding, RGBA (R in the low byte), `width * height` pixels.
    static func frame(_ index: Int, of path: String, in directory: String, decoding: Decoding) throws -> [UInt32] {
        let name = URL(fileURLWithPath: path).lastPathComponent
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: directory + "/" + name + ".rgba"))
        defer { try? handle.close() }
        let size = (decoding.width ?? 0) * (decoding.height ?? 0) * 4
        try handle.seek(toOffset: UInt64(index * size))
        let data = try handle.read(upToCount: size) ?? Data()
        guard data.count == size else { throw OracleError.shortFrame(name, index) }
        return data.withUnsafeBytes { Array($0.bindMemory(to: UInt32.self)) }
    }

    private static func requireBrowser() throws {
        let install = "install them with: apt-get install -y chromium chromium-driver python3-selenium"
        for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver", "/usr/bin/python3"] {
            try #require(FileManager.default.isExecutableFile(atPath: tool), "\(tool) is missing; \(install)")
        }
    }

    /// The script, waited for without holding a thread of the async executor (`runProcess`), in a heavy-work slot;
    /// at most two minutes, as every test's wait (`CorpusRun` hands it the corpus in parts).
    private static func runOracle(_ arguments: [String]) async throws {
        let result = try await runProcess("/usr/bin/python3", arguments, timeout: .seconds(120), heavy: true)
        guard result.status == 0 else {
            throw OracleError.failed(status: result.status, output: result.stdout + result.stderr)
        }
    }

    enum OracleError: Error, CustomStringConvertible {
        case failed(status: Int32, output: String)
        case shortFrame(String, Int)

        var description: String {
            switch self {
            case .failed(let status, let output): "chromium_oracle.py exited with \(status):\n\(output)"
            case .shortFrame(let name, let index): "\(name): frame \(index) missing from Chromium's frames"
            }
        }
    }
}
