import Foundation
import Testing
import Transcoder

@testable import TranscodeServer

@Suite struct ConfigurationTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The committed file states every default: loading it changes nothing.
    @Test func committedFileHoldsTheDefaults() async throws {
        let path = Self.repositoryRoot.appendingPathComponent("config/transcode-server.json").path
        let loaded = try await ServerConfiguration.load(filePath: path, arguments: [], environment: [:])
        let defaults = ServerConfiguration()
        #expect(loaded.host == defaults.host && loaded.port == defaults.port)
        #expect(loaded.cacheDirectory == defaults.cacheDirectory && loaded.cacheMaxBytes == defaults.cacheMaxBytes)
        #expect(loaded.download.maxBytes == defaults.download.maxBytes)
        #expect(loaded.download.timeoutSeconds == defaults.download.timeoutSeconds)
        #expect(loaded.download.allowLoopback == false)
        #expect(loaded.transcodeOptions == defaults.transcodeOptions)
        #expect(loaded.transcodeWorkers == ProcessInfo.processInfo.activeProcessorCount)
        #expect(loaded.syncWaitSeconds == defaults.syncWaitSeconds)
        #expect(loaded.authTokens.isEmpty)
        #expect(loaded.logLevel == .info)
    }

    @Test func flagsBeatEnvironmentBeatsFile() async throws {
        try await withTemporaryDirectory { directory in
            let file = directory + "/config.json"
            try Data(#"{"port": 1111, "cache": {"maxBytes": 1000}, "transcode": {"crf": 20, "preset": "slow"}}"#.utf8)
                .write(to: URL(fileURLWithPath: file))
            let loaded = try await ServerConfiguration.load(
                filePath: file, arguments: ["--port", "3333", "--download-allow-loopback"],
                environment: [
                    "TRANSCODE_PORT": "2222", "TRANSCODE_CACHE_MAX_BYTES": "2000", "TRANSCODE_TRANSCODE_CRF": "30",
                    "TRANSCODE_AUTH_TOKENS": "0123456789abcdef0123,fedcba9876543210fedc",
                ])
            #expect(loaded.port == 3333)
            #expect(loaded.cacheMaxBytes == 2000)
            #expect(loaded.transcodeOptions.crf == 30)
            #expect(loaded.transcodeOptions.preset == "slow")
            #expect(loaded.download.allowLoopback)
            #expect(loaded.authTokens == ["0123456789abcdef0123", "fedcba9876543210fedc"])
        }
    }

    @Test(arguments: [
        (["--port", "eighty"], "port"),
        (["--port", "70000"], "port"),
        (["--transcode-crf", "60"], "transcode.crf"),
        (["--transcode-preset", "warp"], "transcode.preset"),
        (["--transcode-background", "blue"], "transcode.background"),
        (["--log-level", "loud"], "log.level"),
        (["--auth-tokens", "change-me"], "auth.tokens"),
        (["--auth-tokens", "REPLACE-WITH-A-REAL-TOKEN"], "auth.tokens"),
        (["--limits-max-frames", "0"], "limits.maxFrames"),
    ])
    func invalidValuesStopStartupNamingTheKey(arguments: [String], key: String) async throws {
        do {
            _ = try await ServerConfiguration.load(filePath: nil, arguments: arguments, environment: [:])
            Issue.record("\(arguments) was accepted")
        } catch let error as ConfigurationError {
            #expect(error.problems.contains { $0.hasPrefix(key + ":") }, "\(error)")
        }
    }

    @Test func aMissingExplicitFileIsAnError() async throws {
        await #expect(throws: ConfigurationError.self) {
            _ = try await ServerConfiguration.load(
                filePath: "/nonexistent/config.json", arguments: [], environment: [:])
        }
    }
}
