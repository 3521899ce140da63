import Foundation
import TestSupport
import Testing

/// Runs a program to its end without blocking a thread of the async executor; its output goes through
/// temporary files (a pipe left unread could fill and stall it). The program is terminated (SIGTERM) after
/// `timeout`, or when the task is cancelled.
func runProcess(
    _ executable: String, _ arguments: [String], timeout: Duration
) async throws -> (status: Int32, stdout: String, stderr: String) {
    try await withTemporaryDirectory { directory in
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

/// Fails (never skips) when headless Chromium is not installed; `.ci/run` and `make test` install it.
func requireChromium(sourceLocation: SourceLocation = #_sourceLocation) throws {
    let install = "install them with: apt-get install -y chromium chromium-driver python3-selenium"
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver", "/usr/bin/python3"] {
        try #require(
            FileManager.default.isExecutableFile(atPath: tool), "\(tool) is missing; \(install)",
            sourceLocation: sourceLocation)
    }
}

/// Runs a browser script (`/usr/bin/python3 SCRIPT ARGUMENTS`) that prints one JSON object as its last line,
/// and returns that object (and the line itself); the whole output goes into every failure message.
func runBrowserScript(
    _ script: String, _ arguments: [String], timeout: Duration, sourceLocation: SourceLocation = #_sourceLocation
) async throws -> (status: Int32, result: [String: Any], line: String, output: String) {
    try requireChromium(sourceLocation: sourceLocation)
    let run = try await runProcess("/usr/bin/python3", [script] + arguments, timeout: timeout)
    let output = "exit status \(run.status)\nstdout:\n\(run.stdout)\nstderr:\n\(run.stderr)"
    let line = run.stdout.split(separator: "\n").last.map(String.init) ?? ""
    let result = try #require(
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any], "\(output)",
        sourceLocation: sourceLocation)
    return (run.status, result, line, output)
}
