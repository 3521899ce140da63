import Foundation
import Testing

@testable import TranscodeClient

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// The repository (this package is its `Client/` folder), and the corpus beside it.
enum Paths {
    static let client = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let repository = client.deletingLastPathComponent()
    static let corpus = repository.deletingLastPathComponent().appendingPathComponent("shared/corpus")
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    /// The server's debug binary, which `make test` builds first (`swift build --build-tests` at the root), or
    /// `GIF2MP4_SERVER_BINARY` (not `TRANSCODE_…`: the server it starts would read that as a setting, and refuse it).
    static func serverBinary() throws -> String {
        let path =
            ProcessInfo.processInfo.environment["GIF2MP4_SERVER_BINARY"]
            ?? repository.appendingPathComponent(".build/debug/transcode-server").path
        try #require(
            FileManager.default.isExecutableFile(atPath: path),
            "the server binary is missing: \(path) (run `swift build` at the repository's root first, as make test does)"
        )
        return path
    }

    /// This package's `media-cache-probe`, built beside the test bundle.
    static func probeBinary() throws -> String {
        let path = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("media-cache-probe").path
        let fallback = client.appendingPathComponent(".build/debug/media-cache-probe").path
        let found = [path, fallback].first { FileManager.default.isExecutableFile(atPath: $0) }
        return try #require(found, "media-cache-probe is missing (swift build --build-tests in Client/ makes it)")
    }

    static func requireCorpus() throws {
        try #require(
            FileManager.default.fileExists(atPath: corpus.appendingPathComponent("MANIFEST.tsv").path),
            "the corpus is missing: \(corpus.path) (../shared/corpus beside the repository)")
    }
}

/// A temporary directory, removed afterwards.
func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("client-tests-" + UUID().uuidString)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}

/// A port nothing listens on now (bound, read, closed).
func freePort() throws -> Int {
    let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    try #require(socket >= 0)
    defer { close(socket) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    try #require(bound == 0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// A child process, killed when the scope ends.
final class Child: @unchecked Sendable {
    let process = Process()

    init(_ executable: String, _ arguments: [String], output: URL? = nil, input: Pipe? = nil) throws {
        self.process.executableURL = URL(fileURLWithPath: executable)
        self.process.arguments = arguments
        if let output {
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            let handle = try FileHandle(forWritingTo: output)
            self.process.standardOutput = handle
            self.process.standardError = handle
        } else {
            self.process.standardOutput = FileHandle.nullDevice
            self.process.standardError = FileHandle.nullDevice
        }
        if let input { self.process.standardInput = input }
        try self.process.run()
    }

    func kill(_ signal: Int32 = SIGKILL) {
        if self.process.isRunning { Glibc.kill(self.process.processIdentifier, signal) }
        self.process.waitUntilExit()
    }
}

/// Runs a program to its end, its standard input given; returns its status and what it printed.
func run(_ executable: String, _ arguments: [String], input: String = "") throws -> (
    status: Int32, stdout: String, stderr: String
) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let (stdin, stdout, stderr) = (Pipe(), Pipe(), Pipe())
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stderr
    try process.run()
    // The output is read on its own threads while the input is written: either pipe may fill.
    let out = ResultBox<Data>(), err = ResultBox<Data>()
    let group = DispatchGroup()
    for (pipe, box) in [(stdout, out), (stderr, err)] {
        group.enter()
        DispatchQueue.global().async {
            box.value = pipe.fileHandleForReading.readDataToEndOfFile()
            group.leave()
        }
    }
    stdin.fileHandleForWriting.write(Data(input.utf8))
    try stdin.fileHandleForWriting.close()
    process.waitUntilExit()
    group.wait()
    return (
        process.terminationStatus, String(decoding: out.value ?? Data(), as: UTF8.self),
        String(decoding: err.value ?? Data(), as: UTF8.self)
    )
}

final class ResultBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T?
    var value: T? {
        get { self.lock.withLock { self.stored } }
        set { self.lock.withLock { self.stored = newValue } }
    }
}

/// Waits until `url` answers (any status), 30 s at most.
func waitUntilAnswering(_ url: URL, _ child: Child, log: URL? = nil) async throws {
    for _ in 0..<300 {
        if !child.process.isRunning { break }
        var request = URLRequest(url: url)
        request.timeoutInterval = 2
        if (try? await URLSession.shared.data(for: request)) != nil { return }
        try await Task.sleep(for: .milliseconds(100))
    }
    let said = log.flatMap { try? String(contentsOf: $0, encoding: .utf8) } ?? ""
    Issue.record("\(url) never answered: \(said.suffix(2000))")
    throw CancellationError()
}

/// The real service on loopback, with an origin (`python3 -m http.server`) serving `origin/` of its directory.
struct Service {
    static let key = String(repeating: "4b", count: 32)
    static let salt = String(repeating: "53", count: 16)
    static let webhookSecret = "whsec_" + Data(repeating: 0x5a, count: 24).base64EncodedString()
    /// `auth.tokens`: callbacks (webhooks) need one.
    static let token = "client-tests-token"

    let baseURL: URL
    let originPort: Int
    let directory: URL
    let log: URL

    var signer: TranscodeURLSigner { try! TranscodeURLSigner(hexKey: Self.key, hexSalt: Self.salt) }
    var client: TranscodeClient { TranscodeClient(baseURL: self.baseURL, token: Self.token, signer: self.signer) }

    /// The URL of `name` on the origin (under `origin/`).
    func origin(_ name: String) -> String { "http://127.0.0.1:\(self.originPort)/\(name)" }

    /// The service's access-log lines (`log.format json`): request id, status.
    func accessLog() throws -> [(id: String, status: Int)] {
        let text = (try? String(contentsOf: self.log, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                object["message"] as? String == "request", let id = object["request.id"] as? String
            else { return nil }
            return (id, object["http.status"] as? Int ?? 0)
        }
    }

    /// Starts the server binary and the origin; `files` maps names under `origin/` to corpus files.
    static func with<T>(
        files: [String: String] = [:], arguments: [String] = [], _ body: (Service) async throws -> T
    ) async throws -> T {
        let binary = try Paths.serverBinary()
        try Paths.requireCorpus()
        return try await withTemporaryDirectory { directory in
            let origin = directory.appendingPathComponent("origin")
            try FileManager.default.createDirectory(at: origin, withIntermediateDirectories: true)
            for (name, corpusName) in files {
                let target = origin.appendingPathComponent(name)
                try FileManager.default.createDirectory(
                    at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
                try FileManager.default.copyItem(at: Paths.corpus.appendingPathComponent(corpusName), to: target)
            }
            let (originPort, port) = (try freePort(), try freePort())
            let originChild = try Child(
                "/usr/bin/python3",
                ["-m", "http.server", "\(originPort)", "--bind", "127.0.0.1", "--directory", origin.path])
            defer { originChild.kill() }
            let log = directory.appendingPathComponent("server.log")
            let server = try Child(
                binary,
                [
                    "serve", "--host", "127.0.0.1", "--port", "\(port)", "--cache-directory",
                    directory.appendingPathComponent("cache").path, "--download-allow-loopback", "--log-format", "json",
                    "--log-level", "info", "--signing-keys", Self.key, "--signing-salts", Self.salt,
                    "--webhooks-secrets", Self.webhookSecret, "--auth-tokens", Self.token,
                ]
                    // The debug binary beside other work can take long on a conversion the tests wait for; a test may
                    // set its own wait (an option given twice is refused).
                    + (arguments.contains("--transcode-sync-wait-seconds")
                        ? [] : ["--transcode-sync-wait-seconds", "600"])
                    + arguments, output: log)
            defer { server.kill() }
            let service = Service(
                baseURL: URL(string: "http://127.0.0.1:\(port)")!, originPort: originPort, directory: directory,
                log: log)
            try await waitUntilAnswering(service.baseURL.appendingPathComponent("healthz"), server, log: log)
            try await waitUntilAnswering(URL(string: "http://127.0.0.1:\(originPort)/")!, originChild)
            return try await body(service)
        }
    }
}

/// `scripted_server.py` on loopback, answering from `script`; its request log is read back.
struct ScriptedServer {
    let baseURL: URL
    let log: URL

    func requests() -> [[String: Any]] {
        let text = (try? String(contentsOf: self.log, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    static func with<T>(_ script: [String: [[String: Any]]], _ body: (ScriptedServer) async throws -> T) async throws
        -> T
    {
        try await withTemporaryDirectory { directory in
            let scriptFile = directory.appendingPathComponent("script.json")
            try JSONSerialization.data(withJSONObject: script).write(to: scriptFile)
            let log = directory.appendingPathComponent("requests.jsonl")
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
            let port = try freePort()
            let child = try Child(
                "/usr/bin/python3",
                [
                    Paths.fixtures.appendingPathComponent("scripted_server.py").path, "\(port)", scriptFile.path,
                    log.path,
                ])
            defer { child.kill() }
            let server = ScriptedServer(baseURL: URL(string: "http://127.0.0.1:\(port)")!, log: log)
            try await waitUntilAnswering(server.baseURL.appendingPathComponent("ping"), child)
            try Data().write(to: log)
            return try await body(server)
        }
    }
}
