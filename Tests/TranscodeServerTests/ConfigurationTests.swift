import ArgumentParser
import Foundation
import TestSupport
import Testing
import Transcoder

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.unit), .timeLimit(.minutes(10))) struct ConfigurationTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The committed file states every default: loading it changes nothing, in any domain.
    @Test func committedFileHoldsTheDefaults() async throws {
        let path = Self.repositoryRoot.appendingPathComponent("config/transcode-server.json").path
        let loaded = try await ServerConfiguration.load(filePath: path, arguments: [], environment: [:])
        #expect(loaded == ServerConfiguration())
        #expect(loaded.transcode.workers == ProcessInfo.processInfo.activeProcessorCount)
    }

    /// Another valid value for each key of the committed file, as its `TRANSCODE_` variable (arrays
    /// comma-separated); nil for the keys handled in `everyKeyIsReadIntoTheConfiguration`'s S3 baseline.
    static func otherValue(_ key: String, _ value: Any) -> String? {
        let special: [String: String] = [
            "host": "::1", "cache.directory": "./elsewhere", "transcode.workers": "7",
            "transcode.background": "#000000",
            "transcode.preset": "slow", "transcode.minSSIM": "0.5", "http.publicBaseURL": "https://media.example.com",
            "http.sourceAnswer": "redirect", "log.level": "debug", "log.format": "json",
            "download.allowedHosts": "gifs.example.com", "auth.tokens": "a-bearer-token-of-some-length",
            "signing.keys": String(repeating: "0f", count: 32), "signing.salts": String(repeating: "f0", count: 32),
            "cors.allowedOrigins": "https://cms.example.com",
            "webhooks.secrets": "whsec_" + Data(repeating: 7, count: 24).base64EncodedString(),
            "storage.s3.serve": "redirect", "storage.s3.endpoint": "http://127.0.0.1:2", "storage.s3.bucket": "other",
            "storage.s3.region": "eu-west-1", "download.allowLoopback": "true", "signing.disabled": "true",
            "storage.s3.pathStyle": "false", "storage.s3.createBucket": "true", "tracing.enabled": "true",
            "tracing.propagate": "true", "tracing.sampleRatio": "0.5",
            "tracing.endpoint": "http://127.0.0.1:9/v1/traces",
            "tracing.batchDelaySeconds": "1", "http.answerAhead": "false",
        ]
        if key == "storage.kind" { return nil }
        if let text = special[key] { return text }
        // Numbers: one more (the booleans are named above).
        guard let number = value as? NSNumber else { return nil }
        return number.stringValue.contains(".") ? String(number.doubleValue + 1) : String(number.int64Value + 1)
    }

    /// Each key of the committed file is read into the configuration: another value for it alone gives another
    /// configuration. Keys are read domain by domain, each by its own type, so a key read under the wrong name or
    /// into nothing would otherwise pass unnoticed.
    @Test func everyKeyIsReadIntoTheConfiguration() async throws {
        let path = Self.repositoryRoot.appendingPathComponent("config/transcode-server.json").path
        let json = try JSONSerialization.jsonObject(with: try Data(contentsOf: URL(fileURLWithPath: path)))
        func leaves(_ value: Any, _ prefix: String) -> [(String, Any)] {
            guard let object = value as? [String: Any] else { return [(prefix, value)] }
            return object.keys.sorted().flatMap { leaves(object[$0]!, prefix.isEmpty ? $0 : prefix + "." + $0) }
        }
        // The S3 keys other than those a disk node keeps count only with `storage.kind: s3`.
        let s3Only = [
            "storage.s3.endpoint", "storage.s3.bucket", "storage.s3.region", "storage.s3.pathStyle",
            "storage.s3.timeoutSeconds",
        ]
        let s3 = [
            "TRANSCODE_STORAGE_KIND": "s3", "TRANSCODE_STORAGE_S3_ENDPOINT": "http://127.0.0.1:1",
            "TRANSCODE_STORAGE_S3_BUCKET": "bucket", "AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret",
        ]
        let disk = try await ServerConfiguration.load(filePath: path, arguments: [], environment: [:])
        let s3Baseline = try await ServerConfiguration.load(filePath: path, arguments: [], environment: s3)
        #expect(s3Baseline != disk)
        var checked = 0
        for (key, value) in leaves(json, "") {
            guard let other = Self.otherValue(key, value) else { continue }
            var environment = s3Only.contains(key) ? s3 : [:]
            environment[ServerConfiguration.environmentName(key)] = other
            // Paired by position: one without the other is refused.
            if key == "signing.keys" { environment["TRANSCODE_SIGNING_SALTS"] = String(repeating: "f0", count: 32) }
            if key == "signing.salts" { environment["TRANSCODE_SIGNING_KEYS"] = String(repeating: "0f", count: 32) }
            // Callbacks need a token.
            if key == "webhooks.secrets" { environment["TRANSCODE_AUTH_TOKENS"] = "a-bearer-token-of-some-length" }
            let changed = try await ServerConfiguration.load(filePath: path, arguments: [], environment: environment)
            #expect(changed != (s3Only.contains(key) ? s3Baseline : disk), "\(key)=\(other) changed nothing")
            checked += 1
        }
        #expect(checked >= 60)
    }

    /// `transcode-server config` describes every key the server reads, and only those (issue 55: the 60-odd keys,
    /// their environment names and defaults were only in docs/configuration.md); its descriptions are the table's
    /// rows, key for key (`scripts/config-keys` writes them), and the binary prints them with each key's variable and
    /// flag, as the server reads them.
    @Test(.tags(.childProcess)) func theBinaryDescribesEveryKey() async throws {
        let described = ConfigurationKeys.all.map(\.name)
        #expect(Set(described).count == described.count)
        #expect(
            Set(described) == ServerConfiguration.allKeys,
            "read but not described: \(ServerConfiguration.allKeys.subtracting(described).sorted()); described but not read: \(Set(described).subtracting(ServerConfiguration.allKeys).sorted())"
        )
        let script = ConfigurationTests.repositoryRoot.appendingPathComponent("scripts/config-keys").path
        // The script's reading of the table, against the committed file it wrote.
        let source = Self.repositoryRoot.appendingPathComponent(
            "Sources/TranscodeServer/Configuration/ConfigurationKeys.swift"
        ).path
        let check = try await runProcess(
            "/usr/bin/python3",
            [
                "-c",
                "import importlib.machinery, json, sys; m = importlib.machinery.SourceFileLoader('k', sys.argv[1]).load_module(); print(json.dumps(list(m.rows())))",
                script,
            ], timeout: .seconds(60))
        #expect(check.status == 0, "\(check.stderr)")
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(check.stdout.utf8)) as? [[String]])
        #expect(
            rows == ConfigurationKeys.all.map { [$0.name, $0.defaultValue, $0.meaning] },
            "docs/configuration.md and \(source) differ: run scripts/config-keys")
        let binary = try OperationsTests.debugBinary()
        let listed = try await runProcess(binary, ["config", "--json"], timeout: .seconds(60))
        #expect(listed.status == 0, "\(listed.stderr)")
        let lines = listed.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: String]
        }
        #expect(lines.map { $0["key"] ?? "" } == described)
        let cacheBytes = try #require(lines.first { $0["key"] == "cache.maxBytes" })
        #expect(cacheBytes["environment"] == "TRANSCODE_CACHE_MAX_BYTES")
        #expect(cacheBytes["flag"] == "--cache-max-bytes")
        #expect(cacheBytes["default"] == "10737418240")
        let text = try await runProcess(binary, ["config", "storage.s3"], timeout: .seconds(60))
        #expect(
            text.stdout.contains("storage.s3.bucket  TRANSCODE_STORAGE_S3_BUCKET  --storage-s3-bucket  default \"\""))
        #expect(!text.stdout.contains("cache.maxBytes"))
    }

    /// The configuration table of docs/configuration.md lists every key of the committed file (which holds the defaults, above)
    /// with the same default, and no key the file lacks.
    @Test func readmeTableIsTheCommittedFile() throws {
        /// A JSON value as the configuration table writes it.
        enum Value: Decodable {
            case text(String)
            case object([String: Value])

            init(from decoder: any Decoder) throws {
                let container = try decoder.singleValueContainer()
                if let object = try? container.decode([String: Value].self) {
                    self = .object(object)
                } else if let flag = try? container.decode(Bool.self) {
                    self = .text(flag ? "true" : "false")
                } else if let number = try? container.decode(Double.self) {
                    self = .text(String(number))
                } else if let text = try? container.decode(String.self) {
                    self = .text(text.isEmpty ? "\"\"" : text)
                } else {
                    let array = try container.decode([String].self)
                    self = .text(array.isEmpty ? "[]" : "\(array)")
                }
            }
        }
        let path = Self.repositoryRoot.appendingPathComponent("config/transcode-server.json").path
        let root = try JSONDecoder().decode(Value.self, from: try Data(contentsOf: URL(fileURLWithPath: path)))
        var file: [String: String] = [:]
        func flatten(_ value: Value, _ prefix: String) {
            switch value {
            case .text(let text): file[prefix] = text
            case .object(let object):
                for (key, inner) in object { flatten(inner, prefix.isEmpty ? key : prefix + "." + key) }
            }
        }
        flatten(root, "")
        var table: [String: String] = [:]
        let readme = try PackagingTests.read("docs/configuration.md")
        for line in readme.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 2 else { continue }
            let keys = cells[0].components(separatedBy: " / ").map {
                $0.trimmingCharacters(in: CharacterSet(charactersIn: " `"))
            }
            let values = cells[1].components(separatedBy: " / ").map {
                $0.trimmingCharacters(in: CharacterSet(charactersIn: " `"))
            }
            // Configuration keys only: dotted lower camel (other tables hold routes and numbers).
            guard keys.allSatisfy({ !$0.isEmpty && $0.allSatisfy { $0.isLetter || $0.isNumber || $0 == "." } }),
                keys.first?.contains(".") == true || ["host", "port"].contains(keys.first ?? ""),
                keys.count == values.count
            else { continue }
            let section = keys[0].split(separator: ".").dropLast().joined(separator: ".")
            for (key, value) in zip(keys, values) {
                table[key.contains(".") || section.isEmpty ? key : section + "." + key] = value
            }
        }
        #expect(
            Set(table.keys) == Set(file.keys),
            "only in the file: \(Set(file.keys).subtracting(table.keys).sorted()); only in docs/configuration.md: \(Set(table.keys).subtracting(file.keys).sorted())"
        )
        for (key, value) in file.sorted(by: { $0.key < $1.key }) where table[key] != nil {
            // Numbers as numbers: the file's 1.0 and 30 are the table's 1.0 and 30.
            let same = Double(value).map { Double(table[key] ?? "") == $0 } ?? (table[key] == value)
            #expect(same, "\(key): docs/configuration.md says \(table[key] ?? "-"), the file \(value)")
        }
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
            #expect(loaded.cache.maxBytes == 2000)
            #expect(loaded.transcode.options.crf == 30)
            #expect(loaded.transcode.options.preset == "slow")
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
        (["--auth-tokens", ""], "auth.tokens"),
        (["--auth-tokens", "   "], "auth.tokens"),
        (["--no-such-flag", "1"], "--no-such-flag"),
        (["--cache-max-byte=5"], "--cache-max-byte"),
        (["--storage-kind", "nfs"], "storage.kind"),
        (["--storage-kind", "s3", "--storage-s3-bucket", "b"], "storage.s3.endpoint"),
        (["--storage-kind", "s3", "--storage-s3-endpoint", "http://127.0.0.1:8333"], "storage.s3.bucket"),
        (["--storage-s3-serve", "proxy"], "storage.s3.serve"),
        (["--storage-s3-presign-seconds", "10"], "storage.s3.presignSeconds"),
        // Clients and quotas: a policy that does not parse, a name that is no client, two entries for one name,
        // names without tokens or keys to pair with, a name that cannot be a label or is reserved.
        (["--quota-limits", "cms=5"], "quota.limits"),
        (["--quota-limits", "nobody=1/2"], "quota.limits"),
        (["--quota-limits", "open=1/2,open=2/2"], "quota.limits"),
        (["--auth-clients", "cms"], "auth.clients"),
        (["--auth-tokens", "a-bearer-token-of-some-length", "--auth-clients", "Not A Name"], "auth.clients"),
        (["--auth-tokens", "a-bearer-token-of-some-length", "--auth-clients", "open"], "auth.clients"),
        (["--signing-clients", "site"], "signing.clients"),
        (["--tracing-sample-ratio", "2"], "tracing.sampleRatio"),
        (["--tracing-endpoint", "127.0.0.1:4318"], "tracing.endpoint"),
    ])
    func invalidValuesStopStartupNamingTheKey(arguments: [String], key: String) async throws {
        do {
            _ = try await ServerConfiguration.load(filePath: nil, arguments: arguments, environment: [:])
            Issue.record("\(arguments) was accepted")
        } catch let error as ConfigurationError {
            #expect(error.problems.contains { $0.hasPrefix(key + ":") }, "\(error)")
        }
    }

    /// Keys with an acronym are set by flag and environment as swift-configuration spells them (a word starts at
    /// an upper-case letter after a lower-case one): `--http-public-base-url`, `TRANSCODE_CACHE_URL_TTLSECONDS`.
    @Test func acronymKeysAsFlagsAndVariables() async throws {
        let configuration = try await ServerConfiguration.load(
            filePath: nil,
            arguments: ["--http-public-base-url", "https://media.example.com", "--transcode-min-ssim", "0.9"],
            environment: ["TRANSCODE_CACHE_URL_TTLSECONDS": "5"])
        #expect(configuration.http.publicBaseURL == "https://media.example.com")
        #expect(configuration.cache.urlTTLSeconds == 5)
        #expect(configuration.transcode.options.minSSIM == 0.9)
    }

    /// S3 storage takes its credentials from the environment only; without them, startup stops.
    @Test func s3CredentialsComeFromTheEnvironment() async throws {
        let flags = [
            "--storage-kind", "s3", "--storage-s3-endpoint", "http://127.0.0.1:8333", "--storage-s3-bucket", "r",
        ]
        do {
            _ = try await ServerConfiguration.load(filePath: nil, arguments: flags, environment: [:])
            Issue.record("s3 without credentials was accepted")
        } catch let error as ConfigurationError {
            #expect(error.problems.contains { $0.hasPrefix("storage.kind: s3 needs credentials") }, "\(error)")
        }
        let configuration = try await ServerConfiguration.load(
            filePath: nil, arguments: flags + ["--storage-s3-path-style=false"],
            environment: ["AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "token"])
        let s3 = try #require(configuration.storage.s3)
        #expect(configuration.storage.kind == .s3)
        #expect(s3.endpoint.absoluteString == "http://127.0.0.1:8333")
        #expect(s3.bucket == "r")
        #expect(s3.region == "us-east-1")
        #expect(!s3.pathStyle)
        #expect(s3.accessKey == "id" && s3.secretKey == "secret" && s3.sessionToken == "token")
        // The default: one node, its disk only.
        let single = try await ServerConfiguration.load(filePath: nil, arguments: [], environment: [:])
        #expect(single.storage.kind == .disk)
        #expect(single.storage.s3 == nil)
    }

    /// A typo is not silently ignored: unknown keys in the file, unknown `TRANSCODE_` variables and unknown
    /// flags stop startup, each named; messages say what was expected in plain words.
    @Test func unknownSettingsStopStartup() async throws {
        try await withTemporaryDirectory { directory in
            let file = directory + "/config.json"
            try Data(#"{"cache": {"maxByte": 5}, "port": 8080}"#.utf8).write(to: URL(fileURLWithPath: file))
            do {
                _ = try await ServerConfiguration.load(
                    filePath: file, arguments: ["--transcode-workerz", "2", "--download-allow-loopback"],
                    environment: ["TRANSCODE_PORTT": "1", "TRANSCODE_PORT": "8081", "HOME": "/root"])
                Issue.record("unknown settings were accepted")
            } catch let error as ConfigurationError {
                #expect(
                    error.problems.contains("\(file): unknown key cache.maxByte (did you mean cache.maxBytes?)"),
                    "\(error)")
                #expect(
                    error.problems.contains(
                        "TRANSCODE_PORTT: no configuration key has this environment variable (did you mean TRANSCODE_PORT?)"
                    ), "\(error)")
                #expect(
                    error.problems.contains("--transcode-workerz: unknown flag (did you mean --transcode-workers?)"),
                    "\(error)")
                #expect(error.problems.count == 3, "\(error)")
            }
            // Nothing near enough: no guess.
            do {
                _ = try await ServerConfiguration.load(
                    filePath: nil, arguments: ["--frobnicate"], environment: [:])
                Issue.record("an unknown flag was accepted")
            } catch let error as ConfigurationError {
                #expect(error.problems == ["--frobnicate: unknown flag"], "\(error)")
            }
        }
    }

    /// A variable or flag spelt by word boundaries, as anyone would write it, is the key's own: `urlTTLSeconds`
    /// is `TRANSCODE_CACHE_URL_TTL_SECONDS` as well as `TRANSCODE_CACHE_URL_TTLSECONDS`, and
    /// `--cache-url-ttl-seconds` as well as `--cache-url-ttlseconds`; the key's own spelling wins over another.
    @Test func variablesAndFlagsFollowWordBoundaries() async throws {
        let byVariable = try await ServerConfiguration.load(
            filePath: nil, arguments: [],
            environment: ["TRANSCODE_CACHE_URL_TTL_SECONDS": "77"])
        #expect(byVariable.cache.urlTTLSeconds == 77)
        let both = try await ServerConfiguration.load(
            filePath: nil, arguments: [],
            environment: ["TRANSCODE_CACHE_URL_TTL_SECONDS": "77", "TRANSCODE_CACHE_URL_TTLSECONDS": "88"])
        #expect(both.cache.urlTTLSeconds == 88)
        let byFlag = try await ServerConfiguration.load(
            filePath: nil, arguments: ["--cache-url-ttl-seconds", "66"], environment: [:])
        #expect(byFlag.cache.urlTTLSeconds == 66)
        let byFlagWithValue = try await ServerConfiguration.load(
            filePath: nil, arguments: ["--cache-url-ttl-seconds=55"], environment: [:])
        #expect(byFlagWithValue.cache.urlTTLSeconds == 55)
    }

    /// The startup line says what an operator checks first, and never a secret.
    @Test func theStartupLineSaysWhatIsOnAndNoSecret() {
        var configuration = ServerConfiguration()
        configuration.signing.keys = [String(repeating: "ab", count: 32)]
        configuration.authTokens = ["s3cr3t-token"]
        let summary = configuration.startupSummary(configFile: "config/transcode-server.json")
        #expect(summary["config.file"] == "config/transcode-server.json")
        #expect(summary["storage.kind"] == "disk")
        #expect(summary["signing"] == "on (1 key)")
        #expect(summary["auth"] == "on (1 token)")
        #expect(summary["download.allowLoopback"] == "false")
        let text = summary.values.map { "\($0)" }.joined(separator: " ")
        #expect(!text.contains("s3cr3t") && !text.contains("abab"), "\(text)")
        #expect(ServerConfiguration().startupSummary(configFile: nil)["auth"] == "off: anyone may POST")
    }

    @Test func nearestNamesAreSmallEdits() {
        #expect(NearestName.suggestion(for: "cache.maxByte", among: ["cache.maxBytes", "port"]) == "cache.maxBytes")
        #expect(NearestName.suggestion(for: "prot", among: ["port", "host"]) == "port")
        #expect(NearestName.suggestion(for: "port", among: ["port"]) == nil)
        #expect(NearestName.suggestion(for: "zzzzzz", among: ["port", "host"]) == nil)
        #expect(NearestName.distance(Array("kitten"), Array("sitting")) == 3)
        #expect(NearestName.distance(Array("ab"), Array("ba")) == 1)
    }

    @Test func messagesNameTheKeyAndTheTypeInPlainWords() async throws {
        do {
            _ = try await ServerConfiguration.load(
                filePath: nil, arguments: [], environment: ["TRANSCODE_CACHE_MAX_BYTES": "lots"])
            Issue.record("accepted")
        } catch let error as ConfigurationError {
            #expect(error.problems == ["cache.maxBytes: expected a whole number"], "\(error)")
        }
        try await withTemporaryDirectory { directory in
            let file = directory + "/broken.json"
            try Data(#"{"port": "#.utf8).write(to: URL(fileURLWithPath: file))
            do {
                _ = try await ServerConfiguration.load(filePath: file, arguments: [], environment: [:])
                Issue.record("accepted")
            } catch let error as ConfigurationError {
                #expect(error.problems.count == 1 && error.problems[0].hasPrefix("\(file): not valid JSON"), "\(error)")
                #expect(!error.description.contains("NSCocoaErrorDomain"), "\(error)")
            }
        }
    }

    /// A callback is a request the server makes where its client says: webhooks without tokens would let anyone
    /// have it send requests. With a token they start.
    @Test func callbacksNeedATokenToo() async throws {
        let secret = "whsec_" + Data(repeating: 7, count: 24).base64EncodedString()
        do {
            _ = try await ServerConfiguration.load(
                filePath: nil, arguments: [], environment: ["TRANSCODE_WEBHOOKS_SECRETS": secret])
            Issue.record("webhook secrets without a token were accepted")
        } catch let error as ConfigurationError {
            #expect(
                error.problems.count == 1
                    && error.problems[0].hasPrefix("webhooks.secrets: callbacks need auth.tokens"), "\(error)")
        }
        let configuration = try await ServerConfiguration.load(
            filePath: nil, arguments: [],
            environment: [
                "TRANSCODE_WEBHOOKS_SECRETS": secret, "TRANSCODE_AUTH_TOKENS": "a-bearer-token-of-some-length",
            ])
        #expect(configuration.webhooks.secrets == [secret])
    }

    @Test func versionPrintsAndExits() throws {
        do {
            _ = try TranscodeServerCommand.parseAsRoot(["--version"])
            Issue.record("--version parsed into a command")
        } catch {
            #expect(TranscodeServerCommand.exitCode(for: error) == .success)
            #expect(TranscodeServerCommand.message(for: error) == TranscodeServerCommand.version)
        }
    }

    @Test func aMissingExplicitFileIsAnError() async throws {
        await #expect(throws: ConfigurationError.self) {
            _ = try await ServerConfiguration.load(
                filePath: "/nonexistent/config.json", arguments: [], environment: [:])
        }
    }
}
