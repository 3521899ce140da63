import CTestSupport
import Foundation
import Synchronization

/// A program the tests start (nginx, SeaweedFS, the Chromium oracle, the ffmpeg CLIs), spawned with
/// `posix_spawnp` and reaped with `waitpid` (`WNOHANG`, under a lock: waiting polls, every 2 ms for a blocked
/// thread and every 10 ms for a task).
///
/// Not Foundation's `Process`: on Linux its `run()` copies each `/proc/self/fd` entry's whole 256-byte name
/// out of glibc's `readdir` buffer and now and then reads past its end, a SIGSEGV that took down one full test
/// run in about five here (fixed upstream by swift-corelibs-foundation #5472, after Swift 6.3.1).
/// swift-subprocess avoids that, but it is not among the packages mirrored here. Every descriptor above standard error is closed in the child
/// (`posix_spawn_file_actions_addclosefrom_np`), so a test's sockets never leak into a server it starts.
public final class ChildProcess: Sendable {
    /// Where the child's standard output or error goes.
    public enum Output: Sendable {
        /// `/dev/null`.
        case discarded
        /// Appended to a file, created if missing.
        case file(String)
        /// A pipe the parent reads with `readOutput()` (standard output only).
        case pipe
    }

    /// How the child ended.
    public enum Termination: Sendable, Equatable {
        case exited(Int32)
        case signaled(Int32)

        /// The exit code, or the signal's number (as Foundation's `terminationStatus`).
        public var status: Int32 {
            switch self {
            case .exited(let code): code
            case .signaled(let signal): signal
            }
        }
    }

    public struct SpawnError: Error, CustomStringConvertible {
        public let executable: String
        public let errno: Int32
        public var description: String { "cannot start \(self.executable): \(String(cString: strerror(self.errno)))" }
    }

    public let processIdentifier: pid_t
    /// The read end of the standard-output pipe, when there is one; -1 once read.
    private let outputReader: Mutex<Int32>
    private let termination = Mutex<Termination?>(nil)

    /// Starts `executable` (a path, or a name looked up in `PATH`) with the parent's environment.
    public init(
        _ executable: String, _ arguments: [String], standardOutput: Output = .discarded,
        standardError: Output = .discarded
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var pipeEnds: [Int32] = [-1, -1]
        if case .pipe = standardOutput {
            guard CTestSupport_pipe2_cloexec(&pipeEnds) == 0 else {
                throw SpawnError(executable: executable, errno: errno)
            }
            posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 1)
        }
        for (descriptor, output) in [(Int32(1), standardOutput), (2, standardError)] {
            switch output {
            case .discarded: posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", O_WRONLY, 0)
            case .file(let path):
                posix_spawn_file_actions_addopen(&actions, descriptor, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            case .pipe: precondition(descriptor == 1, "only standard output can be a pipe")
            }
        }
        CTestSupport_posix_spawn_file_actions_addclosefrom_np(&actions, 3)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        // A clean signal state: the test process blocks most signals on its threads and ignores SIGTERM
        // (swift-service-lifecycle), and both are inherited across exec. A child with SIGTERM blocked outlives
        // every terminate, and GLib programs (WebKitGTK's MiniBrowser, under WebKitWebDriver) that watch their
        // own children through SIGCHLD never see them end.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        var all = sigset_t()
        sigemptyset(&empty)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        let result = posix_spawnp(&pid, executable, &actions, &attributes, argv, environ)
        if pipeEnds[1] >= 0 { close(pipeEnds[1]) }
        guard result == 0 else {
            if pipeEnds[0] >= 0 { close(pipeEnds[0]) }
            throw SpawnError(executable: executable, errno: result)
        }
        self.processIdentifier = pid
        self.outputReader = Mutex(pipeEnds[0])
    }

    /// Reads the standard-output pipe to its end (the child exited or closed it).
    public func readOutput() -> [UInt8] {
        self.outputReader.withLock { descriptor in
            guard descriptor >= 0 else { return [] }
            defer {
                close(descriptor)
                descriptor = -1
            }
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count > 0 {
                    bytes += chunk[..<count]
                } else if count == 0 || errno != EINTR {
                    return bytes
                }
            }
        }
    }

    /// How the child ended, if it has; never blocks.
    public var exit: Termination? {
        self.termination.withLock { termination in
            if let termination { return termination }
            var status: Int32 = 0
            var result: pid_t
            repeat {
                result = waitpid(self.processIdentifier, &status, WNOHANG)
            } while result < 0 && errno == EINTR
            // Our own child, reaped nowhere else: any other error is a bug in the test process.
            precondition(result >= 0, "waitpid(\(self.processIdentifier)): \(String(cString: strerror(errno)))")
            guard result == self.processIdentifier else { return nil }
            // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import.
            termination = status & 0x7f == 0 ? .exited((status >> 8) & 0xff) : .signaled(status & 0x7f)
            return termination
        }
    }

    public var isRunning: Bool { self.exit == nil }

    /// Blocks the calling thread until the child ends (for synchronous callers only).
    public func waitUntilExit() -> Termination {
        while true {
            if let termination = self.exit { return termination }
            usleep(2_000)
        }
    }

    /// Waits, without holding a thread of the async executor, until the child ends. In a cancelled task (where
    /// `Task.sleep` returns at once, and polling would spin on one of the executor's few threads) the wait goes to a
    /// thread of its own.
    public func exited() async -> Termination {
        while !Task.isCancelled {
            if let termination = self.exit { return termination }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: self.waitUntilExit()) }
        }
    }

    public func send(_ signal: Int32) {
        if self.isRunning { kill(self.processIdentifier, signal) }
    }

    deinit {
        let descriptor = self.outputReader.withLock { $0 }
        if descriptor >= 0 { close(descriptor) }
    }
}
