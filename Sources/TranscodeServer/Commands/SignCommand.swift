import ArgumentParser
import Foundation
import TranscodeCore
import TranscodeHTTP
import Transcoder

/// `transcode-server sign URL [--option bg:000000] [--extension jpg]`: prints the signed `GET /v1/...` path
/// of a GIF's URL, with the keys of the configuration the server reads. `sign -` signs each line of standard input
/// (a CMS's list, a client's test vectors), one path per line, in order.
struct SignCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Print the signed GET path (/v1/...) of a GIF's URL (-: of each line of standard input).",
        discussion: """
            Signs with the first of signing.keys / signing.salts, read like the server reads them \
            (config/transcode-server.json or --config, TRANSCODE_SIGNING_KEYS, --signing-keys). Prints the path \
            alone; prefix your public base URL.
            """)

    @Argument(help: "The GIF's URL, or - for one URL per line of standard input (one path per line out).")
    var url: String

    @Option(name: .customLong("option"), help: "An output option, name:value (bg:000000); repeatable.")
    var options: [String] = []

    @Option(name: .customLong("extension"), help: ArgumentHelp(Self.extensionHelp))
    var fileExtension = ObjectFiles.video.fileExtension

    /// The extensions the signed route takes (`SourcePath.extensions`, from the output-format registry), each with
    /// its media type: a format added to the registry is listed here without an edit.
    static var extensionHelp: String {
        let formats = SourcePath.formats.map { "\($0.fileExtension) (\($0.mediaType.prefix { $0 != ";" }))" }
        return "One of: "
            + (formats + ["\(SourcePath.negotiated) (the file the client shows best)"]).joined(separator: ", ")
            + "."
    }

    @Option(name: .long, help: "JSON configuration file (default: config/transcode-server.json if present).")
    var config: String?

    @Argument(parsing: .allUnrecognized, help: "Configuration keys as flags, e.g. --signing-keys HEX.")
    var settings: [String] = []

    /// What `sign` says without keys: how to make a key and a salt, and where to put them.
    static let noKeysMessage = """
        transcode-server: no signing.keys configured. Make a key and a salt (the server needs the same ones):
          KEY=$(openssl rand -hex 32) SALT=$(openssl rand -hex 32)
        then pass them here and to the server, as flags or in the environment:
          transcode-server sign URL --signing-keys $KEY --signing-salts $SALT
          TRANSCODE_SIGNING_KEYS=$KEY TRANSCODE_SIGNING_SALTS=$SALT transcode-server serve
        or put them in config/transcode-server.json under "signing": {"keys": [...], "salts": [...]}.

        """

    func run() async throws {
        let configuration = try await ServerConfiguration.loadForCommand(
            filePath: self.config, arguments: self.settings)
        guard
            let signer = URLSigner(hexKeys: configuration.signing.keys, hexSalts: configuration.signing.salts),
            signer.canSign
        else {
            FileHandle.standardError.write(Data(Self.noKeysMessage.utf8))
            throw ExitCode(78)
        }
        // Every URL checked before any is printed: a list is signed whole or not at all.
        var paths: [String] = []
        let urls = self.url == "-" ? Self.standardInputLines() : [self.url]
        for url in urls {
            do {
                _ = try Downloader.validate(url)
                // Written as a path and read back: the options are checked exactly as the server checks them.
                let written = (self.options + [URLSigner.base64URL(Array(url.utf8)) + "." + self.fileExtension])
                paths.append(signer.signedPath(try SourcePath.parse("/" + written.joined(separator: "/")).path))
            } catch let error as ServiceError {
                throw ValidationError(self.url == "-" ? "\(url): \(error.message)" : error.message)
            }
        }
        print(paths.joined(separator: "\n"))
    }

    /// The lines of standard input, without their line ends; blank lines skipped.
    static func standardInputLines() -> [String] {
        var lines: [String] = []
        while let line = readLine(strippingNewline: true) {
            let text = line.hasSuffix("\r") ? String(line.dropLast()) : line
            if !text.isEmpty { lines.append(text) }
        }
        return lines
    }
}
