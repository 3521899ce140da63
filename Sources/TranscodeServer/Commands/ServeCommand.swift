import ArgumentParser
import Dispatch
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import TranscodeCore
import TranscodeHTTP
import Transcoder

/// `transcode-server serve` (also what runs with no subcommand): the HTTP service.
///
/// Configuration comes from `config/transcode-server.json` (or `--config FILE`), then `TRANSCODE_...`
/// environment variables, then flags: any configuration key works as a flag, `cache.maxBytes` as
/// `--cache-max-bytes`.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the HTTP service (POST /transcode, GET /media/...).",
        discussion: """
            Every configuration key is also a flag: --host 0.0.0.0, --port 8080, --cache-directory DIR, \
            --cache-max-bytes N, --transcode-workers N, --download-allow-loopback, ... \
            (see config/transcode-server.json and docs/configuration.md).
            """)

    @Option(name: .long, help: "JSON configuration file (default: config/transcode-server.json if present).")
    var config: String?

    @Argument(parsing: .allUnrecognized, help: "Configuration keys as flags, e.g. --port 8080.")
    var settings: [String] = []

    /// A first word that is no flag is a mistyped subcommand (`transcode-server config`), not a setting: refused
    /// before anything starts, where it used to start the server on the default port.
    func validate() throws {
        if let first = self.settings.first, !first.hasPrefix("-") {
            let subcommands = TranscodeServerCommand.configuration.subcommands.map { $0._commandName }
            throw ValidationError(
                "unknown subcommand or argument '\(first)': the subcommands are \(subcommands.joined(separator: ", ")); "
                    + "configuration keys are flags (--port 8080)")
        }
    }

    func run() async throws {
        let onEventLoops = Self.runTasksOnEventLoops()
        #if canImport(Glibc)
            EncoderHeap.enable()
        #endif
        let configuration = try await ServerConfiguration.loadForCommand(
            filePath: self.config, arguments: self.settings)
        var logger =
            configuration.log.format == "json"
            ? Logger(label: "transcode-server") { JSONLogHandler(label: $0) } : Logger(label: "transcode-server")
        logger.logLevel = configuration.log.level
        let descriptors = Self.raiseDescriptorLimit()
        await Self.armDispatchTimers()
        logger.info(
            "file descriptor limit",
            metadata: [
                "limit.soft": "\(descriptors.soft)", "limit.hard": "\(descriptors.hard)",
                "tasks.onEventLoops": "\(onEventLoops)",
            ])
        if configuration.storage.createBucket, let s3 = configuration.storage.s3 {
            try await S3Client(configuration: s3).createBucket()
        }
        let configFile =
            self.config
            ?? (FileManager.default.fileExists(atPath: ServerConfiguration.defaultFilePath)
                ? ServerConfiguration.defaultFilePath : nil)
        logger.info("starting", metadata: configuration.startupSummary(configFile: configFile))
        // The tracer is the process's: made before the application, whose requests it sees.
        let traces =
            try configuration.tracing.enabled ? [TraceExport.bootstrap(configuration.tracing, logger: logger)] : []
        let (application, services) = try buildApplication(configuration: configuration, logger: logger)
        // On SIGTERM the group shuts its services down in reverse: the drain first (`/readyz` 503 while everything
        // serves), then the application (the listener closed, work in flight finished), then the exporter (the
        // last spans sent).
        let group = ServiceGroup(
            configuration: .init(
                services: traces + [application, services.drain], gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await group.run()
    }

    /// Makes SwiftNIO's event loops (`MultiThreadedEventLoopGroup.singleton`, which downloads and the S3 and
    /// PostgreSQL clients use too) Swift Concurrency's global executor, in place of libdispatch's worker pool.
    /// libdispatch on Linux watches its pool once a second while work waits in it, reading `/proc/TID/stat` for each
    /// worker, and kills the process (SIGILL, `_dispatch_workq_monitor_pools`) when it cannot open one: out of
    /// descriptors, a server whose tasks queued for a moment (a burst of new connections on a loaded machine) died
    /// instead of answering 503 (a core dump of `OperationsTests.runningOutOfDescriptorsQuarantinesNothing`, twice in
    /// full test runs). On the event loops the tasks leave libdispatch's queues empty but for a `Task.sleep` waking.
    /// The server's connections keep loops of their own (`connectionLoops`), as they had when tasks ran in
    /// libdispatch's pool; transcodes and other blocking work stay on their `NIOThreadPool`s. Called once, first in
    /// `run()`. - Returns: whether it took effect.
    static func runTasksOnEventLoops() -> Bool {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }

    /// Raises the soft limit on open files to the hard one: the usual soft limit (1,024 from a shell or a systemd
    /// unit without `LimitNOFILE`) is a few hundred idle connections, and every request needs descriptors beyond
    /// its socket (the object's files, a download, a callback). - Returns: the limits now in force.
    static func raiseDescriptorLimit() -> (soft: UInt64, hard: UInt64) {
        var limit = rlimit()
        guard getrlimit(RLIMIT_NOFILE_RESOURCE, &limit) == 0 else { return (0, 0) }
        // An unlimited hard limit is not a number a soft limit may take on Linux (nr_open caps it).
        let target = limit.rlim_max == rlim_t.max ? max(limit.rlim_cur, 1 << 20) : limit.rlim_max
        if limit.rlim_cur < target {
            var raised = limit
            raised.rlim_cur = target
            if setrlimit(RLIMIT_NOFILE_RESOURCE, &raised) == 0 { limit = raised }
        }
        return (UInt64(limit.rlim_cur), UInt64(limit.rlim_max))
    }

    /// Arms a timer on each of libdispatch's three clocks (uptime, monotonic, wall), so that each has its timerfd
    /// before the server can run out of descriptors. libdispatch makes a clock's timerfd the first time a timer of
    /// that clock is armed; when it cannot (`EMFILE`), it logs the failure and leaves the timer unarmed
    /// (`_dispatch_timeout_program`), so a `Task.sleep` or an `asyncAfter` on that clock would not wake while the
    /// descriptors stay taken. Made once, a clock's timerfd is kept for the life of the process. (This was first
    /// made for a SIGILL once descriptors ran out; that crash is libdispatch's worker-pool monitor, which
    /// `runTasksOnEventLoops` is for.)
    ///
    /// Checked, not assumed: a timer whose deadline has passed by the time it is registered fires without arming,
    /// and on a loaded machine 50 ms can pass. So the process's timerfds are read back (`timerClocks`) and the timers
    /// armed again, each time further ahead, until every clock has one. At this point of start-up the only timerfds
    /// are libdispatch's (one per clock: measured, the CLOCK_MONOTONIC one already there and none added by arming);
    /// SwiftNIO's event loops, made later, add CLOCK_MONOTONIC ones.
    static func armDispatchTimers() async {
        var ahead = 50
        for _ in 0..<5 {
            await Self.armDispatchTimers(milliseconds: ahead)
            guard let clocks = Self.timerClocks(), !clocks.isSuperset(of: Self.dispatchClocks) else { return }
            ahead *= 4
        }
    }

    /// The `clockid`s libdispatch's three clocks take on Linux: CLOCK_REALTIME (wall), CLOCK_MONOTONIC (uptime),
    /// CLOCK_BOOTTIME (monotonic).
    static let dispatchClocks: Set<Int> = [0, 1, 7]

    /// The clocks of a process's timerfds (this one's by default), from `/proc/PID/fd` and `fdinfo`; nil where
    /// `/proc` does not tell.
    static func timerClocks(process: String = "self") -> Set<Int>? {
        let proc = "/proc/" + process
        guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: proc + "/fd") else {
            return nil
        }
        var clocks: Set<Int> = []
        for descriptor in descriptors {
            guard
                (try? FileManager.default.destinationOfSymbolicLink(atPath: proc + "/fd/" + descriptor))
                    == "anon_inode:[timerfd]",
                let info = try? String(contentsOfFile: proc + "/fdinfo/" + descriptor, encoding: .utf8),
                let line = info.split(separator: "\n").first(where: { $0.hasPrefix("clockid:") }),
                let clock = Int(line.dropFirst("clockid:".count).trimmingCharacters(in: .whitespaces))
            else { continue }
            clocks.insert(clock)
        }
        return clocks
    }

    /// One timer on each clock, `milliseconds` from now; returns once all three have fired.
    private static func armDispatchTimers(milliseconds: Int) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let group = DispatchGroup()
            group.enter()
            group.enter()
            group.enter()
            // 50 ms, not 1: a deadline already past when the timer is registered (a loaded machine) fires without
            // arming, and that clock got no timerfd (the wall clock's was missing in one full test run).
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(milliseconds)) { group.leave() }
            DispatchQueue.global().asyncAfter(wallDeadline: .now() + .milliseconds(milliseconds)) { group.leave() }
            // The monotonic clock (CLOCK_BOOTTIME): Swift's continuous clock.
            Task {
                try? await Task.sleep(for: .milliseconds(milliseconds), clock: .continuous)
                group.leave()
            }
            group.notify(queue: .global()) { done.resume() }
        }
    }

    /// The soft limit on open files now in force.
    static func descriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(RLIMIT_NOFILE_RESOURCE, &limit) == 0 else { return 1024 }
        return limit.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(limit.rlim_cur)
    }

    #if canImport(Glibc)
        private static let RLIMIT_NOFILE_RESOURCE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
        private static let RLIMIT_NOFILE_RESOURCE = RLIMIT_NOFILE
    #endif
}
