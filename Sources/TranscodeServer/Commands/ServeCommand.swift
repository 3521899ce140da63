import ArgumentParser
import Hummingbird
import Logging
import Transcoder

/// `transcode-server serve` (also what runs with no subcommand): the HTTP service.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve", abstract: "Run the HTTP service (POST /transcode, GET /media/...).")

    @Option(name: .long, help: "Address to listen on.")
    var host: String = ServerConfiguration().host

    @Option(name: .long, help: "Port to listen on.")
    var port: Int = ServerConfiguration().port

    @Option(name: .long, help: "Cache directory.")
    var cacheDirectory: String = ServerConfiguration().cacheDirectory

    @Flag(name: .long, help: "Allow downloads from loopback addresses (testing only).")
    var allowLoopback = false

    func run() async throws {
        var configuration = ServerConfiguration()
        configuration.host = self.host
        configuration.port = self.port
        configuration.cacheDirectory = self.cacheDirectory
        configuration.download.allowLoopback = self.allowLoopback
        let (application, _) = try buildApplication(configuration: configuration)
        try await application.runService()
    }
}
