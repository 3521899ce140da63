import ArgumentParser
import Foundation
import Logging
import PostgresNIO
import TranscodeCore
import TranscodeHTTP

/// `transcode-server queue ...`: the fleet's job database (`queue.kind: postgres`).
struct QueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queue",
        abstract: "Work with the fleet's job database (queue.kind postgres).",
        subcommands: [Bench.self])

    /// `transcode-server queue bench`: how fast this database claims and completes jobs, measured with the
    /// service's own statements (`PostgresQueue`).
    struct Bench: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "bench",
            abstract: "Enqueue no-op jobs, then claim and complete them with concurrent workers; print the rates.",
            discussion: """
                Reads queue.url like the server (--config, TRANSCODE_QUEUE_URL, --queue-url; PGPASSWORD). The \
                workers claim any job that is due: run it against a database no node uses. It refuses when the \
                database holds live jobs of its own, and deletes its jobs afterwards. Prints one JSON object.
                """)

        @Option(help: "No-op jobs to enqueue, claim and complete.")
        var jobs = 10_000

        @Option(help: "Concurrent workers (each one claim, then one complete, at a time).")
        var workers = 8

        @Option(name: .long, help: "JSON configuration file (default: config/transcode-server.json if present).")
        var config: String?

        @Argument(parsing: .allUnrecognized, help: "Configuration keys as flags, e.g. --queue-url postgres://...")
        var settings: [String] = []

        func run() async throws {
            var configuration = try await ServerConfiguration.loadForCommand(
                filePath: self.config, arguments: self.settings)
            if configuration.queue.kind == .local, configuration.queue.url != nil {
                configuration.queue.kind = .postgres
            }
            guard let clientConfiguration = configuration.queue.client else {
                throw ValidationError(
                    "set queue.kind postgres and queue.url (e.g. --queue-kind postgres --queue-url ...)")
            }
            guard self.jobs > 0, self.workers > 0 else {
                throw ValidationError("--jobs and --workers must be positive")
            }
            var logger = Logger(label: "queue-bench")
            logger.logLevel = .warning
            let client = PostgresClient(configuration: clientConfiguration, backgroundLogger: logger)
            let report = try await withThrowingTaskGroup(of: Report?.self) { group in
                group.addTask {
                    await client.run()
                    return nil
                }
                defer { group.cancelAll() }
                return try await Self.measure(
                    queue: PostgresQueue(client: client, logger: logger), jobs: self.jobs, workers: self.workers,
                    connections: clientConfiguration.options.maximumConnections)
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        }

        struct Report: Codable {
            var jobs: Int
            var workers: Int
            var connections: Int
            var enqueueSeconds: Double
            var enqueuedPerSecond: Double
            var drainSeconds: Double
            var completedPerSecond: Double
            var claimP50Milliseconds: Double
            var claimP99Milliseconds: Double
            var claimMaxMilliseconds: Double
        }

        static func measure(queue: PostgresQueue, jobs: Int, workers: Int, connections: Int) async throws -> Report {
            try await queue.migrate()
            let depth = try await queue.depth()
            guard (depth[.queued] ?? 0) + (depth[.running] ?? 0) == 0 else {
                throw ValidationError(
                    "the database holds live jobs: the bench would claim them; use a scratch database")
            }
            let run = BatchID.random().prefix(12)
            let started = ContinuousClock.now
            // Enqueued 1,000 per transaction, with the service's own statement.
            for chunk in stride(from: 0, to: jobs, by: 1000) {
                try await queue.client.withTransaction(logger: queue.logger) { connection in
                    for index in chunk..<min(jobs, chunk + 1000) {
                        _ = try await PostgresQueue.enqueue(
                            on: connection, resultKey: "bench-\(run)-\(index)", kind: .bench, payload: "{}",
                            maxAttempts: 1, logger: queue.logger)
                    }
                }
            }
            let enqueued = (ContinuousClock.now - started).seconds
            let drainStarted = ContinuousClock.now
            let latencies = try await withThrowingTaskGroup(of: [Double].self) { group in
                for worker in 0..<workers {
                    group.addTask {
                        var latencies: [Double] = []
                        let owner = "bench-\(run)-\(worker)"
                        while true {
                            let before = ContinuousClock.now
                            guard let claimed = try await queue.claim(owner: owner, leaseSeconds: 60, kind: .bench)
                            else {
                                break
                            }
                            latencies.append((ContinuousClock.now - before).seconds * 1000)
                            guard try await queue.complete(claimed.id, owner: owner) else {
                                throw ValidationError("job \(claimed.id) was not this worker's at completion")
                            }
                        }
                        return latencies
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }.sorted()
            }
            let drained = (ContinuousClock.now - drainStarted).seconds
            try await queue.client.query(
                "DELETE FROM transcode_jobs WHERE spec = \(JobKind.bench.rawValue) AND result_key LIKE \("bench-\(run)-%")",
                logger: queue.logger)
            guard latencies.count == jobs else {
                throw ValidationError("\(latencies.count) jobs claimed of \(jobs)")
            }
            func percentile(_ p: Double) -> Double {
                latencies[min(latencies.count - 1, Int((Double(latencies.count) * p).rounded(.up)) - 1)]
            }
            return Report(
                jobs: jobs, workers: workers, connections: connections, enqueueSeconds: enqueued,
                enqueuedPerSecond: Double(jobs) / enqueued, drainSeconds: drained,
                completedPerSecond: Double(jobs) / drained, claimP50Milliseconds: percentile(0.50),
                claimP99Milliseconds: percentile(0.99), claimMaxMilliseconds: latencies.last ?? 0)
        }
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    fileprivate var seconds: Double {
        let (seconds, attoseconds) = self.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
