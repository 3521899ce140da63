import Foundation

/// Runs a program to its end without blocking a thread of the async executor; its output goes through
/// temporary files (a pipe left unread could fill and stall it). The program is terminated (SIGTERM) after
/// `timeout`, or when the task is cancelled. A `heavy` program (a browser session, a command-line conversion) first
/// waits for one of `WorkSlots.heavy`, and its timeout starts once it has it.
///
/// Tests call programs only through this (or `ChildProcess.exited()`), never by waiting on a thread of the
/// executor: it has as many threads as the machine has cores, two here, and two tests waiting on a browser that
/// way stall every other test in the process until the browser is done.
public func runProcess(
    _ executable: String, _ arguments: [String], timeout: Duration, heavy: Bool = false
) async throws -> (status: Int32, stdout: String, stderr: String) {
    if heavy {
        return try await WorkSlots.heavy.withSlot {
            try await runProcess(executable, arguments, timeout: timeout)
        }
    }
    return try await withTemporaryDirectory { directory in
        let stdoutPath = directory + "/stdout", stderrPath = directory + "/stderr"
        let child = try ChildProcess(
            executable, arguments, standardOutput: .file(stdoutPath), standardError: .file(stderrPath))
        let deadline = ContinuousClock.now + timeout
        while child.isRunning && ContinuousClock.now < deadline && !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(10))
        }
        child.send(SIGTERM)
        let status = await child.exited().status
        func read(_ path: String) -> String {
            String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
        }
        return (status, read(stdoutPath), read(stderrPath))
    }
}
