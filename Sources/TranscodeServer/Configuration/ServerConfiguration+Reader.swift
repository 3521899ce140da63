import ArgumentParser
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
            unknown.append("\(path): unknown key \(key)")
        }
        let variables = Set(known.map(Self.environmentName))
        for name in environment.keys.sorted() where name.hasPrefix("TRANSCODE_") && !variables.contains(name) {
            unknown.append("\(name): no configuration key has this environment variable")
        }
        let flags = Set(known.map(Self.flagName))
        for argument in arguments where argument.hasPrefix("--") {
            var name = String(argument.prefix { $0 != "=" })
            if name.hasPrefix("--no-"), flags.contains("--" + name.dropFirst(5)) { name = "--" + name.dropFirst(5) }
            if !flags.contains(name) {
                unknown.append("\(name): unknown flag")
            }
        }
        return unknown
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

    /// Reads every key from `reader`, keeping the default for the ones not set.
    ///
    /// Keys (defaults in `config/transcode-server.json` and the README):
    /// `host`, `port`, `cache.directory`, `cache.maxBytes`, `cache.minFreeBytes`, `cache.urlTTLSeconds`,
    /// `cache.staleIfErrorSeconds`, `download.maxBytes`,
    /// `download.connectTimeoutSeconds`, `download.timeoutSeconds`, `download.maxRedirects`,
    /// `download.allowLoopback`, `download.allowedHosts`, `transcode.workers` (0: one per core),
    /// `transcode.queueLength`, `transcode.syncWaitSeconds`, `transcode.background`, `transcode.crf`,
    /// `transcode.preset`, `transcode.threads`, `transcode.maxOutputWidth`, `transcode.maxOutputHeight`, `transcode.maxSizeRatio`,
    /// `transcode.maxExtraAttempts`, `transcode.minSSIM`,
    /// `limits.maxInputBytes`, `limits.maxWidth`, `limits.maxHeight`, `limits.maxFrames`,
    /// `limits.maxTotalPixels`, `http.maxBodyBytes`, `http.idleTimeoutSeconds`, `http.headerTimeoutSeconds`, `http.bodyTimeoutSeconds`, `http.publicBaseURL`, `http.mediaMaxAgeSeconds`,
    /// `http.sourceMaxAgeSeconds`, `http.sourceAnswer`, `signing.keys`, `signing.salts`, `signing.disabled`,
    /// `cors.allowedOrigins`, `auth.tokens`, `log.level`, `log.format`,
    /// `shutdown.graceSeconds`, `rewrite.maxBodyBytes`, `rewrite.maxGifs`, `batch.maxUrls`, `webhooks.secrets`,
    /// `webhooks.firstRetrySeconds`, `webhooks.maxRetrySeconds`, `storage.kind`, `storage.s3.endpoint`, `storage.s3.bucket`, `storage.s3.region`,
    /// `storage.s3.pathStyle`, `storage.s3.timeoutSeconds`, `storage.s3.serve`, `storage.s3.presignSeconds`,
    /// `storage.s3.createBucket`, `storage.s3.tombstoneCheckSeconds`; S3 credentials from `environment`
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), never from a file or a flag.
    /// - Throws: `ConfigurationError` naming each key whose value does not parse or is out of range.
    init(
        reader: ConfigReader, problems: ProblemCollector = ProblemCollector(), environment: [String: String] = [:]
    ) throws {
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
        configuration.cacheMinFreeBytes = Int64(
            reader.int(forKey: "cache.minFreeBytes", default: Int(configuration.cacheMinFreeBytes)))
        check("cache.minFreeBytes", configuration.cacheMinFreeBytes >= 0, "0 or more")
        configuration.urlTTLSeconds = reader.double(forKey: "cache.urlTTLSeconds", default: configuration.urlTTLSeconds)
        check("cache.urlTTLSeconds", configuration.urlTTLSeconds >= 0, "0 or more")
        configuration.staleIfErrorSeconds = reader.double(
            forKey: "cache.staleIfErrorSeconds", default: configuration.staleIfErrorSeconds)
        check("cache.staleIfErrorSeconds", configuration.staleIfErrorSeconds >= 0, "0 or more")

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
        options.maxSizeRatio = reader.double(forKey: "transcode.maxSizeRatio", default: options.maxSizeRatio)
        check("transcode.maxSizeRatio", options.maxSizeRatio > 0 && options.maxSizeRatio.isFinite, "positive")
        options.maxExtraAttempts = reader.int(forKey: "transcode.maxExtraAttempts", default: options.maxExtraAttempts)
        check("transcode.maxExtraAttempts", (0...10).contains(options.maxExtraAttempts), "0-10")
        options.minSSIM = reader.double(forKey: "transcode.minSSIM", default: options.minSSIM)
        check("transcode.minSSIM", (0...1).contains(options.minSSIM), "0-1")
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
        configuration.bodyTimeoutSeconds = reader.double(
            forKey: "http.bodyTimeoutSeconds", default: configuration.bodyTimeoutSeconds)
        check("http.bodyTimeoutSeconds", configuration.bodyTimeoutSeconds > 0, "positive")

        configuration.authTokens = reader.stringArray(forKey: "auth.tokens", isSecret: true, default: [])
        // An empty token must not switch authentication off (`--auth-tokens ''`), and one with spaces could
        // never match a header.
        if configuration.authTokens.contains(where: { $0.contains(where: \.isWhitespace) || $0.isEmpty }) {
            invalid.append("auth.tokens: an empty token or one with whitespace is refused")
            configuration.authTokens.removeAll { $0.contains(where: \.isWhitespace) || $0.isEmpty }
        }
        for token in configuration.authTokens where Self.isPlaceholder(token) {
            invalid.append(
                "auth.tokens: a placeholder token (\(token.prefix(4))...) is refused; use at least 16 random characters"
            )
        }

        configuration.publicBaseURL = reader.string(forKey: "http.publicBaseURL", default: "")
        while configuration.publicBaseURL.hasSuffix("/") { configuration.publicBaseURL.removeLast() }
        if !configuration.publicBaseURL.isEmpty {
            let url = URL(string: configuration.publicBaseURL)
            check(
                "http.publicBaseURL",
                ["http", "https"].contains(url?.scheme?.lowercased() ?? "") && url?.host != nil && url?.query == nil,
                "an absolute http(s) URL such as https://media.example.com")
        }
        configuration.mediaMaxAgeSeconds = reader.int(
            forKey: "http.mediaMaxAgeSeconds", default: configuration.mediaMaxAgeSeconds)
        check("http.mediaMaxAgeSeconds", configuration.mediaMaxAgeSeconds >= 0, "0 or more")
        configuration.sourceMaxAgeSeconds = reader.int(
            forKey: "http.sourceMaxAgeSeconds", default: configuration.sourceMaxAgeSeconds)
        check("http.sourceMaxAgeSeconds", configuration.sourceMaxAgeSeconds >= 0, "0 or more")
        let answer = reader.string(forKey: "http.sourceAnswer", default: configuration.sourceAnswer.rawValue)
        if let parsed = SourceController<AppRequestContext>.Answer(rawValue: answer) {
            configuration.sourceAnswer = parsed
        } else {
            invalid.append("http.sourceAnswer: must be bytes or redirect, got \(answer)")
        }

        configuration.signingKeys = reader.stringArray(forKey: "signing.keys", isSecret: true, default: [])
        configuration.signingSalts = reader.stringArray(forKey: "signing.salts", isSecret: true, default: [])
        configuration.signingDisabled = reader.bool(forKey: "signing.disabled", default: false)
        if configuration.signingKeys.count != configuration.signingSalts.count {
            invalid.append(
                "signing.keys, signing.salts: \(configuration.signingKeys.count) keys and "
                    + "\(configuration.signingSalts.count) salts; they are paired by position")
        } else if URLSigner(hexKeys: configuration.signingKeys, hexSalts: configuration.signingSalts) == nil {
            invalid.append("signing.keys, signing.salts: must be hex digits")
        }
        for key in configuration.signingKeys where key.utf8.count < 32 || Self.isPlaceholder(key) {
            invalid.append(
                "signing.keys: a key of \(key.utf8.count / 2) bytes (\(key.prefix(4))...) is refused; "
                    + "use at least 16 random bytes (openssl rand -hex 32)")
        }

        configuration.corsAllowedOrigins = reader.stringArray(forKey: "cors.allowedOrigins", default: [])
            .filter { !$0.isEmpty }

        configuration.logFormat = reader.string(forKey: "log.format", default: configuration.logFormat)
        check("log.format", ["text", "json"].contains(configuration.logFormat), "text or json")
        let level = reader.string(forKey: "log.level", default: configuration.logLevel.rawValue)
        if let parsed = Logger.Level(rawValue: level.lowercased()) {
            configuration.logLevel = parsed
        } else {
            invalid.append("log.level: must be one of trace, debug, info, notice, warning, error, critical")
        }
        configuration.shutdownGraceSeconds = reader.double(
            forKey: "shutdown.graceSeconds", default: configuration.shutdownGraceSeconds)
        check("shutdown.graceSeconds", configuration.shutdownGraceSeconds >= 0, "0 or more")

        configuration.webhookSecrets = reader.stringArray(forKey: "webhooks.secrets", isSecret: true, default: [])
            .filter { !$0.isEmpty }
        if WebhookSigner(secrets: configuration.webhookSecrets) == nil {
            invalid.append("webhooks.secrets: each must be whsec_ + base64 (or base64) of 16 bytes or more")
        }
        configuration.webhookFirstRetrySeconds = reader.double(
            forKey: "webhooks.firstRetrySeconds", default: configuration.webhookFirstRetrySeconds)
        check("webhooks.firstRetrySeconds", configuration.webhookFirstRetrySeconds > 0, "positive")
        configuration.webhookMaxRetrySeconds = reader.double(
            forKey: "webhooks.maxRetrySeconds", default: configuration.webhookMaxRetrySeconds)
        check("webhooks.maxRetrySeconds", configuration.webhookMaxRetrySeconds >= 0, "0 or more")
        configuration.batchMaxURLs = reader.int(forKey: "batch.maxUrls", default: configuration.batchMaxURLs)
        check("batch.maxUrls", configuration.batchMaxURLs > 0, "positive")
        configuration.rewriteMaxBodyBytes = reader.int(
            forKey: "rewrite.maxBodyBytes", default: configuration.rewriteMaxBodyBytes)
        check("rewrite.maxBodyBytes", configuration.rewriteMaxBodyBytes > 0, "positive")
        configuration.rewriteMaxGIFs = reader.int(forKey: "rewrite.maxGifs", default: configuration.rewriteMaxGIFs)
        check("rewrite.maxGifs", configuration.rewriteMaxGIFs > 0, "positive")

        let kind = reader.string(forKey: "storage.kind", default: configuration.storage.kind.rawValue)
        let endpoint = reader.string(forKey: "storage.s3.endpoint", default: "")
        let bucket = reader.string(forKey: "storage.s3.bucket", default: "")
        let region = reader.string(forKey: "storage.s3.region", default: "us-east-1")
        let pathStyle = reader.bool(forKey: "storage.s3.pathStyle", default: true)
        let timeout = reader.double(forKey: "storage.s3.timeoutSeconds", default: 10)
        check("storage.s3.timeoutSeconds", timeout > 0, "positive")
        let serve = reader.string(forKey: "storage.s3.serve", default: configuration.storage.serve.rawValue)
        configuration.storage.presignSeconds = reader.int(
            forKey: "storage.s3.presignSeconds", default: configuration.storage.presignSeconds)
        check(
            "storage.s3.presignSeconds", (60...604_800).contains(configuration.storage.presignSeconds),
            "between 60 and 604800 (S3's limit)")
        configuration.storage.createBucket = reader.bool(forKey: "storage.s3.createBucket", default: false)
        configuration.storage.tombstoneCheckSeconds = reader.double(
            forKey: "storage.s3.tombstoneCheckSeconds", default: configuration.storage.tombstoneCheckSeconds)
        check("storage.s3.tombstoneCheckSeconds", configuration.storage.tombstoneCheckSeconds >= 0, "0 or more")
        if let parsed = StorageConfiguration.Serve(rawValue: serve) {
            configuration.storage.serve = parsed
        } else {
            invalid.append("storage.s3.serve: must be local or redirect, got \(serve)")
        }
        switch StorageConfiguration.Kind(rawValue: kind) {
        case .disk:
            configuration.storage.kind = .disk
        case .s3:
            configuration.storage.kind = .s3
            let url = URL(string: endpoint)
            if url?.host == nil || !["http", "https"].contains(url?.scheme ?? "") {
                invalid.append("storage.s3.endpoint: must be an http(s) URL, e.g. http://127.0.0.1:8333")
            }
            check("storage.s3.bucket", !bucket.isEmpty, "the bucket's name")
            let accessKey = environment["AWS_ACCESS_KEY_ID"] ?? ""
            let secretKey = environment["AWS_SECRET_ACCESS_KEY"] ?? ""
            if accessKey.isEmpty || secretKey.isEmpty {
                invalid.append(
                    "storage.kind: s3 needs credentials in the environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                )
            }
            if let url {
                configuration.storage.s3 = S3Configuration(
                    endpoint: url, bucket: bucket, region: region, pathStyle: pathStyle, accessKey: accessKey,
                    secretKey: secretKey, sessionToken: environment["AWS_SESSION_TOKEN"], timeoutSeconds: timeout)
            }
        case nil:
            invalid.append("storage.kind: must be disk or s3, got \(kind)")
        }

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
