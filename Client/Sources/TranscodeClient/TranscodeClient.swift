import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Typed calls of transcode-server's HTTP API: `POST /transcode` (a URL or bytes), jobs, manifests of signed URLs,
/// `POST /v1/rewrite` and batches. Errors are `TranscodeClientError`, the service's codes as `ServiceErrorCode`.
/// An answer that says the service is busy (429, 503, a transient code) is asked again after its `Retry-After`
/// (or a short backoff), up to `maxRetries` times.
public struct TranscodeClient: Sendable {
    /// The service's base URL (`https://media.example.com`).
    public let baseURL: URL
    /// `Authorization: Bearer` for `POST /transcode`, rewrites and batches, when the service asks for one.
    public let token: String?
    /// Signs the `GET /v1/...` URLs of manifests and files; nil: those calls are refused.
    public let signer: TranscodeURLSigner?
    /// How many times a busy answer is asked again.
    public var maxRetries = 3
    /// The longest wait between two tries, whatever `Retry-After` says, in seconds.
    public var maxRetryDelay = 30.0
    /// How long one request may take, in seconds. A signed GET of a GIF not yet converted waits for its conversion
    /// (an AVIF's can take minutes): URLSession's default of 60 s cut such manifests short (seen in the chooser's
    /// test over the corpus).
    public var requestTimeout = 600.0
    let session: URLSession

    public init(baseURL: URL, token: String? = nil, signer: TranscodeURLSigner? = nil, session: URLSession = .shared) {
        self.baseURL = baseURL
        self.token = token
        self.signer = signer
        self.session = session
    }

    // MARK: POST /transcode

    /// The answer of `POST /transcode`: the object, or a job still running past the service's wait.
    public enum Conversion: Sendable, Equatable {
        case done(Manifest)
        case pending(jobID: String)
    }

    /// Converts the GIF at `url`. - Parameter formats: extras to make beside the MP4 and the poster (`webp`, ...).
    public func transcode(url: String, background: String? = nil, formats: [MediaFile] = []) async throws
        -> Conversion
    {
        var body: [String: Any] = ["url": url]
        if let background { body["background"] = background }
        if !formats.isEmpty { body["formats"] = formats.map(\.rawValue) }
        var request = self.request("POST", "/transcode")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])
        return try await self.conversion(request)
    }

    /// Converts an uploaded GIF (or APNG, or animated WebP: the service reads the file's signature).
    public func transcode(bytes: Data, background: String? = nil, formats: [MediaFile] = []) async throws
        -> Conversion
    {
        var query: [URLQueryItem] = []
        if let background { query.append(URLQueryItem(name: "background", value: background)) }
        if !formats.isEmpty {
            query.append(URLQueryItem(name: "formats", value: formats.map(\.rawValue).joined(separator: ",")))
        }
        var request = self.request("POST", "/transcode", query: query)
        request.setValue("image/gif", forHTTPHeaderField: "Content-Type")
        request.httpBody = bytes
        return try await self.conversion(request)
    }

    private func conversion(_ request: URLRequest) async throws -> Conversion {
        let (data, response) = try await self.send(request, purpose: "transcode")
        if response.statusCode == 202 {
            let job = try Self.decode(JobStatus.self, data)
            return .pending(jobID: job.id)
        }
        return .done(try Self.decode(Manifest.self, data))
    }

    // MARK: Jobs

    /// `GET /jobs/{id}`.
    public struct JobStatus: Sendable, Equatable, Decodable {
        public struct Failure: Sendable, Equatable, Decodable {
            public var code: String
            public var message: String
        }
        public var id: String
        /// `pending`, `done` or `failed`.
        public var status: String
        public var result: Manifest?
        public var error: Failure?
    }

    public func job(_ id: String) async throws -> JobStatus {
        let (data, _) = try await self.send(self.request("GET", "/jobs/" + Self.pathSegment(id)), purpose: "job")
        return try Self.decode(JobStatus.self, data)
    }

    /// Polls a job until it ends. - Throws: the job's error as `.service`, or `.timedOut`.
    public func result(ofJob id: String, timeout: Duration = .seconds(300), every interval: Duration = .seconds(1))
        async throws -> Manifest
    {
        let deadline = ContinuousClock.now + timeout
        while true {
            let status = try await self.job(id)
            if let result = status.result, status.status == "done" { return result }
            if let error = status.error {
                throw TranscodeClientError.service(
                    status: 200, code: ServiceErrorCode(rawValue: error.code), message: error.message, retryAfter: nil)
            }
            guard ContinuousClock.now + interval < deadline else {
                throw TranscodeClientError.timedOut("job \(id) was still \(status.status)")
            }
            try await Task.sleep(for: interval)
        }
    }

    // MARK: Signed GET /v1/...

    /// The absolute signed URL of a GIF's file. - Throws: `.badRequest` without a signer or for options the server
    /// refuses.
    public func url(of gifURL: String, options: RenditionOptions = .none, file: MediaFile = .mp4) throws -> URL {
        guard let signer = self.signer else {
            throw TranscodeClientError.badRequest("signed URLs need the service's signing key and salt")
        }
        return try self.absolute(signer.path(of: gifURL, options: options, file: file))
    }

    /// The manifest of a GIF's object (its signed `.json`), converting it first when the service has not yet.
    public func manifest(of gifURL: String, options: RenditionOptions = .none) async throws -> Manifest {
        let (data, _) = try await self.send(
            URLRequest(url: try self.url(of: gifURL, options: options, file: .json)), purpose: "manifest")
        return try Self.decode(Manifest.self, data)
    }

    // MARK: POST /v1/rewrite

    /// What a rewritten GIF becomes: an `<img>` whose URLs answer by `Accept` (`.auto`), or a `<video>`.
    public enum RewriteOutput: String, Sendable { case img, video }
    /// `lazy` answers at once (GIFs convert on their first view); `eager` converts each GIF first.
    public enum RewriteMode: String, Sendable { case lazy, eager }

    public struct Rewritten: Sendable, Equatable {
        public var html: String
        /// `X-GIFs-Found` and `X-GIFs-Rewritten`.
        public var gifsFound: Int
        public var gifsRewritten: Int
    }

    /// Rewrites a page's GIFs. - Parameter base: the page's own URL, against which relative GIF URLs resolve.
    public func rewrite(
        html: String, base: String? = nil, output: RewriteOutput = .img, mode: RewriteMode = .lazy,
        background: String? = nil
    ) async throws -> Rewritten {
        var query = [
            URLQueryItem(name: "output", value: output.rawValue), URLQueryItem(name: "mode", value: mode.rawValue),
        ]
        if let base { query.append(URLQueryItem(name: "base", value: base)) }
        if let background { query.append(URLQueryItem(name: "background", value: background)) }
        var request = self.request("POST", "/v1/rewrite", query: query)
        request.setValue("text/html; charset=utf-8", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(html.utf8)
        let (data, response) = try await self.send(request, purpose: "rewrite")
        return Rewritten(
            html: String(decoding: data, as: UTF8.self),
            gifsFound: Int(response.value(forHTTPHeaderField: "X-GIFs-Found") ?? "") ?? 0,
            gifsRewritten: Int(response.value(forHTTPHeaderField: "X-GIFs-Rewritten") ?? "") ?? 0)
    }

    // MARK: Batches

    /// What a batch makes: the objects `.auto` answers from (`img`), those of `output=video`, or the plain MP4s.
    public enum BatchOutput: String, Sendable { case img, video, mp4 }

    /// `GET /v1/batches/{id}`: the counts.
    public struct BatchStatus: Sendable, Equatable, Decodable {
        public var id: String
        public var total: Int
        public var pending: Int
        public var done: Int
        public var failed: Int
        public var keptGif: Int
        public var complete: Bool
        public var createdAt: String?
    }

    /// One line of `GET /v1/batches/{id}/results`.
    public struct BatchResult: Sendable, Equatable, Decodable {
        public struct Failure: Sendable, Equatable, Decodable {
            public var code: String
            public var message: String
            public var errorCode: ServiceErrorCode? { ServiceErrorCode(rawValue: self.code) }
        }
        public var index: Int
        public var url: String
        /// `done`, `kept-gif` or `failed`.
        public var status: String
        public var key: String?
        public var mp4: String?
        public var poster: String?
        public var auto: String?
        public var recommendation: Manifest.Recommendation?
        public var error: Failure?
    }

    /// `POST /v1/batches`.
    public func createBatch(urls: [String], output: BatchOutput = .img, callbackURL: String? = nil) async throws
        -> BatchStatus
    {
        var body: [String: Any] = ["urls": urls, "output": output.rawValue]
        if let callbackURL { body["callbackURL"] = callbackURL }
        var request = self.request("POST", "/v1/batches")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])
        let (data, _) = try await self.send(request, purpose: "batch")
        return try Self.decode(BatchStatus.self, data)
    }

    public func batch(_ id: String) async throws -> BatchStatus {
        let (data, _) = try await self.send(
            self.request("GET", "/v1/batches/" + Self.pathSegment(id)), purpose: "batch")
        return try Self.decode(BatchStatus.self, data)
    }

    /// One page of a batch's results, in the order they finished, and where the next page starts.
    public func batchResults(_ id: String, offset: Int = 0, limit: Int = 1000) async throws
        -> (results: [BatchResult], nextOffset: Int)
    {
        let request = self.request(
            "GET", "/v1/batches/\(Self.pathSegment(id))/results",
            query: [URLQueryItem(name: "offset", value: "\(offset)"), URLQueryItem(name: "limit", value: "\(limit)")])
        let (data, response) = try await self.send(request, purpose: "batch")
        let lines = data.split(separator: UInt8(ascii: "\n")).filter { !$0.isEmpty }
        let results = try lines.map { try Self.decode(BatchResult.self, Data($0)) }
        let next = Int(response.value(forHTTPHeaderField: "X-Next-Offset") ?? "") ?? offset + results.count
        return (results, next)
    }

    /// A batch's counts as they change, until it is complete (the last element), read every `interval`.
    public func progress(ofBatch id: String, every interval: Duration = .seconds(1)) -> BatchProgress {
        BatchProgress(client: self, id: id, interval: interval)
    }

    /// `DELETE /v1/batches/{id}`.
    public func deleteBatch(_ id: String) async throws {
        _ = try await self.send(self.request("DELETE", "/v1/batches/" + Self.pathSegment(id)), purpose: "batch")
    }

    // MARK: Sending

    func request(_ method: String, _ path: String, query: [URLQueryItem] = []) -> URLRequest {
        var components = URLComponents(url: self.absolute(path), resolvingAgainstBaseURL: false)
        if !query.isEmpty { components?.queryItems = query }
        var request = URLRequest(url: components?.url ?? self.absolute(path))
        request.httpMethod = method
        if let token { request.setValue("Bearer " + token, forHTTPHeaderField: "Authorization") }
        return request
    }

    func absolute(_ path: String) -> URL {
        var base = self.baseURL.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        return URL(string: base + path) ?? self.baseURL
    }

    /// Sends `request`, asking again while the answer says the service is busy. Each request carries an
    /// `X-Request-Id` that names its purpose (`manifest-<uuid>`, `file-<uuid>`), which the service logs with its
    /// answer: an app's report finds the server's line.
    /// - Throws: `.service` for an error answer (after the retries), or what URLSession threw.
    func send(_ request: URLRequest, purpose: String) async throws -> (Data, HTTPURLResponse) {
        var request = request
        request.timeoutInterval = self.requestTimeout
        if request.value(forHTTPHeaderField: "X-Request-Id") == nil {
            request.setValue(purpose + "-" + UUID().uuidString.lowercased(), forHTTPHeaderField: "X-Request-Id")
        }
        var attempt = 0
        while true {
            let (data, response) = try await self.session.data(for: request)
            guard let http = response as? HTTPURLResponse else {
                throw TranscodeClientError.invalidResponse("not an HTTP answer")
            }
            if (200..<300).contains(http.statusCode) { return (data, http) }
            let error = Self.error(data: data, response: http)
            guard attempt < self.maxRetries, Self.isBusy(error) else { throw error }
            attempt += 1
            try await Task.sleep(for: .seconds(Self.delay(error, attempt: attempt, cap: self.maxRetryDelay)))
        }
    }

    static func isBusy(_ error: TranscodeClientError) -> Bool {
        guard case .service(let status, let code, _, _) = error else { return false }
        return status == 429 || status == 503 || code?.isTransient == true
    }

    /// `Retry-After`, else 0.5 s doubled each attempt; never over `cap`.
    static func delay(_ error: TranscodeClientError, attempt: Int, cap: Double) -> Double {
        if case .service(_, _, _, let retryAfter?) = error { return min(max(retryAfter, 0), cap) }
        return min(0.5 * Double(1 << min(attempt - 1, 10)), cap)
    }

    /// The service's error body (`{"error": {"code", "message"}}`) or `X-Error-Code`, with `Retry-After` (seconds,
    /// or an HTTP date).
    static func error(data: Data, response: HTTPURLResponse) -> TranscodeClientError {
        struct Body: Decodable {
            struct Inner: Decodable {
                var code: String
                var message: String?
            }
            var error: Inner
        }
        let body = try? JSONDecoder().decode(Body.self, from: data)
        let codeText = body?.error.code ?? response.value(forHTTPHeaderField: "X-Error-Code")
        return .service(
            status: response.statusCode, code: codeText.flatMap(ServiceErrorCode.init(rawValue:)),
            message: body?.error.message ?? String(decoding: data.prefix(500), as: UTF8.self),
            retryAfter: Self.retryAfter(response.value(forHTTPHeaderField: "Retry-After")))
    }

    /// `Retry-After` in seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3).
    static func retryAfter(_ text: String?, now: Date = Date()) -> Double? {
        guard let text = text?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let seconds = Int(text) { return Double(max(seconds, 0)) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let date = formatter.date(from: text) else { return nil }
        return max(date.timeIntervalSince(now), 0)
    }

    static func decode<T: Decodable>(_ type: T.Type, _ data: Data) throws -> T {
        do {
            return try JSONDecoder().decode(type, from: data)
        } catch {
            throw TranscodeClientError.invalidResponse(
                "not a \(type) (\(error)): \(String(decoding: data.prefix(300), as: UTF8.self))")
        }
    }

    /// A job's or a batch's id as one path segment (they are hex; anything else is percent-encoded).
    static func pathSegment(_ id: String) -> String {
        id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? id
    }
}

/// A batch's counts, read every interval until it is complete: `for try await status in client.progress(...)`.
/// Each element differs from the one before; the last is complete.
public struct BatchProgress: AsyncSequence, Sendable {
    public typealias Element = TranscodeClient.BatchStatus
    let client: TranscodeClient
    let id: String
    let interval: Duration

    public struct AsyncIterator: AsyncIteratorProtocol {
        let progress: BatchProgress
        var last: TranscodeClient.BatchStatus?

        public mutating func next() async throws -> TranscodeClient.BatchStatus? {
            if self.last?.complete == true { return nil }
            while true {
                if self.last != nil { try await Task.sleep(for: self.progress.interval) }
                let status = try await self.progress.client.batch(self.progress.id)
                if status != self.last {
                    self.last = status
                    return status
                }
            }
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(progress: self) }
}
