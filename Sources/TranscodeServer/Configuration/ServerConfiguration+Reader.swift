import Configuration
import Foundation
import Logging
import Synchronization
import SystemPackage
import Transcoder

/// Why startup stopped: every configuration key with an invalid value, by name.
struct ConfigurationError: Error, CustomStringConvertible {
    let problems: [String]
    var description: String { "invalid configuration:\n" + self.problems.map { "  - \($0)" }.joined(separator: "\n") }
}

extension ServerConfiguration {
    /// The configuration file read when `--config` is not given (missing is fine).
    static let defaultFilePath = "config/transcode-server.json"

    /// Reads the configuration once, in rising priority: the JSON file, `TRANSCODE_...` environment
    /// variables (`cache.maxBytes` is `TRANSCODE_CACHE_MAX_BYTES`), then command-line flags
    /// (`--cache-max-bytes`).
    /// - Parameters:
    ///   - filePath: the JSON file; when nil, `config/transcode-server.json` if it exists.
    ///   - arguments: command-line flags not consumed by the command itself.
    ///   - environment: the process environment.
    /// - Throws: `ConfigurationError` naming each key whose value is unusable.
    static func load(
        filePath: String?, arguments: [String], environment: [String: String]
    ) async throws -> ServerConfiguration {
        var providers: [any ConfigProvider] = [
            CommandLineArgumentsProvider(arguments: ["transcode-server"] + arguments),
            EnvironmentVariablesProvider(environmentVariables: environment).prefixKeys(with: "transcode"),
        ]
        do {
            providers.append(
                try await FileProvider<JSONSnapshot>(
                    filePath: FilePath(filePath ?? Self.defaultFilePath), allowMissing: filePath == nil))
        } catch {
            throw ConfigurationError(problems: ["\(filePath ?? Self.defaultFilePath): \(error)"])
        }
        let problems = ProblemCollector()
        let reader = ConfigReader(providers: providers, accessReporter: problems)
        return try ServerConfiguration(reader: reader, problems: problems)
    }

    /// Reads every key from `reader`, keeping the default for the ones not set.
    ///
    /// Keys (defaults in `config/transcode-server.json` and the README):
    /// `host`, `port`, `cache.directory`, `cache.maxBytes`, `download.maxBytes`,
    /// `download.connectTimeoutSeconds`, `download.timeoutSeconds`, `download.maxRedirects`,
    /// `download.allowLoopback`, `download.allowedHosts`, `transcode.workers` (0: one per core),
    /// `transcode.queueLength`, `transcode.syncWaitSeconds`, `transcode.background`, `transcode.crf`,
    /// `transcode.preset`, `transcode.threads`, `transcode.maxOutputWidth`, `transcode.maxOutputHeight`,
    /// `limits.maxInputBytes`, `limits.maxWidth`, `limits.maxHeight`, `limits.maxFrames`,
    /// `limits.maxTotalPixels`, `http.maxBodyBytes`, `http.idleTimeoutSeconds`, `http.headerTimeoutSeconds`, `auth.tokens`, `log.level`,
    /// `shutdown.graceSeconds`.
    /// - Throws: `ConfigurationError` naming each key whose value does not parse or is out of range.
    init(reader: ConfigReader, problems: ProblemCollector = ProblemCollector()) throws {
        var configuration = ServerConfiguration()
        var invalid: [String] = []
        func check(_ key: String, _ valid: Bool, _ expectation: String) {
            if !valid { invalid.append("\(key): must be \(expectation)") }
        }

        configuration.host = reader.string(forKey: "host", default: configuration.host)
        configuration.port = reader.int(forKey: "port", default: configuration.port)
        check("port", (0...65535).contains(configuration.port), "0-65535")

        configuration.cacheDirectory = reader.string(forKey: "cache.directory", default: configuration.cacheDirectory)
        configuration.cacheMaxBytes = Int64(
            reader.int(forKey: "cache.maxBytes", default: Int(configuration.cacheMaxBytes)))
        check("cache.maxBytes", configuration.cacheMaxBytes > 0, "positive")

        var download = configuration.download
        download.maxBytes = reader.int(forKey: "download.maxBytes", default: download.maxBytes)
        check("download.maxBytes", download.maxBytes > 0, "positive")
        download.connectTimeoutSeconds = reader.double(
            forKey: "download.connectTimeoutSeconds", default: download.connectTimeoutSeconds)
        check("download.connectTimeoutSeconds", download.connectTimeoutSeconds > 0, "positive")
        download.timeoutSeconds = reader.double(forKey: "download.timeoutSeconds", default: download.timeoutSeconds)
        check("download.timeoutSeconds", download.timeoutSeconds > 0, "positive")
        download.maxRedirects = reader.int(forKey: "download.maxRedirects", default: download.maxRedirects)
        check("download.maxRedirects", (0...20).contains(download.maxRedirects), "0-20")
        download.allowLoopback = reader.bool(forKey: "download.allowLoopback", default: download.allowLoopback)
        download.allowedHosts = reader.stringArray(forKey: "download.allowedHosts", default: download.allowedHosts)
            .filter { !$0.isEmpty }
        configuration.download = download

        let workers = reader.int(forKey: "transcode.workers", default: 0)
        check("transcode.workers", (0...256).contains(workers), "0 (one per core) to 256")
        if workers > 0 { configuration.transcodeWorkers = workers }
        configuration.transcodeQueueLength = reader.int(
            forKey: "transcode.queueLength", default: configuration.transcodeQueueLength)
        check("transcode.queueLength", configuration.transcodeQueueLength >= 0, "0 or more")
        configuration.syncWaitSeconds = reader.double(
            forKey: "transcode.syncWaitSeconds", default: configuration.syncWaitSeconds)
        check("transcode.syncWaitSeconds", configuration.syncWaitSeconds >= 0, "0 or more")

        var options = configuration.transcodeOptions
        let background = reader.string(forKey: "transcode.background", default: options.background.description)
        if let color = RGBColor(hex: background) {
            options.background = color
        } else {
            invalid.append("transcode.background: must be #RRGGBB, got \(background)")
        }
        options.crf = reader.int(forKey: "transcode.crf", default: options.crf)
        check("transcode.crf", TranscodeOptions.crfRange.contains(options.crf), "1-51")
        options.preset = reader.string(forKey: "transcode.preset", default: options.preset)
        check(
            "transcode.preset", TranscodeOptions.presets.contains(options.preset),
            "one of \(TranscodeOptions.presets.joined(separator: ", "))")
        options.threads = reader.int(forKey: "transcode.threads", default: options.threads)
        check("transcode.threads", (1...64).contains(options.threads), "1-64")
        options.maxOutputWidth = reader.int(forKey: "transcode.maxOutputWidth", default: options.maxOutputWidth)
        check("transcode.maxOutputWidth", options.maxOutputWidth >= 2, "at least 2")
        options.maxOutputHeight = reader.int(forKey: "transcode.maxOutputHeight", default: options.maxOutputHeight)
        check("transcode.maxOutputHeight", options.maxOutputHeight >= 2, "at least 2")
        options.limits.maxInputBytes = reader.int(forKey: "limits.maxInputBytes", default: options.limits.maxInputBytes)
        check("limits.maxInputBytes", options.limits.maxInputBytes > 0, "positive")
        options.limits.maxWidth = reader.int(forKey: "limits.maxWidth", default: options.limits.maxWidth)
        check("limits.maxWidth", (1...65535).contains(options.limits.maxWidth), "1-65535")
        options.limits.maxHeight = reader.int(forKey: "limits.maxHeight", default: options.limits.maxHeight)
        check("limits.maxHeight", (1...65535).contains(options.limits.maxHeight), "1-65535")
        options.limits.maxFrames = reader.int(forKey: "limits.maxFrames", default: options.limits.maxFrames)
        check("limits.maxFrames", options.limits.maxFrames > 0, "positive")
        options.limits.maxTotalPixels = Int64(
            reader.int(forKey: "limits.maxTotalPixels", default: Int(options.limits.maxTotalPixels)))
        check("limits.maxTotalPixels", options.limits.maxTotalPixels > 0, "positive")
        configuration.transcodeOptions = options

        configuration.maxRequestBodyBytes = reader.int(
            forKey: "http.maxBodyBytes", default: configuration.maxRequestBodyBytes)
        check("http.maxBodyBytes", configuration.maxRequestBodyBytes > 0, "positive")
        configuration.idleTimeoutSeconds = reader.double(
            forKey: "http.idleTimeoutSeconds", default: configuration.idleTimeoutSeconds)
        check("http.idleTimeoutSeconds", configuration.idleTimeoutSeconds > 0, "positive")
        configuration.headerTimeoutSeconds = reader.double(
            forKey: "http.headerTimeoutSeconds", default: configuration.headerTimeoutSeconds)
        check("http.headerTimeoutSeconds", configuration.headerTimeoutSeconds > 0, "positive")

        configuration.authTokens = reader.stringArray(forKey: "auth.tokens", isSecret: true, default: [])
            .filter { !$0.isEmpty }
        for token in configuration.authTokens where Self.isPlaceholder(token) {
            invalid.append(
                "auth.tokens: a placeholder token (\(token.prefix(4))...) is refused; use at least 16 random characters"
            )
        }

        let level = reader.string(forKey: "log.level", default: configuration.logLevel.rawValue)
        if let parsed = Logger.Level(rawValue: level.lowercased()) {
            configuration.logLevel = parsed
        } else {
            invalid.append("log.level: must be one of trace, debug, info, notice, warning, error, critical")
        }
        configuration.shutdownGraceSeconds = reader.double(
            forKey: "shutdown.graceSeconds", default: configuration.shutdownGraceSeconds)
        check("shutdown.graceSeconds", configuration.shutdownGraceSeconds >= 0, "0 or more")

        // Values that did not parse at all (a word where a number belongs) fell back to their defaults
        // above; the collector saw them.
        let unparsable = problems.problems
        guard unparsable.isEmpty, invalid.isEmpty else {
            throw ConfigurationError(problems: unparsable + invalid)
        }
        self = configuration
    }

    /// Tokens that come from documentation or examples, or are too short to be secret.
    static func isPlaceholder(_ token: String) -> Bool {
        let lowered = token.lowercased()
        return token.count < 16
            || ["change", "replace", "example", "placeholder", "your-token", "secret-token", "xxxx"].contains {
                lowered.contains($0)
            }
    }
}

/// Collects the keys whose value a provider had but that did not convert to the requested type; the
/// non-throwing `ConfigReader` methods would otherwise fall back to the default silently.
final class ProblemCollector: AccessReporter, Sendable {
    private let collected = Mutex<[String]>([])

    var problems: [String] { self.collected.withLock { $0 } }

    func report(_ event: AccessEvent) {
        let key = event.metadata.key.components.joined(separator: ".")
        var problem: String?
        if event.conversionError != nil {
            problem = "\(key): the value has the wrong type (expected \(event.metadata.valueType))"
        }
        for result in event.providerResults {
            if case .failure(let error) = result.result {
                problem = "\(key): \(result.providerName): \(error)"
            }
        }
        if let problem {
            self.collected.withLock { if !$0.contains(problem) { $0.append(problem) } }
        }
    }
}
