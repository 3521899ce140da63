import ArgumentParser
import Foundation
import TranscodeCore
import TranscodeHTTP

/// `transcode-server config`: every configuration key the server reads, with its environment variable, flag, default
/// and meaning (`ConfigurationKeys`, from docs/configuration.md's table), so that an operator needs no document to
/// configure it.
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Lists every configuration key: its environment variable, flag, default and meaning.",
        discussion: """
            Settings are read from the configuration file (--config FILE, or \(ServerConfiguration.defaultFilePath) \
            when it exists), then the environment, then flags; a later one wins.
            """)

    @Flag(help: "One JSON object per key and line: key, environment, flag, default, meaning.")
    var json = false

    @Argument(help: "Only the keys that start with this (cache, storage.s3).")
    var prefix: String?

    func run() throws {
        let keys = ConfigurationKeys.all.filter { self.prefix.map($0.name.hasPrefix) ?? true }
        guard !keys.isEmpty else { throw ValidationError("no configuration key starts with \(self.prefix ?? "")") }
        for key in keys {
            print(self.json ? Self.jsonLine(key) : Self.text(key))
        }
    }

    /// `cache.maxBytes  TRANSCODE_CACHE_MAX_BYTES  --cache-max-bytes  default 10737418240`, then the meaning indented.
    static func text(_ key: ConfigurationKeys.Key) -> String {
        "\(key.name)  \(ServerConfiguration.environmentName(key.name))  \(ServerConfiguration.flagName(key.name))  default \(key.defaultValue)\n    \(key.meaning)\n"
    }

    static func jsonLine(_ key: ConfigurationKeys.Key) -> String {
        let object = [
            "key": key.name, "environment": ServerConfiguration.environmentName(key.name),
            "flag": ServerConfiguration.flagName(key.name),
            "default": key.defaultValue, "meaning": key.meaning,
        ]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}
