import Foundation
import TestSupport
import Testing

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
    let run = try await runProcess("/usr/bin/python3", [script] + arguments, timeout: timeout, heavy: true)
    let output = "exit status \(run.status)\nstdout:\n\(run.stdout)\nstderr:\n\(run.stderr)"
    let line = run.stdout.split(separator: "\n").last.map(String.init) ?? ""
    let result = try #require(
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any], "\(output)",
        sourceLocation: sourceLocation)
    return (run.status, result, line, output)
}
