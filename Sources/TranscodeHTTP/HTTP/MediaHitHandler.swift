import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization
import TranscodeCore
import Transcoder

#if canImport(Glibc)
    import Glibc
#endif

/// Answers cache hits on the event loop when everything they need is already in memory: `GET`/`HEAD
/// /media/{key}.{ext}`, and `GET`/`HEAD /v1/...` (answered with bytes) for a signed path the route has
/// already verified whose URL's link is fresh (`TranscodeService.freshHitKey`). The object must be on the
/// local disk, still the files that were checked and read (`LocalObjects.memoryHit`), not taken down (in a
/// fleet, by a recent "no" of the store), and the bytes asked for kept in memory after a first read (all of a
/// small file, the first 64 KB of a larger one; ahead of the codec, bytes past those are sent from the file,
/// see `MediaHitFront`). Everything else (a miss, a range past the kept bytes behind the codec, a file not
/// read yet, a stale link, a takedown, a last use due to be written to disk, a request with a body, a
/// connection whose write buffer is full) goes on to the router, which answers as before.
///
/// Why: a hit through Hummingbird's router, middlewares and async channel cost more than the file itself
/// (`GET /healthz` alone was under half of nginx's rate for a small file); here a hit costs the HTTP codec,
/// the checks and one write.
///
/// The answer is the route's (`MediaAnswer`, the public CORS policy, `X-Request-Id`, the access-log line and
/// request metrics under the route's template). HTTP/1.1 answers go out in request order: a request is
/// answered here only while no earlier request of the connection is with the router.
///
/// It sits after Hummingbird's `HTTPConnectionStateHandler` (see `MediaHitChannel`), so idle timeouts and
/// graceful shutdown count the requests answered here.
package final class MediaHitHandler: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPRequestPart
    package typealias InboundOut = HTTPRequestPart
    package typealias OutboundIn = HTTPResponsePart
    package typealias OutboundOut = HTTPResponsePart

    /// A request that may be answered here.
    enum Candidate {
        case media(MediaAnswer.File)
        case signed(ResolvedPaths.Target)
    }

    private enum State {
        /// Between requests.
        case idle
        /// A request that may be answered here, until its end shows it has no body.
        case held(HTTPRequest, Candidate)
        /// A request passed on to the router: its parts follow it.
        case passing
        /// Answered with `Connection: close`: nothing more is read.
        case closing
    }

    private typealias AccessLog = AccessLogMiddleware<AppRequestContext>

    private let source: Source

    /// Counts an error answered ahead of the codec (`MediaHitFront`) in `transcode_errors_total`.
    func countError(_ code: ErrorCode) {
        self.source.metrics.error(code: code.rawValue)
    }
    private var state = State.idle
    /// Requests passed on whose answers the router has not finished.
    private var withRouter = 0
    private var needsFlush = false
    /// The next request was tried ahead of the codec (`MediaHitFront`) and missed: it goes to the router.
    private var triedAhead = false
    /// Request heads that came out of the decoder; `MediaHitFront` compares it with the heads it passed on
    /// (one the decoder rejected never comes out, and nothing may be answered ahead of its error).
    private(set) var headsDecoded = 0

    init(source: Source) {
        self.source = source
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = self.unwrapInboundIn(data)
        if case .head = part { self.headsDecoded += 1 }
        switch (self.state, part) {
        case (.closing, _):
            return
        case (.idle, .head(let request)):
            let tried = self.triedAhead
            self.triedAhead = false
            if !tried, self.withRouter == 0, context.channel.isWritable, let candidate = self.candidate(request) {
                self.state = .held(request, candidate)
            } else {
                self.pass(.head(request), context: context)
                self.state = .passing
            }
        case (.held(let request, let candidate), .end):
            self.state = .idle
            if !self.answer(request, candidate, context: context) {
                self.pass(.head(request), context: context)
                self.pass(.end(nil), context: context)
            }
        case (.held(let request, _), _):
            self.pass(.head(request), context: context)
            self.pass(part, context: context)
            self.state = .passing
        case (.passing, .end):
            self.pass(part, context: context)
            self.state = .idle
        case (.passing, _), (.idle, _):
            self.pass(part, context: context)
        }
    }

    /// Whether a request may be answered ahead of the HTTP codec now: none of the connection's is with the
    /// router or being read (answers go out in request order) and none asked to close.
    var answersAhead: Bool {
        if case .idle = self.state { return self.withRouter == 0 }
        return false
    }

    /// The request about to be passed on was tried ahead of the codec: it is not tried again.
    func triedAheadAndMissed() {
        self.triedAhead = true
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        if self.needsFlush {
            self.needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        // Not below zero: the error answer to a head the decoder rejected had no head here.
        if case .end = self.unwrapOutboundIn(data) { self.withRouter = max(0, self.withRouter - 1) }
        context.write(data, promise: promise)
    }

    private func pass(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        if case .head = part { self.withRouter += 1 }
        context.fireChannelRead(self.wrapInboundOut(part))
    }

    /// `GET`/`HEAD` of `/media/...`, or of a `/v1/...` path the route has verified.
    private func candidate(_ request: HTTPRequest) -> Candidate? {
        guard request.method == .get || request.method == .head, let path = request.path else { return nil }
        return self.candidate(path: path)
    }

    /// The request target `path` of a `GET` or `HEAD`, when it may be a hit answered here.
    func candidate(path: String) -> Candidate? {
        // By UTF-8 code units: Character indexing was a visible part of a hit's cost.
        let query = path.utf8.firstIndex(of: UInt8(ascii: "?")) ?? path.endIndex
        let media = ResponsePolicy.media.prefix
        if path.utf8.starts(with: media.utf8) {
            // A query is ignored, as by the router.
            return MediaAnswer.File(name: path[path.utf8.index(path.startIndex, offsetBy: media.utf8.count)..<query])
                .map {
                    .media($0)
                }
        }
        guard let route = self.source.signedRoute, path.hasPrefix(ResponsePolicy.signed.prefix)
        else { return nil }
        // The raw path, as the route reads it (`uri.path`: no query, no percent-decoding).
        let signed = query == path.endIndex ? path : String(path[..<query])
        return route.resolved.get(signed).map { .signed($0) }
    }

    /// A hit's answer: what is written, and what its access-log line says.
    package struct Answer {
        /// The answer's own status and header fields, before those every answer here ends with.
        var kind: Kind
        /// The bytes sent from memory (`nil` for `HEAD`, `304`, `416`, an empty file and a `file` answer).
        var body: ByteBuffer?
        /// Or the part of an open file sent by the kernel (`sendfile`), past the head of a large file kept in
        /// memory; ahead of the HTTP codec only (`MediaHitFront`), whose writer closes its descriptor.
        var file: FileRegion? = nil
        /// With `file`: ends the object's pin (`LocalObjects.beginServing`: not evicted while it is sent, as by the
        /// route), once the file has been sent.
        var release: (() -> Void)? = nil
        /// The request asked for `Connection: close`: nothing is read after it.
        var closing: Bool
        var method: HTTPRequest.Method
        /// The route's template, as the router's metrics name it.
        var route: String
        /// The request's id (the client's when well formed).
        var id: String
        /// With the public CORS fields (a `/media` or `/v1` request from a page).
        var publicCORS: Bool
        var date: String
        var started: ContinuousClock.Instant

        enum Kind {
            /// A stored file's (`/media`, `/v1/...`).
            case media(MediaAnswer)
            /// A cache-hit `POST /transcode`'s JSON of this many bytes.
            case transcode(length: Int)
        }

        var status: HTTPResponse.Status {
            switch self.kind {
            case .media(let media): media.status
            case .transcode: .ok
            }
        }

        /// The length of the body sent.
        var bodyLength: Int {
            self.body?.readableBytes ?? self.file?.readableBytes ?? 0
        }

        /// Media bytes (`/media`, `/v1/...`), counted in `served_bytes`; not the JSON of `POST /transcode`.
        var isMedia: Bool {
            if case .media = self.kind { return true }
            return false
        }

        /// Adds the answer's header fields to `sink`, in the order the router sends them: its own, then the request's
        /// id, the public CORS fields, `Date`, and `Connection: close` when the request asked for it.
        func addHeaders(to sink: inout some HeaderFieldSink) {
            switch self.kind {
            case .media(let media):
                media.addHeaders(to: &sink)
            case .transcode(let length):
                sink.add(.contentType, "application/json; charset=utf-8")
                sink.add(MediaHitHandler.cacheField, "hit")
                sink.add(.contentLength, length)
            }
            ResponsePolicy.addClosingFields(
                to: &sink, id: self.id, publicCORS: self.publicCORS, date: self.date, closing: self.closing)
        }

        /// The answer's head, for the HTTP codec.
        var response: HTTPResponse {
            HTTPResponse(status: self.status, headerFields: HTTPFields(adding: self.addHeaders))
        }
    }

    /// The answer to a `GET` or `HEAD` whose headers are `fields`, when the object is a local hit whose bytes are
    /// in memory, or `sendingFiles` and the file's head is (then bytes past it are sent from the file, the very
    /// file whose head was kept: `LocalObjects.openUnchanged`); `nil` when the router has to answer.
    func answer(method: HTTPRequest.Method, fields: HitFields, _ candidate: Candidate, sendingFiles: Bool = false)
        -> Answer?
    {
        let started = ContinuousClock.now
        let cache = self.source.cache
        let key: ObjectKey
        let fileExtension: String
        let cacheControl: String
        let route: ResponsePolicy.HitRoute
        let hit: HitLookup.FileHit
        switch candidate {
        case .media(let media):
            guard let found = self.source.lookup.media(media.key, fileExtension: media.fileExtension) else {
                return nil
            }
            (key, fileExtension, cacheControl, route, hit) =
                (media.key, media.fileExtension, self.source.cacheControl, ResponsePolicy.media, found)
        case .signed(let target):
            guard let signed = self.source.signedRoute,
                let found = self.source.lookup.signed(
                    target.keys, fileExtension: target.source.fileExtension, service: signed.service)
            else { return nil }
            (key, fileExtension, cacheControl, route, hit) =
                (found.key, target.source.fileExtension, signed.cacheControl, ResponsePolicy.signed, found.hit)
        }
        guard let contentType = OutputFormat.withExtension(fileExtension)?.mediaType else { return nil }
        let (identity, kept) = (hit.file, hit.bytes)
        let answer = MediaAnswer(
            contentType: contentType, size: identity.size, etag: hit.etag, range: fields.range,
            ifRange: fields.ifRange, ifNoneMatch: fields.ifNoneMatch, cacheControl: cacheControl)
        var body: ByteBuffer?
        var file: FileRegion?
        var release: (() -> Void)?
        if answer.sendsBody, method == .get, let bytes = answer.bytes {
            if bytes.upperBound < kept.readableBytes {
                body = kept.getSlice(at: kept.readerIndex + bytes.lowerBound, length: bytes.count)
            } else {
                // Of a large file only the head is kept: other ranges are sent from the file ahead of the codec,
                // else read by the route.
                guard sendingFiles,
                    let opened = cache.openForServing(key, fileExtension: fileExtension, identity: identity)
                else { return nil }
                release = opened.release
                file = FileRegion(
                    fileHandle: NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: opened.descriptor),
                    readerIndex: bytes.lowerBound, endIndex: bytes.upperBound + 1)
            }
        }
        // Answered here from now on (counted once: the route counts the hits it answers).
        if case .signed = candidate { self.source.metrics.cacheHit() }

        return Answer(
            kind: .media(answer), body: body, file: file, release: release, closing: fields.asksToClose, method: method,
            route: route.template, id: fields.makeID(), publicCORS: fields.origin != nil && route.cors == .publicRead,
            date: HTTPDate.now, started: started)
    }

    /// The answer to a `POST /transcode` whose JSON body is `body` (a body the route has answered before),
    /// when its URL is a fresh local hit whose metadata is in memory: the route's answer, `X-Cache: hit`. `nil`
    /// when the router has to answer: another body, a webhook, a request from a page (`Origin`: the route's
    /// CORS policy decides), a token that does not pass, a stale link, a takedown, files changed.
    func answerTranscode(fields: HitFields, body: ByteBufferView) -> Answer? {
        let started = ContinuousClock.now
        guard let route = self.source.transcodeRoute, fields.origin == nil,
            fields.contentType?.lowercased().hasPrefix("application/json") == true,
            route.tokens.authorizes(fields.authorization), let target = route.resolved.get(body),
            let (key, metadata) = self.source.lookup.transcode(target.keys, service: route.service)
        else { return nil }
        let result = TranscodeResult(
            TranscodeOutcome(key: key, metadata: metadata), baseURL: route.baseURL, signed: target.signed,
            sourceURL: target.sourceURL)
        guard
            let json = try? route.encoded.body(
                for: result, encode: TranscodeController<AppRequestContext>.jsonBytes)
        else { return nil }
        self.source.metrics.cacheHit()
        return Answer(
            kind: .transcode(length: json.readableBytes), body: json, closing: fields.asksToClose,
            method: .post, route: ResponsePolicy.transcode.template, id: fields.makeID(), publicCORS: false,
            date: HTTPDate.now,
            started: started)
    }

    fileprivate static let cacheField = HTTPField.Name("X-Cache")!

    /// Counts and logs an answer once its head is written; `ahead` of the HTTP codec (`MediaHitFront`) or not.
    func record(_ answer: Answer, ahead: Bool) {
        let elapsed = ContinuousClock.now - answer.started
        if answer.isMedia, answer.bodyLength > 0 { self.source.metrics.served(bytes: answer.bodyLength) }
        var logger = self.source.logger
        if logger.logLevel <= .info {
            // As on the router's lines: one id, the client's X-Request-Id (or ours).
            logger[metadataKey: "request.id"] = "\(answer.id)"
        }
        if answer.file == nil {
            self.source.metrics.answeredFromMemory(ahead: ahead)
        } else {
            self.source.metrics.answeredFromFile()
        }
        AccessLog.record(
            method: answer.method, route: answer.route, status: answer.status, bytes: answer.bodyLength, errorCode: nil,
            elapsed: elapsed, logger: logger,
            metrics: self.source.metrics)
    }

    /// Writes the answer to `request` when the object is a local hit whose bytes are in memory.
    /// - Returns: `false` when the router has to answer.
    private func answer(_ request: HTTPRequest, _ candidate: Candidate, context: ChannelHandlerContext) -> Bool {
        guard let answer = self.answer(method: request.method, fields: HitFields(request.headerFields), candidate)
        else {
            return false
        }
        context.write(self.wrapOutboundOut(.head(answer.response)), promise: nil)
        self.record(answer, ahead: false)
        if let body = answer.body { context.write(self.wrapOutboundOut(.body(body)), promise: nil) }
        if answer.closing {
            self.state = .closing
            let channel = context.channel
            context.writeAndFlush(self.wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        } else {
            context.write(self.wrapOutboundOut(.end(nil)), promise: nil)
            self.needsFlush = true
        }
        return true
    }
}

/// The request fields a hit answered by `MediaHitHandler` reads, each as `HTTPFields` gives it (the lines of one
/// name joined by ", "). Ahead of the HTTP codec, `RawRequestHead` reads them off the bytes, and no `HTTPFields`
/// is built.
struct HitFields: Equatable {
    var range: String?
    var ifRange: String?
    var ifNoneMatch: String?
    var origin: String?
    var connection: String?
    var requestID: String?
    var contentType: String?
    var authorization: String?

    init() {}

    /// The fields of a request the HTTP codec decoded.
    init(_ fields: HTTPFields) {
        for (name, field) in Self.read { self[keyPath: field] = fields[name] }
    }

    /// The fields read, and where each goes.
    static let read: [(name: HTTPField.Name, field: WritableKeyPath<HitFields, String?> & Sendable)] = [
        (.range, \.range), (.ifRange, \.ifRange), (.ifNoneMatch, \.ifNoneMatch), (.origin, \.origin),
        (.connection, \.connection), (ResponsePolicy.requestIDField, \.requestID), (.contentType, \.contentType),
        (.authorization, \.authorization),
    ]

    /// Adds a field line of the name `read[index].name`, after any earlier one of that name.
    mutating func append(_ value: String, at index: Int) {
        let field = Self.read[index].field
        self[keyPath: field] = self[keyPath: field].map { $0 + ", " + value } ?? value
    }

    /// `close` among the tokens of `Connection` (RFC 9112 §9.6), as the HTTP codec reads it.
    var asksToClose: Bool {
        guard let connection = self.connection else { return false }
        return connection.lowercased().split(separator: ",").contains { token in
            var token = token[...]
            while let first = token.first, first == " " || first == "\t" { token.removeFirst() }
            while let last = token.last, last == " " || last == "\t" { token.removeLast() }
            return token == "close"
        }
    }

    /// The id to answer with: the client's when well formed, else a new one (each call makes another).
    func makeID() -> String {
        self.requestID.flatMap(AccessLogMiddleware<AppRequestContext>.wellFormed) ?? RequestID().description
    }
}

/// The `Date` header (RFC 9110 §6.6.1) Hummingbird adds to the router's answers, formatted once a second.
private enum HTTPDate {
    private static let cache = Mutex<(second: time_t, text: String)>((0, ""))

    static var now: String {
        let second = time(nil)
        return self.cache.withLock { cache in
            if cache.second != second {
                var parts = tm()
                var seconds = second
                gmtime_r(&seconds, &parts)
                var text = [CChar](repeating: 0, count: 40)
                let count = strftime(&text, text.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
                cache = (second, String(decoding: text[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
            return cache.text
        }
    }
}
