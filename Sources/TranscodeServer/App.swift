import ArgumentParser

/// `transcode-server`: the GIF-to-MP4 service and its command-line tools.
@main
struct TranscodeServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transcode-server",
        abstract: "Turns animated GIFs into looping, muted H.264 MP4s with a JPEG poster.",
        subcommands: [ServeCommand.self, ConvertCommand.self],
        defaultSubcommand: ServeCommand.self
    )
}
