import Foundation
import HTTPTypes
import Hummingbird
import NIOPosix
import Synchronization
import TranscodeCore
import Transcoder

/// `POST /transcode` and `GET /jobs/{id}`.
package struct TranscodeController<Context: RequestContext>: Sendable {
    let service: TranscodeService
    let maxBodyBytes: Int
    /// How long an upload's body may take (`http.bodyTimeoutSeconds`).
    let bodyTimeout: Duration
    /// Where uploads are received (the cache's `tmp/`).
    let temporaryDirectory: String
    /// Absolute URLs under `http.publicBaseURL`, and the signed GET URLs of a source.
    let links: PublicLinks
    /// Where `callbackURL`s are delivered.
    let webhooks: WebhookDispatcher
    /// Answers already encoded, by everything they are made of.
    let encoded: EncodedResults
    /// The JSON bodies answered, for `MediaHitHandler`'s hits.
    let resolved: ResolvedBodies

    package init(
        service: TranscodeService, maxBodyBytes: Int, bodyTimeout: Duration, temporaryDirectory: String,
        links: PublicLinks, webhooks: WebhookDispatcher, tables: HitTables
    ) {
        self.service = service
        self.maxBodyBytes = maxBodyBytes
        self.bodyTimeout = bodyTimeout
        self.temporaryDirectory = temporaryDirectory
        self.links = links
        self.webhooks = webhooks
        self.encoded = tables.encoded
        self.resolved = tables.bodies
    }

    package func addRoutes(to router: Router<Context>, authenticator: BearerAuthenticator<Context>) {
        router.group(RouterPath(ResponsePolicy.transcode.routerPath)).add(middleware: authenticator).post(
            use: self.transcode)
        router.get("jobs/{id}", use: self.job)
    }

    private struct URLRequestBody: Decodable {
        let url: String
        let background: String?
        let callbackURL: String?
        let formats: [String]?
    }

    /// The fields of a JSON request (and, but for `url`, the query of an upload). Anything else is refused by
    /// name, so a typo (`backgound`) or an option the service does not offer (`crf`) is not silently ignored.
    static var requestFields: [String] { ["url", "background", "callbackURL", "formats"] }

    /// Refuses a query parameter `POST /transcode` does not take (`background`, `callbackURL` and `formats` only,
    /// for a JSON body as for an upload), rather than ignoring it.
    static func checkQuery(_ request: Request) throws {
        try StrictQuery.check(request, allowed: ["background", "callbackURL", "formats"], route: "POST /transcode")
    }

    /// The formats a request can name: those every object has, and the extras it may ask for.
    static var requestableFormats: [OutputFormat] { ObjectFiles.media + ObjectFiles.extras }

    /// The extras among `names` (a JSON body's `formats`), or else among the query's comma-separated `formats`,
    /// checked before any download: `mp4` and `jpg` are always made; `webp` adds an animated WebP that keeps
    /// transparency, `avif` an animated AVIF (of a source that loops forever), `webm` VP9 with alpha in WebM.
    /// - Throws: `bad-request` naming a format the service does not make.
    static func extraFormats(_ names: [String]? = nil, query: String?) throws -> [OutputFormat] {
        var extras: [OutputFormat] = []
        // Every entry of the list counts: an empty one (`webp,,avif`, a trailing comma) is a mistake, not nothing.
        for name in names ?? query.map({ $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) })
            ?? []
        {
            guard let format = self.requestableFormats.first(where: { $0.name == name }) else {
                let known = self.requestableFormats.map(\.name).joined(separator: ", ")
                throw ServiceError.badRequest("unknown format \"\(name)\"; the formats are \(known)")
            }
            if ObjectFiles.extras.contains(format), !extras.contains(format) { extras.append(format) }
        }
        return extras
    }

    /// The bodies taken as the animation itself. Which format it is, is told by its signature, not by this.
    static var uploadMediaTypes: [String] {
        ["image/gif", "image/png", "image/apng", "image/webp", "application/octet-stream"]
    }

    @Sendable func transcode(_ request: Request, context: Context) async throws -> Response {
        let contentType = request.headers[.contentType]?.lowercased() ?? ""
        let answer: TranscodeAnswer
        var signed: SignedLinks?
        var sourceURL: String?
        if Self.uploadMediaTypes.contains(where: { contentType.hasPrefix($0) }) {
            let limit = min(self.service.defaultOptions.limits.maxInputBytes, self.maxBodyBytes)
            try Self.checkDeclaredLength(request, limit: limit)
            try Self.checkQuery(request)
            let background = try Self.background(request.uri.queryParameters.get("background"))
            let extras = try Self.extraFormats(query: request.uri.queryParameters.get("formats"))
            let options = self.service.options(background: background, extraFormats: extras)
            let callback = try await request.uri.queryParameters.get("callbackURL").asyncMap {
                try await self.webhooks.validate($0)
            }
            // Turned away before a byte of the body is read when no job could start now, or the client has no
            // token left (an upload spends work whatever it turns out to be: the body's read and hashed).
            try self.service.pool.checkRoom()
            try await self.service.chargeQuota()
            let path = try await UploadReceiver.receive(
                request.body, limit: limit, timeout: self.bodyTimeout, into: self.temporaryDirectory)
            defer { unlink(path) }
            let gif = try await ReceivingFile.readAll(path, what: "received upload")
            let keys = try await self.service.uploadKeys(gif, options: options)
            // The webhook reports a failure of the request too.
            let subscriber = callback.map { self.notify($0, id: keys.key.rawValue, url: nil) }
            answer = try await self.service.transcode(upload: gif, keys: keys, options: options, subscriber: subscriber)
        } else if contentType.hasPrefix("application/json") {
            // The query's background and callbackURL count too (as for an upload), checked before the body is
            // read; the body's fields win.
            try Self.checkQuery(request)
            let buffer = try await Self.collect(request, upTo: min(64 * 1024, self.maxBodyBytes))
            let fields = (try? JSONSerialization.jsonObject(with: Data(buffer.readableBytesView))) as? [String: Any]
            if let unknown = fields?.keys.sorted().first(where: { !Self.requestFields.contains($0) }) {
                throw ServiceError.badRequest(
                    "unknown field \"\(unknown)\"; the fields are \(Self.requestFields.joined(separator: " and "))")
            }
            let body: URLRequestBody
            do {
                body = try JSONDecoder().decode(URLRequestBody.self, from: buffer)
            } catch {
                throw ServiceError.badRequest("expected JSON {\"url\": \"https://...\", \"background\": \"#ffffff\"}")
            }
            let query = request.uri.queryParameters
            let callbackURL = body.callbackURL ?? query.get("callbackURL")
            let url = try Downloader.validate(body.url)
            let background = try Self.background(body.background ?? query.get("background"))
            let extras = try Self.extraFormats(body.formats, query: query.get("formats"))
            let options = self.service.options(background: background, extraFormats: extras)
            let callback = try await callbackURL.asyncMap { try await self.webhooks.validate($0) }
            let keys = SourceKeys(url: url, options: options)
            let subscriber = callback.map { self.notify($0, id: keys.urlKey.rawValue, url: body.url) }
            answer = try await self.service.transcode(url: url, options: options, keys: keys, subscriber: subscriber)
            signed = self.links.signed(sourceURL: body.url, background: background, extras: extras)
            sourceURL = body.url
            // Without a webhook to queue, the same body's next hit may be answered by MediaHitHandler.
            // Nor with a query: the fast path matches the body alone.
            if case .done = answer, callbackURL == nil, request.uri.queryParameters.isEmpty {
                self.resolved.set(
                    buffer.readableBytesView,
                    .init(keys: keys, signed: signed, sourceURL: body.url))
            }
        } else {
            throw ServiceError(
                .unsupportedMediaType,
                "send JSON (application/json) with a url, or the animation itself (image/gif, image/png, "
                    + "image/apng, image/webp)")
        }
        switch answer {
        case .done(let outcome, let cacheHit):
            let result = TranscodeResult(
                outcome, baseURL: self.links.baseURL, signed: signed, sourceURL: sourceURL)
            var response = Self.json(body: try self.encoded.body(for: result, encode: Self.jsonBytes))
            response.headers[HTTPField.Name("X-Cache")!] = cacheHit ? "hit" : "miss"
            return response
        case .pending(let id):
            var response = try Self.json(
                JobReport(id: id, state: .pending, baseURL: self.links.baseURL), status: .accepted)
            response.headers[.location] = self.links.absolute("/jobs/\(id)")
            response.headers[.retryAfter] = "2"
            return response
        }
    }

    @Sendable func job(_ request: Request, context: Context) async throws -> Response {
        let id = try context.parameters.require("id")
        guard let state = try await self.service.job(id) else {
            throw ServiceError.notFound("no job \(id)")
        }
        return try Self.json(JobReport(id: id, state: state, baseURL: self.links.baseURL))
    }

    /// Queues the webhook of job `id`, sent once the request it subscribes to ends (a cache hit and a refusal
    /// end at once). - Returns: the subscription to pass with the request.
    private func notify(_ callback: URL, id: String, url: String?) -> JobSubscription {
        let baseURL = self.links.baseURL
        let ended = JobSubscription()
        self.webhooks.enqueue(
            WebhookDelivery(url: callback) {
                let event = JobReport(id: id, url: url, state: .ended(await ended.end()), baseURL: baseURL)
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                let data = (try? encoder.encode(event)).map { [UInt8]($0) } ?? Array("{}".utf8)
                return (event.webhookType, data)
            })
        return ended
    }

    /// Refuses a body whose declared length is over `limit` before reading any of it.
    private static func checkDeclaredLength(_ request: Request, limit: Int) throws {
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit {
            throw ServiceError.tooLarge("the request body is \(length) bytes; the limit is \(limit)")
        }
    }

    static func collect(_ request: Request, upTo limit: Int) async throws -> ByteBuffer {
        try self.checkDeclaredLength(request, limit: limit)
        do {
            return try await request.body.collect(upTo: limit)
        } catch {
            throw ServiceError.tooLarge("the request body is larger than \(limit) bytes")
        }
    }

    static func background(_ text: String?) throws -> RGBColor? {
        guard let text else { return nil }
        guard let color = RGBColor(hex: text) else {
            throw ServiceError.badRequest("background must be #RRGGBB, got \(text)")
        }
        return color
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        Self.json(body: try Self.jsonBytes(value), status: status)
    }

    /// `value` as the JSON of an answer (sorted keys: the same value, the same bytes).
    static func jsonBytes(_ value: some Encodable) throws -> ByteBuffer {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return ByteBuffer(bytes: try encoder.encode(value))
    }

    static func json(body: ByteBuffer, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: body))
    }
}

/// `POST /transcode` JSON bodies (up to `maxBytes`) the route has answered with a result, and what it made of
/// them: the URL, its keys and signed links. `MediaHitHandler` answers the same body's hits from this and the
/// cache, checking afresh everything that may have changed (the token, the link's freshness, the files,
/// takedowns). A body with a `callbackURL` is never kept (its webhook is queued by the route). Bounded
/// (emptied when full).
final class ResolvedBodies: Sendable {
    struct Target: Sendable {
        let keys: SourceKeys
        let signed: SignedLinks?
        /// The GIF's URL as the body gave it (a keep-gif result's snippet is the GIF's `<img>`).
        var sourceURL: String?
    }

    /// As many as `EncodedResults` keeps (4,096 answers of a kilobyte or two were already a visible part of
    /// the server's memory in `scripts/soak`).
    static var capacity: Int { 4096 }
    /// What the kept bodies may add up to (anyone with a token, or anyone without tokens, can make many
    /// bodies of one URL).
    static var capacityBytes: Int { 4 << 20 }
    static var maxBytes: Int { 4096 }
    private let targets = Mutex<(bodies: [Body: Target], bytes: Int)>(([:], 0))

    /// A body as a dictionary key, hashed in one call over its bytes (`[UInt8]`'s own hash feeds the hasher a
    /// byte at a time: a percent of a cache-hit `POST /transcode`).
    private struct Body: Hashable {
        let bytes: [UInt8]

        func hash(into hasher: inout Hasher) {
            hasher.combine(self.bytes.count)
            self.bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    func get(_ body: some Collection<UInt8>) -> Target? {
        guard body.count <= Self.maxBytes else { return nil }
        let key = Body(bytes: Array(body))
        return self.targets.withLock { $0.bodies[key] }
    }

    func set(_ body: some Collection<UInt8>, _ target: Target) {
        guard body.count <= Self.maxBytes else { return }
        let key = Body(bytes: Array(body))
        self.targets.withLock { targets in
            guard targets.bodies[key] == nil else { return }
            if targets.bodies.count >= Self.capacity || targets.bytes + key.bytes.count > Self.capacityBytes {
                targets = ([:], 0)
            }
            targets.bodies[key] = target
            targets.bytes += key.bytes.count
        }
    }
}

/// The JSON of answers already given, by the whole `TranscodeResult` (object key, metadata, base URL, signed
/// links): encoding it was a fifth of a cache-hit `POST /transcode` (perf). Bounded (emptied when full).
final class EncodedResults: Sendable {
    /// As many as `ResolvedBodies` keeps: a hit answered from memory finds its JSON here.
    static var capacity: Int { ResolvedBodies.capacity }
    private let answers = Mutex<[TranscodeResult: ByteBuffer]>([:])

    /// The JSON of `result`, made by `encode` the first time.
    func body(for result: TranscodeResult, encode: (TranscodeResult) throws -> ByteBuffer) rethrows -> ByteBuffer {
        if let known = self.answers.withLock({ $0[result] }) { return known }
        let body = try encode(result)
        self.answers.withLock { answers in
            if answers.count >= Self.capacity { answers.removeAll(keepingCapacity: true) }
            answers[result] = body
        }
        return body
    }
}

/// The JSON answer of a finished transcode: the metadata's fields plus where to fetch the files and a
/// ready `<video>` snippet.
struct TranscodeResult: Encodable, Hashable, Sendable {
    let key: ObjectKey
    let metadata: TranscodeMetadata
    /// Prefixed to every URL (`http.publicBaseURL`); empty for relative URLs.
    let baseURL: String
    /// The signed `GET /v1/...` URLs of the source (`mp4`, `poster`, `metadata`), when the request named a
    /// URL and signing is configured.
    let signed: SignedLinks?

    /// The GIF's URL, when the request named one: a keep-gif result's snippet is then the GIF's own `<img>`.
    let sourceURL: String?

    init(
        _ outcome: TranscodeOutcome, baseURL: String = "", signed: SignedLinks? = nil, sourceURL: String? = nil
    ) {
        self.key = outcome.key
        self.metadata = outcome.metadata
        self.baseURL = baseURL
        self.signed = signed
        self.sourceURL = sourceURL
    }

    /// By the object key and the signed video link (equal results have equal ones; `==` still compares
    /// everything): hashing the whole metadata and all links was most of finding a kept answer
    /// (`EncodedResults`). The link tells apart the results of URLs that differ only where the object's key
    /// does not (a fragment), which would otherwise all collide.
    func hash(into hasher: inout Hasher) {
        hasher.combine(self.key)
        hasher.combine(self.signed?[.video])
    }

    private enum Keys: String, CodingKey {
        case key, mp4, poster, metadata, html, signed
    }

    /// An extra's URL, under its format's name (`webp`).
    private struct ExtraKey: CodingKey {
        let stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    var mp4Path: String { self.baseURL + self.key.mediaPath(ObjectFiles.video) }
    var posterPath: String { self.baseURL + self.key.mediaPath(ObjectFiles.poster) }

    /// Autoplaying, muted and inline (what iOS Safari requires to autoplay), sized like the GIF so the page
    /// layout does not move, and played as many times as the GIF: `loop` when it loops forever, nothing
    /// when it plays once, and `data-play-count` with `/player.js` for a finite loop count. For a keep-gif
    /// result (the video is not smaller than the GIF at the quality floor) of a GIF named by its URL, the GIF's
    /// own `<img>`, sized the same: the page should keep the GIF. An upload has no URL for the GIF: its
    /// snippet stays the video's.
    var html: String {
        if self.metadata.recommendation == .keepGIF, let sourceURL = self.sourceURL {
            return "<img src=\"\(HTMLRewriter.escape(sourceURL))\" "
                + "width=\"\(self.metadata.sourceWidth)\" height=\"\(self.metadata.sourceHeight)\">"
        }
        var playback = ""
        var script = ""
        if self.metadata.loopsForever {
            playback = " loop"
        } else if let plays = self.metadata.playCount, plays > 1 {
            playback = " data-play-count=\"\(plays)\""
            script = "<script src=\"\(self.baseURL)\(PlayerScript.path)\" defer></script>"
        }
        let target = self.target
        let poster = target.poster.map { " poster=\"\(HTMLRewriter.escape($0))\"" } ?? ""
        return "<video autoplay muted playsinline\(playback)\(poster) "
            + "width=\"\(self.metadata.sourceWidth)\" height=\"\(self.metadata.sourceHeight)\">"
            + target.sourceElements + "</video>" + script
    }

    /// The snippet's `<source>`s, best first, as the rewriter lists them (`RewriteTarget.sources`): the VP9 WebM
    /// when the object has one smaller than the GIF, then the MP4, each `type` with its `codecs` when recorded.
    var target: RewriteTarget {
        RewriteTarget(
            mp4URL: self.mp4Path, posterURL: self.posterPath, webmURL: self.baseURL + self.key.mediaPath(.webm),
            alphaPosterURL: self.baseURL + self.key.mediaPath(.webpPoster), metadata: self.metadata)
    }

    func encode(to encoder: any Encoder) throws {
        try self.metadata.encode(to: encoder)
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(self.key, forKey: .key)
        try container.encode(self.mp4Path, forKey: .mp4)
        try container.encode(self.posterPath, forKey: .poster)
        try container.encode(self.baseURL + self.key.mediaPath(ObjectFiles.manifest), forKey: .metadata)
        try container.encode(self.html, forKey: .html)
        try container.encodeIfPresent(self.signed, forKey: .signed)
        // Each extra the object has (`formats`), by its format's name: `"webp": "/media/<key>.webp"`.
        var extras = encoder.container(keyedBy: ExtraKey.self)
        for (_, format) in ObjectFiles.stored(in: self.metadata) where ObjectFiles.extras.contains(format) {
            try extras.encode(self.baseURL + self.key.mediaPath(format), forKey: ExtraKey(stringValue: format.name))
        }
    }
}

/// How a job stands, on the wire: `GET /jobs/{id}`, the `202` of `POST /transcode` that ran out of its wait, and the
/// `data` of a `transcode.done` or `transcode.failed` webhook (which also names the job's `url`). One type, so the
/// three never tell the same job apart differently.
struct JobReport: Encodable, Sendable {
    let id: String
    /// The GIF's URL, when the request named one and the report is a webhook's.
    let url: String?
    let status: ItemStatus
    let result: TranscodeResult?
    let error: ReportedFailure?

    /// - Parameter baseURL: prefixed to the result's links (`http.publicBaseURL`).
    init(id: String, url: String? = nil, state: JobState, baseURL: String) {
        self.id = id
        self.url = url
        switch state {
        case .pending:
            (self.status, self.result, self.error) = (.pending, nil, nil)
        case .ended(.done(let outcome)):
            (self.status, self.error) = (.done, nil)
            self.result = TranscodeResult(outcome, baseURL: baseURL, sourceURL: url)
        case .ended(.failed(let failure)):
            (self.status, self.result, self.error) = (.failed, nil, ReportedFailure(failure))
        }
    }

    /// The type of its webhook.
    var webhookType: String { self.status == .done ? "transcode.done" : "transcode.failed" }
}
