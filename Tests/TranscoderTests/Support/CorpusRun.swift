import Foundation
import Synchronization
import TestSupport
import Testing

@testable import Transcoder

/// Every corpus file that should convert, converted once (two at a time) into one directory, plus Chromium's
/// readings taken in one browser session each: its own decoding of every source (WebCodecs `ImageDecoder`,
/// frames flattened over white) and its `<video>`'s duration for every MP4. Built on first use; the
/// directory (about 1.8 GB of Chromium's frames at its largest) is removed when the test process exits, and
/// each source's frames as soon as its test has read them.
///
/// Built by a task the corpus tests await, never in a static initializer: the first caller of one runs it
/// to its end while every other caller blocks on it, so minutes of conversions and browser sessions would hold
/// every thread of the async executor (two on a two-core machine) and stall every test in the process.
final class CorpusRun: Sendable {
    /// One heavy-work slot throughout (the conversions, then every Chromium session): every corpus case waits for
    /// this run, within its time limit.
    static let shared = Task<Result<CorpusRun, CorpusRunError>, Never> {
        do {
            return .success(
                try await WorkSlots.heavy.withSlot {
                    try await CorpusRun(entries: CorpusTests.entries.filter { CorpusTests.expectedCode($0) == nil })
                })
        } catch {
            return .failure(CorpusRunError(description: "\(error)"))
        }
    }

    /// Our outputs: `NAME.mp4`, `NAME.jpg`, `NAME.json` for the corpus file `NAME`.
    let directory: String
    /// Chromium's decodings: `NAME.json` and `NAME.rgba`.
    let chromiumDirectory: String
    let metadata: [String: TranscodeMetadata]
    /// Conversions that failed, with the error.
    let failures: [String: String]
    /// Chromium's `<video>` reading of each MP4, by corpus name.
    let playback: [String: ChromiumOracle.Playback]

    private init(entries: [CorpusTests.Entry]) async throws {
        self.directory = corpusRunDirectory
        self.chromiumDirectory = corpusRunDirectory + "/chromium"
        try FileManager.default.createDirectory(atPath: self.chromiumDirectory, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(atPath: corpusRunDirectory) }

        let sources = entries.map { CorpusTests.corpusDirectory + "/" + $0.name }
        let outcomes = Mutex<(metadata: [String: TranscodeMetadata], failures: [String: String])>(([:], [:]))
        try await onOwnThread {
            DispatchQueue.concurrentPerform(iterations: entries.count) { index in
                let name = entries[index].name
                let outcome = Result {
                    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: sources[index])))
                    return try Transcoder().convert(bytes, directory: corpusRunDirectory, name: name)
                }
                outcomes.withLock {
                    switch outcome {
                    case .success(let value): $0.metadata[name] = value
                    case .failure(let error): $0.failures[name] = "\(error)"
                    }
                }
            }
        }
        let (metadata, failures) = outcomes.withLock { $0 }
        self.metadata = metadata
        self.failures = failures

        // Chromium in sessions of `Self.perSession` files: the whole corpus in one took 42 s alone here, and a
        // session must end within the two minutes every test's wait is given, with the tier running beside it.
        for part in Self.parts(of: sources) {
            try await ChromiumOracle.decode(part, background: 0xFFFFFF, into: self.chromiumDirectory)
        }
        let converted = entries.map(\.name).filter { metadata[$0] != nil }
        var playbacks: [ChromiumOracle.Playback] = []
        for part in Self.parts(of: converted.map { corpusRunDirectory + "/" + $0 + ".mp4" }) {
            playbacks += try await ChromiumOracle.play(part, metadataOnly: true)
        }
        self.playback = Dictionary(uniqueKeysWithValues: zip(converted, playbacks))
    }

    static let perSession = 40

    private static func parts(of paths: [String]) -> [[String]] {
        stride(from: 0, to: paths.count, by: Self.perSession).map {
            Array(paths[$0..<min($0 + Self.perSession, paths.count)])
        }
    }

    /// Chromium's decoding of corpus file `name`.
    func chromium(_ name: String) throws -> ChromiumOracle.Decoding {
        try ChromiumOracle.decoding(of: name, in: self.chromiumDirectory)
    }

    /// Frees the disk that Chromium's frames of `name` take.
    func dropFrames(of name: String) {
        try? FileManager.default.removeItem(atPath: self.chromiumDirectory + "/" + name + ".rgba")
    }
}

struct CorpusRunError: Error, CustomStringConvertible {
    var description: String
}

/// Where `CorpusRun` works; a global so that the exit handler (a C function pointer) can reach it.
private let corpusRunDirectory = FileManager.default.temporaryDirectory
    .appendingPathComponent("corpus-run-\(UUID().uuidString)").path
