import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import Synchronization
import TranscodeCore
import TranscodeHTTP

/// `transcode-server backfill --server URL [--token T] FILE`: converts every GIF URL of FILE (one per line)
/// through a running service's batches, with a progress bar, resuming where it stopped, and writes a CSV of
/// URL → MP4 URL, poster URL and recommendation.
struct BackfillCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backfill",
        abstract: "Convert a file of GIF URLs through a running service (batches), writing a CSV of the results.",
        discussion: """
            FILE has one URL per line (blank lines and lines starting with # are skipped). The URLs go to \
            POST /v1/batches in chunks; the batch ids are kept in a state file (FILE.backfill.json), so running \
            the same command again resumes: submitted chunks are not submitted again. Progress (done, rate, ETA) \
            goes to standard error; an interrupt (Ctrl-C) prints how far it got and how to resume. The CSV \
            (FILE.csv) has url,status,mp4,poster,recommendation,error in the order of FILE; status is done, \
            kept-gif or failed.

            Exit codes: 0 done; 64 a bad option; 65 FILE has no URLs, or the state file is another run's; 66 FILE \
            cannot be read; 69 the service cannot be reached or answered an error; 77 the service refused the \
            token; 130 interrupted.
            """)

    @Option(name: .long, help: "The service, e.g. https://media.example.com")
    var server: String

    @Option(name: .long, help: "A bearer token of the service (auth.tokens).")
    var token: String?

    @Argument(help: "The file of GIF URLs.")
    var file: String

    @Option(name: .long, help: "The CSV written at the end (default: FILE.csv).")
    var out: String?

    @Option(name: .long, help: "The state file (default: FILE.backfill.json).")
    var state: String?

    @Option(name: .long, help: "URLs per batch (at most the service's batch.maxUrls).")
    var chunk = 10_000

    @Option(name: .long, help: "Seconds between progress polls.")
    var pollSeconds = 1.0

    @Option(
        name: .long,
        help: "Where the service POSTs each batch's batch.done webhook (needs webhooks.secrets on the service).")
    var callbackURL: String?

    /// A failure once the options are valid: said in one line, with its own exit code, without the usage text.
    struct Failure: Error, CustomStringConvertible {
        let message: String
        /// sysexits(3): 65 data, 66 no input, 69 unavailable, 77 no permission.
        let exitCode: Int32
        var description: String { self.message }
    }

    /// The batches submitted so far: what lets a second run resume.
    struct State: Codable {
        struct Chunk: Codable {
            var start: Int
            var count: Int
            var id: String
            /// The `X-Route-Key` its requests carry; nil in a state written before chunks had their own
            /// (`Chunk.sharedRouteKey`).
            var routeKey: String?

            /// Behind a fleet's balancer, every request about a batch must reach the node that took it (on one
            /// node, or `queue.kind: local`): each chunk has its own key, so chunks spread over the nodes and
            /// each batch's polls follow it.
            static func routeKey(start: Int) -> String { "/v1/batches/chunk-\(start)" }
            /// What every chunk carried before.
            static let sharedRouteKey = "/v1/batches"
            var route: String { self.routeKey ?? Self.sharedRouteKey }
        }
        var server: String
        var total: Int
        /// SHA-256 of the URL list and the chunk size: a state is resumed only for the same list, cut the same way.
        var fingerprint: String = ""
        var chunks: [Chunk] = []
    }

    func validate() throws {
        guard let url = URL(string: self.server), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
            throw ValidationError("--server must be an http(s) URL, got \(self.server)")
        }
        guard self.chunk > 0 else { throw ValidationError("--chunk must be positive") }
    }

    func run() async throws {
        let progress = RunProgress()
        let interrupt = Self.onInterrupt { progress.interrupted() }
        defer { Self.stop(interrupt) }
        do {
            // A service that cannot be reached fails the run at once (69) rather than after the client's retries for
            // a minute: the state file makes running again cheap.
            var configuration = HTTPClient.Configuration()
            configuration.connectionPool.retryConnectionEstablishment = false
            configuration.timeout.connect = .seconds(10)
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            do {
                try await self.backfill(progress: progress, client: client)
            } catch {
                try? await client.shutdown()
                throw error
            }
            try await client.shutdown()
        } catch let failure as Failure {
            Self.say(failure.message)
            throw ExitCode(failure.exitCode)
        }
    }

    /// How far the run got, for the summary an interrupt prints.
    final class RunProgress: Sendable {
        private let state = Mutex<(finished: Int, total: Int, submitted: Int, statePath: String?)>((0, 0, 0, nil))

        func update(finished: Int? = nil, total: Int? = nil, submitted: Int? = nil, statePath: String? = nil) {
            self.state.withLock {
                if let finished { $0.finished = finished }
                if let total { $0.total = total }
                if let submitted { $0.submitted = submitted }
                if let statePath { $0.statePath = statePath }
            }
        }

        /// Prints where the run stopped and how to resume, and ends the process (130: ended by SIGINT).
        func interrupted() -> Never {
            let (finished, total, submitted, statePath) = self.state.withLock { $0 }
            var text = "interrupted: \(finished) of \(total) URLs done, \(submitted) batch(es) submitted"
            if let statePath {
                text += "; the service goes on with them. Run the same command again to follow them and get the CSV "
                text += "(state in \(statePath))"
            }
            // On a line of its own, after the progress bar's.
            FileHandle.standardError.write(Data(("\ntranscode-server backfill: " + text + "\n").utf8))
            Foundation.exit(130)
        }
    }

    /// Calls `handler` on SIGINT instead of the default (which ends the process without a word).
    private static func onInterrupt(_ handler: @escaping @Sendable () -> Void) -> any DispatchSourceSignal {
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler(handler: handler)
        source.resume()
        return source
    }

    private static func stop(_ source: any DispatchSourceSignal) {
        source.cancel()
        signal(SIGINT, SIG_DFL)
    }

    private func backfill(progress: RunProgress, client: HTTPClient) async throws {
        guard let text = try? String(contentsOfFile: self.file, encoding: .utf8) else {
            throw Failure(message: "cannot read \(self.file)", exitCode: 66)
        }
        let urls = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        guard !urls.isEmpty else { throw Failure(message: "\(self.file) has no URLs", exitCode: 65) }
        progress.update(total: urls.count)
        let statePath = self.state ?? self.file + ".backfill.json"
        let server = self.server.hasSuffix("/") ? String(self.server.dropLast()) : self.server
        let fingerprint = HexDigest.encode(
            SHA256.hash(data: Array((urls + ["chunk \(self.chunk)"]).joined(separator: "\n").utf8)))
        var state = State(server: server, total: urls.count, fingerprint: fingerprint)
        if let data = FileManager.default.contents(atPath: statePath) {
            guard let saved = try? JSONDecoder().decode(State.self, from: data), saved.server == server,
                saved.fingerprint == fingerprint
            else {
                throw Failure(
                    message:
                        "\(statePath) is the state of another run (another server, list or --chunk): remove it to "
                        + "start afresh, or give --state another file", exitCode: 65)
            }
            state = saved
            Self.say("resuming: \(saved.chunks.count) batch(es) already submitted")
        }
        progress.update(submitted: state.chunks.count, statePath: statePath)
        // Submit the chunks not submitted yet, saving the state after each.
        for start in stride(from: 0, to: urls.count, by: self.chunk)
        where !state.chunks.contains(where: { $0.start == start }) {
            let count = min(self.chunk, urls.count - start)
            let route = State.Chunk.routeKey(start: start)
            let id = try await self.submit(
                Array(urls[start..<(start + count)]), server: server, route: route, client: client)
            state.chunks.append(.init(start: start, count: count, id: id, routeKey: route))
            try Self.save(state, to: statePath)
            progress.update(submitted: state.chunks.count)
        }
        try Self.save(state, to: statePath)
        try await self.follow(state, server: server, progress: progress, client: client)
        // Every batch complete: the CSV, in the file's order.
        var rows = [[String]](repeating: [], count: urls.count)
        for chunk in state.chunks {
            for result in try await self.results(chunk.id, server: server, route: chunk.route, client: client)
            where result.index < chunk.count {
                rows[chunk.start + result.index] = [
                    result.url, result.status.rawValue, result.mp4 ?? "", result.poster ?? "",
                    result.recommendation ?? "",
                    result.error.map { "\($0.code): \($0.message)" } ?? "",
                ]
            }
        }
        var csv = "url,status,mp4,poster,recommendation,error\n"
        for (index, row) in rows.enumerated() {
            let fields = row.isEmpty ? [urls[index], "missing", "", "", "", ""] : row
            csv += fields.map(Self.csvField).joined(separator: ",") + "\n"
        }
        let outPath = self.out ?? self.file + ".csv"
        try Data(csv.utf8).write(to: URL(fileURLWithPath: outPath), options: .atomic)
        let statuses = rows.map { $0.count > 1 ? $0[1] : "missing" }
        let summary = [ItemStatus.done, .keptGIF, .failed].map { status in
            "\(statuses.filter { $0 == status.rawValue }.count) \(status.rawValue)"
        }.joined(separator: ", ")
        Self.say("\(urls.count) URLs: \(summary); results in \(outPath)")
    }

    // MARK: -

    private func submit(_ urls: [String], server: String, route: String, client: HTTPClient) async throws -> String {
        var fields: [String: Any] = ["urls": urls]
        if let callbackURL = self.callbackURL { fields["callbackURL"] = callbackURL }
        let body = try JSONSerialization.data(withJSONObject: fields)
        let (status, bytes) = try await self.send(
            "POST", "\(server)/v1/batches", route: route, body: [UInt8](body), client: client)
        guard status == 202,
            let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
            let id = object["id"] as? String
        else { throw Self.failure("POST /v1/batches", status, bytes) }
        return id
    }

    /// Polls every batch until all are complete, drawing the progress bar.
    private func follow(_ state: State, server: String, progress: RunProgress, client: HTTPClient) async throws {
        let started = ContinuousClock.now
        var first: Int?
        while true {
            var finished = 0
            var complete = true
            for chunk in state.chunks {
                let (status, bytes) = try await self.send(
                    "GET", "\(server)/v1/batches/\(chunk.id)", route: chunk.route, client: client)
                guard status == 200, let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
                else { throw Self.failure("GET /v1/batches/\(chunk.id)", status, bytes) }
                finished += (object["total"] as? Int ?? 0) - (object["pending"] as? Int ?? 0)
                complete = complete && object["complete"] as? Bool == true
            }
            if first == nil { first = finished }
            progress.update(finished: finished)
            let elapsed = Double((ContinuousClock.now - started).components.seconds) + 0.001
            // No rate until this run has seen items finish (a resumed run starts with those done before).
            let rate = finished > (first ?? 0) ? Double(finished - (first ?? 0)) / elapsed : nil
            Self.progress(finished: finished, total: state.total, rate: rate, final: complete)
            if complete { return }
            try await Task.sleep(for: .milliseconds(Int64(self.pollSeconds * 1000)))
        }
    }

    private func results(_ id: String, server: String, route: String, client: HTTPClient) async throws
        -> [BatchResult]
    {
        var results: [BatchResult] = []
        var offset = 0
        while true {
            let (status, bytes, next) = try await self.page(
                id, offset: offset, server: server, route: route, client: client)
            guard status == 200 else { throw Self.failure("GET /v1/batches/\(id)/results", status, bytes) }
            for line in bytes.split(separator: UInt8(ascii: "\n")) {
                if let result = try? JSONDecoder().decode(BatchResult.self, from: Data(line)) { results.append(result) }
            }
            guard let next else { return results }
            offset = next
        }
    }

    private func page(_ id: String, offset: Int, server: String, route: String, client: HTTPClient) async throws -> (
        Int, [UInt8], Int?
    ) {
        let response = try await self.execute(
            "GET", "\(server)/v1/batches/\(id)/results?offset=\(offset)&limit=10000", route: route, client: client)
        let bytes = Array(buffer: try await response.body.collect(upTo: 64 << 20))
        return (Int(response.status.code), bytes, response.headers.first(name: "X-Next-Offset").flatMap(Int.init))
    }

    private func send(
        _ method: String, _ url: String, route: String, body: [UInt8]? = nil, client: HTTPClient
    ) async throws -> (Int, [UInt8]) {
        let response = try await self.execute(method, url, route: route, body: body, client: client)
        return (Int(response.status.code), Array(buffer: try await response.body.collect(upTo: 16 << 20)))
    }

    private func execute(
        _ method: String, _ url: String, route: String, body: [UInt8]? = nil, client: HTTPClient
    ) async throws -> HTTPClientResponse {
        var request = HTTPClientRequest(url: url)
        request.method = .init(rawValue: method)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        // Behind a fleet's balancer every request about a batch reaches the node that holds it (`Chunk.routeKey`).
        request.headers.add(name: "X-Route-Key", value: route)
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        do {
            return try await client.execute(request, timeout: .seconds(60))
        } catch {
            throw Failure(message: "\(method) \(url): cannot reach the service: \(error)", exitCode: 69)
        }
    }

    private static func failure(_ what: String, _ status: Int, _ bytes: [UInt8]) -> Failure {
        Failure(
            message: "\(what) answered \(status): \(String(decoding: bytes.prefix(300), as: UTF8.self))"
                + (status == 401 || status == 403 ? " (check --token against the service's auth.tokens)" : ""),
            exitCode: status == 401 || status == 403 ? 77 : 69)
    }

    private static func save(_ state: State, to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(state).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// `[#####.....] 1234/5000 24.7%  12.3/s  ETA 5m06s`, redrawn in place (`--/s` before any rate is known).
    private static func progress(finished: Int, total: Int, rate: Double?, final: Bool) {
        let width = 30
        let filled = total > 0 ? min(width, finished * width / total) : width
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        let percent = total > 0 ? Double(finished) * 100 / Double(total) : 100
        var eta = "--"
        if let rate, rate > 0 {
            let seconds = Int(Double(total - finished) / rate)
            eta = seconds >= 60 ? "\(seconds / 60)m\(String(format: "%02d", seconds % 60))s" : "\(seconds)s"
        }
        let speed = rate.map { String(format: "%.1f/s", $0) } ?? "--/s"
        let line = String(format: "\r[%@] %d/%d %.1f%%  %@  ETA %@", bar, finished, total, percent, speed, eta)
        FileHandle.standardError.write(Data((line + (final ? "\n" : "")).utf8))
    }

    private static func say(_ text: String) {
        FileHandle.standardError.write(Data("transcode-server backfill: \(text)\n".utf8))
    }

    static func csvField(_ text: String) -> String {
        guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
