import ArgumentParser
import TranscodeCore
import TranscodeHTTP

/// `transcode-server`: the GIF-to-MP4 service and its command-line tools.
@main
struct TranscodeServerCommand: AsyncParsableCommand {
    /// Printed by `--version`.
    static var version: String { BuildInfo.version }

    static let configuration = CommandConfiguration(
        commandName: "transcode-server",
        abstract: "Turns animated GIFs into looping, muted H.264 MP4s with a JPEG poster.",
        version: TranscodeServerCommand.version,
        subcommands: [
            ServeCommand.self, ConvertCommand.self, CacheCommand.self, SignCommand.self, BackfillCommand.self,
            QueueCommand.self, ConfigCommand.self,
        ],
        defaultSubcommand: ServeCommand.self
    )
}
