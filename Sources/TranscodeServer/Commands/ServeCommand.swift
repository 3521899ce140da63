import ArgumentParser
import Foundation
import Hummingbird
import Logging
import Transcoder

/// `transcode-server serve` (also what runs with no subcommand): the HTTP service.
///
/// Configuration comes from `config/transcode-server.json` (or `--config FILE`), then `TRANSCODE_...`
/// environment variables, then flags: any configuration key works as a flag, `cache.maxBytes` as
/// `--cache-max-bytes`.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the HTTP service (POST /transcode, GET /media/...).",
        discussion: """
            Every configuration key is also a flag: --host 0.0.0.0, --port 8080, --cache-directory DIR, \
            --cache-max-bytes N, --transcode-workers N, --download-allow-loopback, ... \
            (see config/transcode-server.json and the README).
            """)

    @Option(name: .long, help: "JSON configuration file (default: config/transcode-server.json if present).")
    var config: String?

    @Argument(parsing: .allUnrecognized, help: "Configuration keys as flags, e.g. --port 8080.")
    var settings: [String] = []

    func run() async throws {
        #if canImport(Glibc)
            EncoderHeap.enable()
        #endif
        let configuration = try await ServerConfiguration.loadForCommand(
            filePath: self.config, arguments: self.settings)
        var logger =
            configuration.log.format == "json"
            ? Logger(label: "transcode-server") { JSONLogHandler(label: $0) } : Logger(label: "transcode-server")
        logger.logLevel = configuration.log.level
        if configuration.storage.createBucket, let s3 = configuration.storage.s3 {
            try await S3Client(configuration: s3).createBucket()
        }
        let (application, _) = try buildApplication(configuration: configuration, logger: logger)
        try await application.runService()
    }
}
