import Foundation
import Synchronization

/// The steps of conversions and when each ran, for a tracer: the server turns each into a span of the conversion's
/// trace. Recorded only where a `Transcoder` is given one (`Transcoder.steps`); without, nothing is timed.
public final class StepLog: Sendable {
    /// One step: what it was, its attributes, and its wall-clock start and end in nanoseconds since the epoch.
    public struct Step: Sendable, Equatable {
        public let name: String
        public let attributes: [String: String]
        public let startNanoseconds: UInt64
        public let endNanoseconds: UInt64
        /// Whether it ended by throwing.
        public let failed: Bool
    }

    private let recorded = Mutex<[Step]>([])

    public init() {}

    /// The steps recorded so far, in the order they ended.
    public var steps: [Step] { self.recorded.withLock { $0 } }

    /// Runs `body` as step `name`, recording its times (and whether it threw).
    public func record<T>(_ name: String, _ attributes: [String: String] = [:], _ body: () throws -> T) rethrows -> T {
        let start = Self.nowNanoseconds()
        do {
            let value = try body()
            self.append(name, attributes, start: start, failed: false)
            return value
        } catch {
            self.append(name, attributes, start: start, failed: true)
            throw error
        }
    }

    private func append(_ name: String, _ attributes: [String: String], start: UInt64, failed: Bool) {
        let step = Step(
            name: name, attributes: attributes, startNanoseconds: start, endNanoseconds: Self.nowNanoseconds(),
            failed: failed)
        self.recorded.withLock { $0.append(step) }
    }

    /// Wall-clock nanoseconds since the epoch (what tracers stamp spans with).
    public static func nowNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}

extension Optional where Wrapped == StepLog {
    /// Runs `body`, as a step of the log when there is one.
    public func record<T>(_ name: String, _ attributes: [String: String] = [:], _ body: () throws -> T) rethrows -> T {
        guard let log = self else { return try body() }
        return try log.record(name, attributes, body)
    }
}
