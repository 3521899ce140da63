import ArgumentParser
import Foundation
import TestSupport
import Testing

@testable import TranscodeCore
@testable import TranscodeHTTP
@testable import TranscodeServer

@Suite(.tags(.integration), .timeLimit(.minutes(10))) struct BackfillCommandTests {
    /// A file of URLs through a running service: a CSV in the file's order, each batch's webhook delivered to
    /// `--callback-url`; run again, it resumes from its state file instead of submitting again. Failures after
    /// the options are valid have exit codes of their own (sysexits), not the usage text's 64.
    @Test func backfillsAndResumes() async throws {
        let receiver = WebhookReceiver()
        try await WebhookTests().withReceiver(receiver) { hookPort in
            try await withTemporaryDirectory { directory in
                try await withHarness(configure: {
                    $0.authTokens = ["backfill-token-0123456789"]
                    $0.webhooks.secrets = [WebhookTests.secret]
                }) { harness in
                    let names = Array(BatchTests.gifs.prefix(6))
                    var lines = ["# a comment", ""]
                    lines += names.map { harness.originURL("/corpus/\($0)") }
                    lines.append(harness.originURL("/corpus/missing,\"quoted\".gif"))
                    lines += names.prefix(2).map { harness.originURL("/corpus/\($0)?again") }
                    let file = directory + "/urls.txt"
                    try lines.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
                    let arguments = [
                        "--server", "http://127.0.0.1:\(harness.appPort)", "--token", "backfill-token-0123456789", file,
                        "--chunk", "4", "--poll-seconds", "0.1",
                    ]
                    try await BackfillCommand.parse(
                        arguments + ["--callback-url", "http://127.0.0.1:\(hookPort)/hook"]
                    ).run()
                    #expect(harness.localBatches.count == 3)
                    // One batch.done per batch, at the callback URL.
                    try await receiver.wait(for: 3)
                    #expect(receiver.deliveries.count == 3)
                    let csv = try String(contentsOfFile: file + ".csv", encoding: .utf8)
                    let rows = csv.split(separator: "\n").map(String.init)
                    #expect(rows.first == "url,status,mp4,poster,recommendation,error")
                    try #require(rows.count == 1 + 9, "\(rows)")
                    for (row, name) in zip(rows.dropFirst(), names) {
                        #expect(row.hasPrefix(harness.originURL("/corpus/\(name)") + ","))
                        #expect(row.contains(",done,") || row.contains(",kept-gif,"), "\(row)")
                        #expect(row.contains("/media/"))
                    }
                    // The quoted URL is escaped as CSV asks, and failed.
                    #expect(
                        rows[7].hasPrefix("\"" + harness.originURL("/corpus/missing,\"\"quoted\"\".gif") + "\",failed,")
                    )
                    let state = try #require(FileManager.default.contents(atPath: file + ".backfill.json"))
                    let saved = try JSONDecoder().decode(BackfillCommand.State.self, from: state)
                    #expect(saved.chunks.map(\.count) == [4, 4, 1])
                    // Each chunk's requests carry its own route key: behind a balancer the chunks spread over the
                    // nodes, and each batch's polls reach the node that took it.
                    #expect(saved.chunks.map(\.route) == [0, 4, 8].map { "/v1/batches/chunk-\($0)" })
                    // A state written before chunks had their own key keeps the one they all had.
                    let old = try JSONDecoder().decode(
                        BackfillCommand.State.Chunk.self, from: Data(#"{"start":0,"count":4,"id":"x"}"#.utf8))
                    #expect(old.route == "/v1/batches")

                    // Again: the saved batches are followed, none submitted.
                    try FileManager.default.removeItem(atPath: file + ".csv")
                    try await BackfillCommand.parse(arguments).run()
                    #expect(harness.localBatches.count == 3)
                    #expect(try String(contentsOfFile: file + ".csv", encoding: .utf8) == csv)

                    // Another cut of the same list does not resume from this state: 65 (data).
                    await #expect(throws: ExitCode(65)) {
                        try await BackfillCommand.parse(Array(arguments.dropLast(4)) + ["--chunk", "5"]).run()
                    }

                    // Without the token, the service refuses it, and the command says so: 77 (no permission).
                    await #expect(throws: ExitCode(77)) {
                        try await BackfillCommand.parse([
                            "--server", "http://127.0.0.1:\(harness.appPort)", file, "--state",
                            directory + "/other.json",
                        ]).run()
                    }
                    // A file that cannot be read: 66; a service that does not answer: 69.
                    await #expect(throws: ExitCode(66)) {
                        try await BackfillCommand.parse(["--server", "http://127.0.0.1:1", directory + "/none.txt"])
                            .run()
                    }
                    await #expect(throws: ExitCode(69)) {
                        try await BackfillCommand.parse([
                            "--server", "http://127.0.0.1:\(try freePort())", file, "--state",
                            directory + "/third.json",
                        ]).run()
                    }
                }
            }
        }
    }
}
