import ArgumentParser
import Configuration
import Foundation
import Logging
import Synchronization
import SystemPackage
import TranscodeCore
import TranscodeHTTP
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
        // Other spellings of a variable or flag by word boundaries (`TRANSCODE_CACHE_URL_TTL_SECONDS`) read as the
        // key's own (`..._URL_TTLSECONDS`).
        let keys = Self.allKeys
        let environment = Self.canonicalEnvironment(environment, keys: keys)
        let arguments = Self.canonicalArguments(arguments, keys: keys)
        var providers: [any ConfigProvider] = [
            CommandLineArgumentsProvider(arguments: ["transcode-server"] + arguments),
            EnvironmentVariablesProvider(environmentVariables: environment).prefixKeys(with: "transcode"),
        ]
        let path = filePath ?? Self.defaultFilePath
        // Parsed here too, to name what is wrong in plain words and to find keys nobody reads.
        var fileKeys: [String] = []
        if let data = FileManager.default.contents(atPath: path) {
            do {
                fileKeys = Self.dottedKeys(try JSONSerialization.jsonObject(with: data))
            } catch {
                let reason = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String ?? "\(error)"
                throw ConfigurationError(problems: ["\(path): not valid JSON: \(reason)"])
            }
        } else if filePath != nil {
            throw ConfigurationError(problems: ["\(path): cannot read the file"])
        }
        do {
            providers.append(
                try await FileProvider<JSONSnapshot>(filePath: FilePath(path), allowMissing: filePath == nil))
        } catch {
            throw ConfigurationError(problems: ["\(path): \(error)"])
        }
        let problems = ProblemCollector()
        let reader = ConfigReader(providers: providers, accessReporter: problems)
        let configuration: ServerConfiguration
        do {
            configuration = try ServerConfiguration(reader: reader, problems: problems, environment: environment)
        } catch let error as ConfigurationError {
            throw ConfigurationError(
                problems: error.problems
                    + Self.unknownSettings(
                        known: problems.keysRead, fileKeys: fileKeys, path: path, arguments: arguments,
                        environment: environment))
        }
        let unknown = Self.unknownSettings(
            known: problems.keysRead, fileKeys: fileKeys, path: path, arguments: arguments, environment: environment)
        guard unknown.isEmpty else { throw ConfigurationError(problems: unknown) }
        return configuration
    }

    /// `load` from the process environment for a command: an invalid configuration is printed on standard
    /// error and ends the process with exit code 78 (EX_CONFIG).
    static func loadForCommand(filePath: String?, arguments: [String]) async throws -> ServerConfiguration {
        do {
            return try await Self.load(
                filePath: filePath, arguments: arguments, environment: ProcessInfo.processInfo.environment)
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("transcode-server: \(error)\n".utf8))
            throw ExitCode(78)  // EX_CONFIG
        }
    }

    /// Settings that name no configuration key: a file key, a `TRANSCODE_` variable or a flag that nothing
    /// reads is a typo that would otherwise be ignored silently.
    static func unknownSettings(
        known: Set<String>, fileKeys: [String], path: String, arguments: [String], environment: [String: String]
    ) -> [String] {
        var unknown: [String] = []
        for key in fileKeys where !known.contains(key) {
            unknown.append("\(path): unknown key \(key)" + NearestName.hint(for: key, among: known))
        }
        let variables = Set(known.map(Self.environmentName))
        for name in environment.keys.sorted() where name.hasPrefix("TRANSCODE_") && !variables.contains(name) {
            unknown.append(
                "\(name): no configuration key has this environment variable"
                    + NearestName.hint(for: name, among: variables))
        }
        let flags = Set(known.map(Self.flagName))
        for argument in arguments where argument.hasPrefix("--") {
            var name = String(argument.prefix { $0 != "=" })
            if name.hasPrefix("--no-"), flags.contains("--" + name.dropFirst(5)) { name = "--" + name.dropFirst(5) }
            if !flags.contains(name) {
                unknown.append("\(name): unknown flag" + NearestName.hint(for: name, among: flags))
            }
        }
        return unknown
    }

    /// Every configuration key: those a reading of the defaults asks for (every key is read whatever is set).
    static let allKeys: Set<String> = {
        let collector = ProblemCollector()
        let reader = ConfigReader(providers: [InMemoryProvider(values: [:])], accessReporter: collector)
        _ = try? ServerConfiguration(reader: reader, problems: collector)
        return collector.keysRead
    }()

    /// A name with its separators taken out, upper-cased: how two spellings of one key's variable or flag compare.
    private static func squashed(_ name: some StringProtocol) -> String {
        String(name.filter { $0 != "_" && $0 != "-" }).uppercased()
    }

    /// `environment` with each `TRANSCODE_` variable spelt otherwise than its key's own name, but with the same
    /// letters (`TRANSCODE_CACHE_URL_TTL_SECONDS` for `TRANSCODE_CACHE_URL_TTLSECONDS`), under the key's name;
    /// the key's own spelling wins when both are set.
    static func canonicalEnvironment(_ environment: [String: String], keys: Set<String>) -> [String: String] {
        let names = Dictionary(keys.map { (Self.squashed(Self.environmentName($0)), Self.environmentName($0)) }) {
            a, _ in a
        }
        var result = environment
        for (name, value) in environment where name.hasPrefix("TRANSCODE_") {
            guard let own = names[Self.squashed(name)], own != name else { continue }
            result[name] = nil
            if environment[own] == nil { result[own] = value }
        }
        return result
    }

    /// `arguments` with each flag spelt by other word boundaries than its key's (`--cache-url-ttl-seconds`)
    /// rewritten to the key's (`--cache-url-ttlseconds`), `--no-` and `=value` kept.
    static func canonicalArguments(_ arguments: [String], keys: Set<String>) -> [String] {
        let flags = Dictionary(keys.map { (Self.squashed(Self.flagName($0)), Self.flagName($0)) }) { a, _ in a }
        return arguments.map { argument in
            guard argument.hasPrefix("--") else { return argument }
            let name = argument.prefix { $0 != "=" }
            let rest = argument.dropFirst(name.count)
            if let own = flags[Self.squashed(name)] { return own + rest }
            if name.hasPrefix("--no-"), let own = flags[Self.squashed(name.dropFirst(5))] {
                return "--no-" + own.dropFirst(2) + rest
            }
            return argument
        }
    }

    /// `cache.maxBytes` -> `TRANSCODE_CACHE_MAX_BYTES`.
    static func environmentName(_ key: String) -> String {
        "TRANSCODE_" + Self.words(key).joined(separator: "_").uppercased()
    }

    /// `cache.maxBytes` -> `--cache-max-bytes`.
    static func flagName(_ key: String) -> String {
        "--" + Self.words(key).joined(separator: "-").lowercased()
    }

    private static func words(_ key: String) -> [String] {
        key.split(separator: ".").flatMap { component in
            // A word starts at an upper-case letter that follows a lower-case one, as swift-configuration's
            // providers read keys (`publicBaseURL` is `--http-public-base-url`, `HTTP_PUBLIC_BASE_URL`).
            var words: [String] = [""]
            var previous: Character?
            for character in component {
                if character.isUppercase, previous?.isLowercase == true { words.append("") }
                words[words.count - 1].append(character)
                previous = character
            }
            return words
        }
    }

    /// The dotted paths of a JSON object's leaves (arrays are values).
    static func dottedKeys(_ value: Any, prefix: String = "") -> [String] {
        guard let object = value as? [String: Any] else { return prefix.isEmpty ? [] : [prefix] }
        return object.keys.sorted().flatMap { key in
            Self.dottedKeys(object[key]!, prefix: prefix.isEmpty ? key : prefix + "." + key)
        }
    }

    /// Reads every key from `reader`, domain by domain (each from its own section, by its own type), keeping
    /// the default for the ones not set. The keys, with their defaults, are in `config/transcode-server.json`
    /// and docs/configuration.md; S3 credentials come from `environment` (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`), never from a file or a flag.
    /// - Throws: `ConfigurationError` naming each key whose value does not parse or is out of range.
    init(
        reader: ConfigReader, problems: ProblemCollector = ProblemCollector(), environment: [String: String] = [:]
    ) throws {
        let root = ConfigSection(root: reader)
        self.init()
        self.host = reader.string(forKey: "host", default: self.host)
        self.port = reader.int(forKey: "port", default: self.port)
        root.check("port", (0...65535).contains(self.port), "0-65535")
        self.cache = CacheConfiguration(root.section("cache"))
        self.download = DownloadConfiguration(root.section("download"))
        self.transcode = TranscodeConfiguration(transcode: root.section("transcode"), limits: root.section("limits"))
        self.http = HTTPConfiguration(root.section("http"))

        self.authTokens = reader.stringArray(forKey: "auth.tokens", isSecret: true, default: self.authTokens)
        // An empty token must not switch authentication off (`--auth-tokens ''`), and one with spaces could
        // never match a header.
        if self.authTokens.contains(where: { $0.contains(where: \.isWhitespace) || $0.isEmpty }) {
            root.refuse("auth.tokens", "an empty token or one with whitespace is refused")
            self.authTokens.removeAll { $0.contains(where: \.isWhitespace) || $0.isEmpty }
        }
        for token in self.authTokens where ConfigSection.isPlaceholder(token) {
            root.refuse(
                "auth.tokens",
                "a placeholder token (\(token.prefix(4))...) is refused; use at least 16 random characters")
        }

        self.authClients = root.clientNames(
            "auth.clients", count: self.authTokens.count, credentials: "tokens", prefix: "token")
        self.signing = SigningConfiguration(root.section("signing"))
        self.quota = QuotaConfiguration(
            root.section("quota"), clients: Set(self.authClients + self.signing.clients))
        self.corsAllowedOrigins = reader.stringArray(forKey: "cors.allowedOrigins", default: self.corsAllowedOrigins)
            .filter { !$0.isEmpty }
        self.log = LogConfiguration(root.section("log"))
        self.tracing = TracingConfiguration(root.section("tracing"))
        self.shutdownGraceSeconds = reader.double(forKey: "shutdown.graceSeconds", default: self.shutdownGraceSeconds)
        root.check("shutdown.graceSeconds", self.shutdownGraceSeconds >= 0, "0 or more")
        self.shutdownDrainSeconds = reader.double(forKey: "shutdown.drainSeconds", default: self.shutdownDrainSeconds)
        root.check("shutdown.drainSeconds", (0...3600).contains(self.shutdownDrainSeconds), "0 to 3600")
        self.webhooks = WebhookConfiguration(root.section("webhooks"))
        // A callback is a request the server makes to an address its client names: only for clients that
        // authenticated (the SSRF policy and the delivery cap bound the rest).
        if !self.webhooks.secrets.isEmpty, self.authTokens.isEmpty {
            root.refuse(
                "webhooks.secrets",
                "callbacks need auth.tokens: without a token anyone who reaches the server could have it send requests")
        }
        self.batchMaxURLs = reader.int(forKey: "batch.maxUrls", default: self.batchMaxURLs)
        root.check("batch.maxUrls", self.batchMaxURLs > 0, "positive")
        self.batchRetentionSeconds = reader.double(
            forKey: "batch.retentionSeconds", default: self.batchRetentionSeconds)
        root.check("batch.retentionSeconds", self.batchRetentionSeconds > 0, "positive")
        self.rewrite = RewriteConfiguration(root.section("rewrite"))
        self.storage = StorageConfiguration(root.section("storage"), environment: environment)
        self.queue = QueueConfiguration(root.section("queue"), environment: environment)

        // Values that did not parse at all (a word where a number belongs) fell back to their defaults
        // above; the collector saw them.
        let unparsable = problems.problems
        guard unparsable.isEmpty, root.problems.isEmpty else {
            throw ConfigurationError(problems: unparsable + root.problems)
        }
    }
}

/// Collects the keys whose value a provider had but that did not convert to the requested type; the
/// non-throwing `ConfigReader` methods would otherwise fall back to the default silently.
/// It also records every key read, which is the set of known keys.
final class ProblemCollector: AccessReporter, Sendable {
    private let collected = Mutex<(problems: [String], keys: Set<String>)>(([], []))

    var problems: [String] { self.collected.withLock { $0.problems } }
    var keysRead: Set<String> { self.collected.withLock { $0.keys } }

    func report(_ event: AccessEvent) {
        let key = event.metadata.key.components.joined(separator: ".")
        var problem: String?
        let failed = event.providerResults.contains {
            if case .failure = $0.result { return true }
            return false
        }
        if event.conversionError != nil || failed {
            problem = "\(key): expected \(Self.plainWords(for: "\(event.metadata.valueType)"))"
        }
        self.collected.withLock {
            $0.keys.insert(key)
            if let problem, !$0.problems.contains(problem) { $0.problems.append(problem) }
        }
    }

    /// The configuration type in words an operator reads.
    static func plainWords(for type: String) -> String {
        switch type {
        case "int": "a whole number"
        case "double": "a number"
        case "bool": "true or false"
        case "string": "a text value"
        case "stringArray": "a list of text values (comma-separated in a flag or variable)"
        default: "a value of type \(type)"
        }
    }
}
