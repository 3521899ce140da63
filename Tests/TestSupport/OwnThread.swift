import Foundation

/// Runs `body` on a thread of its own and waits for it without blocking: for synchronous CPU work in tests (a
/// conversion), which on the cooperative pool would hold one of its few threads (two on a two-core machine) and
/// stall every other test's async work until it ends. The server runs conversions on a thread pool for the same
/// reason.
public func onOwnThread<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) async throws -> Value {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try body() })
        }
        // Large enough for the decoders' and x264's own stacks.
        thread.stackSize = 8 << 20
        thread.start()
    }
}
