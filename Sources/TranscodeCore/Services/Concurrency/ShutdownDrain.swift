import Logging
import ServiceLifecycle
import Synchronization

/// What SIGTERM does first, before the server stops: for `seconds` (`shutdown.drainSeconds`) `/readyz` answers 503
/// `shutting-down` while every route keeps serving and new connections are still accepted, so a balancer that
/// checks readiness (a Kubernetes endpoint, nginx or HAProxy health checks) takes the node out before its listener
/// closes, and no client is refused a connection. Then the application's own graceful shutdown: new connections
/// refused, requests and jobs in flight finished within `shutdown.graceSeconds`, exit 0.
///
/// `serve` runs it in one service group after the application: the group shuts its services down in reverse order,
/// each once the one before has returned, so this one's `run` returning ends the drain.
package final class ShutdownDrain: Service, Sendable {
    let seconds: Double
    let logger: Logger
    private let draining = Atomic<Bool>(false)

    package init(seconds: Double, logger: Logger) {
        self.seconds = seconds
        self.logger = logger
    }

    /// Whether SIGTERM came and the drain is running (or over).
    package var isDraining: Bool { self.draining.load(ordering: .relaxed) }

    package func run() async throws {
        // Until the group's graceful shutdown begins (cancelled: the group is ending anyway, without a drain).
        do {
            try await gracefulShutdown()
        } catch {
            return
        }
        self.draining.store(true, ordering: .relaxed)
        guard self.seconds > 0 else { return }
        self.logger.info(
            "draining: /readyz answers 503 while every route serves", metadata: ["drain.seconds": "\(self.seconds)"])
        // The group cancelled ends the drain early.
        try? await Task.sleep(for: .nanoseconds(Int64(self.seconds * 1_000_000_000)))
        self.logger.info("drain over: stopping")
    }
}
