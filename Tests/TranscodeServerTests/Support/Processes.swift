import Foundation
import Testing

/// Runs a program to its end without blocking a thread of the async executor; its output goes through
/// temporary files (a pipe left unread could fill and stall it). The program is terminated after `timeout`.
func runProcess(
    _ executable: String, _ arguments: [String], timeout: Duration
) async throws -> (status: Int32, stdout: String, stderr: String) {
    try await withTemporaryDirectory { directory in
        let stdoutPath = directory + "/stdout", stderrPath = directory + "/stderr"
        for path in [stdoutPath, stderrPath] {
            try #require(FileManager.default.createFile(atPath: path, contents: nil), "cannot create \(path)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: stdoutPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
        let status = try await withThrowingTaskGroup(of: Int32?.self) { group in
            group.addTask {
                try await withCheckedThrowingContinuation { continuation in
                    process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
                    do {
                        try process.run()
                    } catch {
                        process.terminationHandler = nil
                        continuation.resume(throwing: error)
                    }
                }
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                process.terminate()
                return nil
            }
            // The first answer is the exit status, unless the watchdog fired first; then the status follows.
            while let next = try await group.next() {
                if let status = next {
                    group.cancelAll()
                    return status
                }
            }
            return -1
        }
        func read(_ path: String) -> String {
            String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
        }
        return (status, read(stdoutPath), read(stderrPath))
    }
}
