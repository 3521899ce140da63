import Foundation
import TestSupport
import Testing

/// The way the tests start programs: it must work with more descriptors open than the whole suite holds at
/// its peak (about 1,350), and leak none of them into the child.
@Suite(.tags(.integration, .childProcess), .timeLimit(.minutes(10))) struct ChildProcessTests {
    @Test func manyOpenDescriptorsAreNeitherAProblemNorInherited() throws {
        let opened = (0..<2_000).map { _ in open("/dev/null", O_RDONLY) }
        defer { opened.forEach { close($0) } }
        try #require(opened.allSatisfy { $0 >= 0 }, "cannot open 2,000 descriptors (ulimit -n?)")
        let child = try ChildProcess("/bin/ls", ["/proc/self/fd"], standardOutput: .pipe)
        let listing = String(decoding: child.readOutput(), as: UTF8.self).split(separator: "\n")
        #expect(child.waitUntilExit() == .exited(0))
        // 0, 1 and 2, and the descriptor ls reads the directory with.
        #expect(listing.count == 4, "\(listing)")
    }

    @Test func exitCodesSignalsAndMissingPrograms() async throws {
        #expect(try ChildProcess("/bin/sh", ["-c", "exit 3"]).waitUntilExit() == .exited(3))
        let sleeper = try ChildProcess("sleep", ["30"])
        #expect(sleeper.isRunning)
        sleeper.send(SIGKILL)
        #expect(await sleeper.exited() == .signaled(SIGKILL))
        #expect(!sleeper.isRunning)
        #expect(throws: ChildProcess.SpawnError.self) { try ChildProcess("/nonexistent/program", []) }
    }

    @Test func outputGoesWhereItIsSent() throws {
        try withTemporaryDirectorySync { directory in
            let log = directory + "/log"
            for word in ["one", "two"] {
                _ = try ChildProcess("/bin/sh", ["-c", "echo \(word); echo \(word) >&2"], standardOutput: .file(log))
                    .waitUntilExit()
            }
            #expect(try String(contentsOfFile: log, encoding: .utf8) == "one\ntwo\n")
        }
    }
}
