import Foundation
import Synchronization
import Testing

@testable import TranscodeCore

/// The single flight (`SingleFlight`): callers of one key at once start one operation and share its result, and
/// each caller's observer is told that result by the operation's own task once the key has left the table (a
/// request's webhook subscriber used to be told by a task of its own that waited for the run).
@Suite(.tags(.unit), .timeLimit(.minutes(1))) struct SingleFlightTests {
    /// What observers were told, and the gate the runs wait on.
    final class Told: Sendable {
        /// "42" for a value, "failed" for an error.
        let values = Mutex<[String]>([])
        let gate = Mutex(false)

        func record(_ result: Result<Int, any Error>) {
            let line = (try? result.get()).map(String.init) ?? "failed"
            self.values.withLock { $0.append(line) }
        }

        func waitForGate() async throws {
            while !self.gate.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(1)) }
        }
    }

    @Test func joinersShareOneRunAndEveryObserverIsToldOnce() async throws {
        let flights = SingleFlight<String, Int>()
        let told = Told()
        let runs = Mutex(0)
        var tasks: [Task<Int, any Error>] = []
        var joined: [Bool] = []
        for _ in 0..<5 {
            let (task, didJoin) = try await flights.task(for: "a", admit: {}, observer: { told.record($0) }) { _ in
                runs.withLock { $0 += 1 }
                try await told.waitForGate()
                return 42
            }
            tasks.append(task)
            joined.append(didJoin)
        }
        // A caller without an observer joins as before.
        let (plain, plainJoined) = try await flights.task(for: "a", admit: {}) { _ in 0 }
        #expect(joined == [false, true, true, true, true] && plainJoined)
        #expect(await flights.isRunning("a"))
        #expect(told.values.withLock { $0.isEmpty })
        told.gate.withLock { $0 = true }
        for task in tasks + [plain] { #expect(try await task.value == 42) }
        // Told before the run's value was handed out, and after the key left the table.
        #expect(told.values.withLock { $0 } == Array(repeating: "42", count: 5))
        #expect(await flights.isRunning("a") == false)
        #expect(runs.withLock { $0 } == 1)
    }

    @Test func aFailureIsToldAndARefusedAdmissionStartsNothing() async throws {
        struct Refused: Error {}
        let flights = SingleFlight<String, Int>()
        let told = Told()
        let (task, _) = try await flights.task(for: "b", admit: {}, observer: { told.record($0) }) { _ in
            throw ServiceError.notFound("gone")
        }
        await #expect(throws: ServiceError.self) { try await task.value }
        #expect(told.values.withLock { $0 } == ["failed"])
        // Not admitted: no run, and the observer is never told.
        await #expect(throws: Refused.self) {
            _ = try await flights.task(for: "c", admit: { throw Refused() }, observer: { told.record($0) }) { _ in 1 }
        }
        #expect(await flights.isRunning("c") == false)
        #expect(told.values.withLock { $0 } == ["failed"])
    }
}
