import Synchronization

/// A count of things held at once, up to `limit`, that refuses instead of waiting: connections open
/// (`ConnectionLimit`), documents taken for parsing (`RewriteController`). `AsyncLimit` is the one that waits.
package final class CountingLimit: Sendable {
    package let limit: Int
    private let held = Atomic<Int>(0)

    package init(limit: Int) {
        self.limit = limit
    }

    /// Counts one more when there is room. - Returns: false when the limit is reached (nothing is counted).
    package func take() -> Bool {
        guard self.held.wrappingAdd(1, ordering: .relaxed).newValue <= self.limit else {
            self.held.wrappingSubtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Gives back what `take()` counted.
    package func give() {
        self.held.wrappingSubtract(1, ordering: .relaxed)
    }
}
