import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

/// A PostgreSQL server of its own (Debian's `postgresql` package: `initdb` and `postgres` from
/// `/usr/lib/postgresql/<version>/bin`) in a temporary directory, on a free loopback port, with trust
/// authentication for the user `queue`. PostgreSQL refuses to run as root: under root the cluster belongs to
/// `nobody` and both programs run as it (`setpriv`). Stopped at once (SIGQUIT, an outage) by `stop`, or when this
/// object goes.
final class PostgresServer: @unchecked Sendable {
    let directory: String
    private(set) var port = 0
    private var process: ChildProcess?
    static let user = "queue"

    /// The directory of `initdb` and `postgres`, the newest version installed; the test fails, never skips,
    /// without it.
    static func binaries(sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let root = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        let found = versions.compactMap(Int.init).sorted().last.map { "\(root)/\($0)/bin" }
        return try #require(
            found.flatMap { FileManager.default.isExecutableFile(atPath: $0 + "/postgres") ? $0 : nil },
            "PostgreSQL is missing; install it with: scripts/install-deps --test (apt-get install postgresql)",
            sourceLocation: sourceLocation)
    }

    /// `program` of `binaries` with `arguments`, as an unprivileged user when this process is root.
    private static func command(_ binaries: String, _ program: String, _ arguments: [String]) -> (String, [String]) {
        let path = binaries + "/" + program
        guard getuid() == 0 else { return (path, arguments) }
        return ("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--", path] + arguments)
    }

    /// Makes the cluster (`initdb`, a second or two) and starts the server.
    init(directory: String) async throws {
        self.directory = directory
        let binaries = try Self.binaries()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if getuid() == 0 { chown(directory, 65534, 65534) }
        let (program, arguments) = Self.command(
            binaries, "initdb",
            [
                "-D", directory + "/data", "-U", Self.user, "--auth=trust", "--encoding=UTF8", "--no-sync",
                "--no-instructions",
            ])
        let initdb = try ChildProcess(
            program, arguments, standardOutput: .file(directory + "/initdb.log"),
            standardError: .file(directory + "/initdb.log"))
        let ended = await initdb.exited()
        guard ended == .exited(0) else {
            Issue.record("initdb failed (\(ended)):\n\(self.log("initdb.log"))")
            throw CancellationError()
        }
        try await self.start()
    }

    /// Starts the server (again, after `stop`: the data and the port are kept, as clients know only that port)
    /// and waits until it accepts connections.
    func start() async throws {
        let binaries = try Self.binaries()
        let restarting = self.port != 0
        for attempt in 0..<3 {
            // A first start takes another free port when the one chosen was taken meanwhile; a restart cannot.
            if !restarting { self.port = try freePort() }
            let (program, arguments) = Self.command(
                binaries, "postgres",
                [
                    "-D", self.directory + "/data", "-h", "127.0.0.1", "-p", "\(self.port)", "-k", self.directory,
                    "-F", "-c", "max_connections=50",
                ])
            let process = try ChildProcess(
                program, arguments, standardOutput: .file(self.directory + "/postgres.log"),
                standardError: .file(self.directory + "/postgres.log"))
            self.process = process
            // Counted in attempts, not wall time (see SeaweedFS.start): at least 60 s.
            for _ in 0..<600 {
                guard process.isRunning else { break }
                // Ready by its own account, not only something listening on the port: a port taken meanwhile by
                // another test's server would accept while this one has failed to bind (its client would then wait
                // on a server another test stops, until the time limit).
                if self.isReady(port: self.port), Self.accepts(port: self.port) { return }
                try await Task.sleep(for: .milliseconds(100))
            }
            self.stop()
            if restarting, attempt < 2 { try await Task.sleep(for: .seconds(1)) }
        }
        Issue.record("PostgreSQL did not start on port \(self.port):\n\(self.log("postgres.log").suffix(4000))")
        throw CancellationError()
    }

    /// Whether this cluster's server says it is ready on `port`: its `postmaster.pid` (PostgreSQL 10 and later) names
    /// the port on line 4 and reads `ready` on line 8 once the server accepts connections.
    private func isReady(port: Int) -> Bool {
        let lines = self.log("data/postmaster.pid").split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count >= 8 else { return false }
        return Int(lines[3].trimmingCharacters(in: .whitespaces)) == port
            && lines[7].trimmingCharacters(in: .whitespaces) == "ready"
    }

    /// Whether something accepts TCP connections on the loopback `port` (the server listens once it is ready).
    private static func accepts(port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    private func log(_ name: String) -> String {
        String(decoding: FileManager.default.contents(atPath: self.directory + "/" + name) ?? Data(), as: UTF8.self)
    }

    /// A client of the server's `postgres` database, as user `queue`.
    func configuration() -> PostgresClient.Configuration {
        PostgresClient.Configuration(
            host: "127.0.0.1", port: self.port, username: Self.user, password: nil, database: "postgres",
            tls: .disable)
    }

    /// Stops the server at once, as a crash would (an outage, or the end of the test): SIGQUIT is PostgreSQL's
    /// immediate shutdown, which ends the server's children too (a SIGKILL would leave them running) and
    /// writes no checkpoint; committed work is in the WAL.
    func stop() {
        guard let process = self.process else { return }
        process.send(SIGQUIT)
        _ = process.waitUntilExit()
        self.process = nil
    }

    deinit {
        self.stop()
    }
}

/// Runs `body` with a PostgreSQL server started for it and a client of it (running), and stops both afterwards.
func withPostgres<Result: Sendable>(_ body: (PostgresServer, PostgresClient) async throws -> Result) async throws
    -> Result
{
    try await withTemporaryDirectory(prefix: "postgres") { directory in
        let server = try await PostgresServer(directory: directory + "/cluster")
        defer { server.stop() }
        return try await withClient(of: server) { try await body(server, $0) }
    }
}

/// Runs `body` with a client of `server` as it listens now, running until `body` returns.
func withClient<Result: Sendable>(of server: PostgresServer, _ body: (PostgresClient) async throws -> Result)
    async throws -> Result
{
    let client = PostgresClient(configuration: server.configuration())
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await client.run() }
        defer { group.cancelAll() }
        return try await body(client)
    }
}
