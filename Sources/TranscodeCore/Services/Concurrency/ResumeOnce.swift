import Synchronization

/// A continuation resumed by whichever of several racers comes first; the others find it gone.
final class ResumeOnce<Value: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<Value, Never>?>(nil)

    func set(_ continuation: CheckedContinuation<Value, Never>) {
        self.continuation.withLock { $0 = continuation }
    }

    func resume(returning value: Value) {
        self.continuation.withLock { $0.take() }?.resume(returning: value)
    }
}
