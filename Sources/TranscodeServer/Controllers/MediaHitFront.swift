import HTTPTypes
import NIOCore

/// Answers `MediaHitHandler`'s hits before NIO's HTTP codec, from the bytes read: the first handler of a
/// connection's pipeline. A hit answered here costs a scan of its head and one write of bytes, not the
/// codec's parsing, its conversions to and from swift-http-types, the response encoder and five handlers
/// each way; on a small file that was most of a hit's cost (`scripts/bench-service`, README).
///
/// It frames the byte stream itself, so that the decoder behind it only ever sees whole requests: a head
/// (up to the first empty line) and then exactly `Content-Length` bytes of body. What it cannot frame for
/// certain it does not try to: a head that is not plain CRLF-ended lines of visible ASCII (a bare CR or LF,
/// obs-fold, a control or non-ASCII byte), `Transfer-Encoding`, `Upgrade`, `CONNECT`, several or a malformed
/// `Content-Length`, a head longer than `maxHeadBytes`. Then it passes everything from there on, as read, to
/// the decoder, whose rules and limits apply as before, for the rest of the connection (hits are then
/// answered after the codec by `MediaHitHandler`, as before this handler).
///
/// A request is answered here only when it is a `GET` or `HEAD` of HTTP/1.1 without a body, or a
/// `POST /transcode` of HTTP/1.1 whose JSON body came whole with its head; every head passed on came out of
/// the decoder and none is with the router (`MediaHitHandler.answersAhead`: answers in request order); the
/// channel is writable; and `MediaHitHandler` has the answer in memory, or, for bytes of a large file past
/// the head it keeps, has checked the file: those are sent from the file by the kernel (a `FileRegion`:
/// `sendfile`), which the route's read-and-write cost several times over in CPU. The answer and its log line
/// and metrics are the route's (`MediaHitHandler.answer(method:fields:_:sendingFiles:)`,
/// `answerTranscode(fields:body:)`). Anything else is passed on as its bytes. `ConnectionTimeoutHandler` is
/// told of each answer, so the connection is not idle, and of a file being sent, so that a slow reader is
/// not cut off at the next head's deadline.
final class MediaHitFront: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = IOData

    /// The longest head read here; a longer one goes to the decoder (whose limit is 80 KB).
    static let maxHeadBytes = 16 * 1024
    /// A body up to this long is written with the head, in one buffer; a longer one as its own.
    private static let copiedBodyBytes = 16 * 1024

    private enum Mode {
        /// Requests are framed here.
        case framing
        /// Everything read goes to the decoder.
        case passing
        /// Answered with `Connection: close`: nothing more is read.
        case closed
    }

    private let hits: MediaHitHandler
    private let timeouts: ConnectionTimeoutHandler
    private var mode = Mode.framing
    /// The start of a head not read in full yet, and how much of it was searched for its end.
    private var partial: (bytes: ByteBuffer, searched: Int)?
    /// Bytes of the current request's body still to pass on.
    private var bodyLeft = 0
    /// Request heads passed on to the decoder.
    private var headsPassed = 0
    private var needsFlush = false
    /// Bytes were passed on since the last read completed: the handlers behind are told it completed.
    private var passedOn = false
    /// A file answer is being sent: the next request past a kept head goes to the route, so that one
    /// connection holds one descriptor at most (pipelined ranges would each open the file).
    private var sendingFile = false
    /// Answers written with their completion watched (files, large bodies) that have not all gone yet.
    private var answersSending = 0
    /// Graceful shutdown came while answers were being sent: passed on once they have gone.
    private var quiesceHeld = false

    init(hits: MediaHitHandler, timeouts: ConnectionTimeoutHandler) {
        self.hits = hits
        self.timeouts = timeouts
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.mode {
        case .closed: return
        case .passing:
            self.passedOn = true
            return context.fireChannelRead(data)
        case .framing: break
        }
        var input = self.unwrapInboundIn(data)
        var searched = 0
        if var partial = self.partial {
            self.partial = nil
            partial.bytes.writeBuffer(&input)
            (input, searched) = partial
        }
        while input.readableBytes > 0, case .framing = self.mode {
            if self.bodyLeft > 0 {
                let count = min(self.bodyLeft, input.readableBytes)
                self.bodyLeft -= count
                self.passedOn = true
                context.fireChannelRead(self.wrapInboundOut(input.readSlice(length: count)!))
                continue
            }
            let length: Int
            switch Self.headEnd(input, from: searched) {
            case .at(let end):
                length = end
            case .notYet where input.readableBytes < Self.maxHeadBytes:
                // A copy: a slice would keep the whole read buffer alive.
                self.partial = (ByteBuffer(buffer: input), input.readableBytes)
                return
            case .notYet, .unreadable:
                // The decoder's error comes at once, not at the head deadline.
                return self.passOn(input, context: context)
            }
            searched = 0
            guard
                let head = input.withUnsafeReadableBytes({
                    RawRequestHead(UnsafeRawBufferPointer(rebasing: $0[..<length]))
                }), let bodyLength = head.bodyLength
            else { return self.passOn(input, context: context) }
            if head.mayBeAnswered, self.answer(head, context: context) {
                input.moveReaderIndex(forwardBy: length)
                continue
            }
            // A cache-hit POST /transcode, its body read in full with its head.
            if head.mayBeTranscodeHit, (1...ResolvedBodies.maxBytes).contains(bodyLength),
                input.readableBytes >= length + bodyLength,
                self.answerTranscode(
                    head, body: input.readableBytesView.dropFirst(length).prefix(bodyLength), context: context)
            {
                input.moveReaderIndex(forwardBy: length + bodyLength)
                continue
            }
            self.bodyLeft = bodyLength
            self.headsPassed += 1
            self.passedOn = true
            context.fireChannelRead(self.wrapInboundOut(input.readSlice(length: length)!))
            // After a request that ends the connection, llhttp refuses whatever follows: so does the decoder's
            // error, not an answer written here.
            if head.endsConnection { return self.passOn(input, context: context) }
        }
    }

    /// The connection's input ended (closed, or half-closed by the client): a head held here goes to the
    /// decoder first, which answers an unfinished one with its error, as it would without this handler.
    func channelInactive(context: ChannelHandlerContext) {
        self.passPartialOn(context: context)
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, self.answersSending > 0 {
            // Hummingbird's connection handler closes a connection with no request of its own at once, and a
            // close fails the writes still queued: a video half sent. Nothing more is answered here meanwhile.
            self.quiesceHeld = true
            return
        }
        if case .inputClosed = event as? ChannelEvent { self.passPartialOn(context: context) }
        context.fireUserInboundEventTriggered(event)
    }

    private func passPartialOn(context: ChannelHandlerContext) {
        guard let partial = self.partial else { return }
        self.partial = nil
        self.passOn(partial.bytes, context: context)
        context.fireChannelReadComplete()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if self.needsFlush {
            self.needsFlush = false
            context.flush()
        }
        // A read answered here in full gave the handlers behind nothing to complete (it was a visible part of a
        // hit's cost: five handlers and the async channel's delivery).
        if self.passedOn || self.mode != .framing {
            self.passedOn = false
            context.fireChannelReadComplete()
        }
    }

    /// Gives up framing: `input` and all that follows go to the decoder as read.
    private func passOn(_ input: ByteBuffer, context: ChannelHandlerContext) {
        self.mode = .passing
        self.passedOn = true
        context.fireChannelRead(self.wrapInboundOut(input))
    }

    /// Where the head at the start of `buffer` ends (the length up to and including its empty line), once it is
    /// all there; `unreadable` at the first byte no head read here may hold (a bare CR or LF, a control or
    /// non-ASCII byte), so that the decoder sees it, and errs, at once. The first `searched` bytes were
    /// searched already.
    enum HeadEnd: Equatable {
        case at(Int)
        case notYet
        case unreadable
    }

    static func headEnd(_ buffer: ByteBuffer, from searched: Int) -> HeadEnd {
        buffer.withUnsafeReadableBytes { bytes in
            let end = min(bytes.count, Self.maxHeadBytes)
            // From the last byte searched: a CR there was not checked against what follows it.
            var index = max(0, searched - 1)
            while index < end {
                switch bytes[index] {
                case 0x0A:
                    guard index > 0, bytes[index - 1] == 0x0D else { return .unreadable }
                    if index >= 3, bytes[index - 2] == 0x0A, bytes[index - 3] == 0x0D { return .at(index + 1) }
                case 0x0D:
                    if index + 1 < bytes.count, bytes[index + 1] != 0x0A { return .unreadable }
                case 0x09, 0x20...0x7E:
                    break
                default:
                    return .unreadable
                }
                index += 1
            }
            return .notYet
        }
    }

    /// Whether an answer may be written here now: every head passed on came out of the decoder (one it
    /// rejected is answered with an error, which nothing may overtake), none is with the router, and the
    /// channel takes writes.
    private func mayAnswer(context: ChannelHandlerContext) -> Bool {
        self.hits.headsDecoded == self.headsPassed && self.hits.answersAhead && context.channel.isWritable
            && !self.quiesceHeld
    }

    /// Writes the answer to `head` when `MediaHitHandler` has it in memory and may answer now.
    /// - Returns: `false` when the request goes on to the decoder.
    private func answer(_ head: RawRequestHead, context: ChannelHandlerContext) -> Bool {
        guard self.mayAnswer(context: context), let candidate = self.hits.candidate(path: head.target) else {
            return false
        }
        guard
            let answer = self.hits.answer(
                method: head.method, fields: head.fields, candidate, sendingFiles: !self.sendingFile)
        else {
            self.hits.triedAheadAndMissed()
            return false
        }
        self.write(answer, context: context)
        return true
    }

    /// Writes the answer to a cache-hit `POST /transcode` with this body when `MediaHitHandler` has it.
    /// - Returns: `false` when the request goes on to the decoder (and the router).
    private func answerTranscode(_ head: RawRequestHead, body: ByteBufferView, context: ChannelHandlerContext)
        -> Bool
    {
        guard self.mayAnswer(context: context),
            let answer = self.hits.answerTranscode(fields: head.fields, body: body)
        else { return false }
        self.write(answer, context: context)
        return true
    }

    /// A file is sent in parts of at most this many bytes, each a write whose completion shows the client is
    /// reading (`ConnectionTimeoutHandler`'s sending deadline): 8.5 KB/s keeps a 30 s deadline at bay.
    static let filePartBytes = 256 * 1024

    private func write(_ answer: MediaHitHandler.Answer, context: ChannelHandlerContext) {
        let body = answer.body
        let copied = body.map { $0.readableBytes <= Self.copiedBodyBytes } ?? false
        var head = ResponseHeadBytes(
            answer.status, into: context.channel.allocator.buffer(capacity: 512 + (copied ? body!.readableBytes : 0)))
        answer.addHeaders(to: &head)
        var bytes = head.end()
        /// What follows the head, each part with whether its completion is watched.
        var parts: [IOData] = []
        if let file = answer.file {
            var start = file.readerIndex
            while start < file.endIndex {
                let end = min(file.endIndex, start + Self.filePartBytes)
                parts.append(.fileRegion(FileRegion(fileHandle: file.fileHandle, readerIndex: start, endIndex: end)))
                start = end
            }
        } else if copied, var copied = body {
            bytes.writeBuffer(&copied)
        } else if let body {
            parts.append(.byteBuffer(body))
        }
        self.hits.record(answer, ahead: true)
        self.timeouts.answeredAhead()
        if parts.isEmpty {
            guard answer.closing else {
                context.write(self.wrapOutboundOut(.byteBuffer(bytes)), promise: nil)
                self.needsFlush = true
                return
            }
            parts = [.byteBuffer(bytes)]
        } else {
            // A body of its own (a large one, a file) is watched: the client may be slow to take it.
            context.write(self.wrapOutboundOut(.byteBuffer(bytes)), promise: nil)
        }
        var last = context.eventLoop.makePromise(of: Void.self)
        for (index, part) in parts.enumerated() {
            if index > 0 { last = context.eventLoop.makePromise(of: Void.self) }
            self.timeouts.sending(last)
            context.write(self.wrapOutboundOut(part), promise: last)
        }
        if answer.closing {
            self.mode = .closed
            context.flush()
        } else {
            self.needsFlush = true
        }
        let channel = context.channel
        if answer.file != nil { self.sendingFile = true }
        self.answersSending += 1
        // Writes complete in order, and once one fails all later ones do: the last is the answer's end.
        last.futureResult.assumeIsolated().whenComplete { _ in
            if let file = answer.file {
                // The descriptor is the answer's own (`DiskCache.openUnchanged`): closed once the kernel has sent
                // the bytes, or the write failed; the object may be evicted from then on.
                try? file.fileHandle.close()
                answer.release?()
                self.sendingFile = false
            }
            self.answersSending -= 1
            if answer.closing {
                channel.close(promise: nil)
            } else if self.answersSending == 0, self.quiesceHeld, channel.isActive {
                self.quiesceHeld = false
                context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
            }
        }
    }
}

/// A response head as NIO's HTTP/1 encoder writes it: the status line, one line per field, an empty line.
struct ResponseHeadBytes: HeaderFieldSink {
    private var buffer: ByteBuffer

    init(_ status: HTTPResponse.Status, into buffer: ByteBuffer) {
        self.buffer = buffer
        self.buffer.writeStaticString("HTTP/1.1 ")
        self.buffer.writeString(String(status.code))
        self.buffer.writeStaticString(" ")
        self.buffer.writeString(status.reasonPhrase)
        self.buffer.writeStaticString("\r\n")
    }

    mutating func add(_ name: HTTPField.Name, _ value: String) {
        assert(HTTPField.isValidValue(value), "\(name): a value the server did not make or check")
        self.buffer.writeString(name.rawName)
        self.buffer.writeStaticString(": ")
        self.buffer.writeString(value)
        self.buffer.writeStaticString("\r\n")
    }

    /// The head, ended by its empty line.
    consuming func end() -> ByteBuffer {
        self.buffer.writeStaticString("\r\n")
        return self.buffer
    }
}

/// A request head as `MediaHitFront` reads it: its framing, and what a hit needs. `nil` for a head that is
/// not plain CRLF-ended lines of visible ASCII (RFC 9112 §2.2, §3, §5 without their leniencies).
struct RawRequestHead {
    var method: HTTPRequest.Method
    /// The request target as sent.
    var target: String
    /// The fields a hit reads (`MediaAnswer`, `MediaHitHandler`); the others are skipped.
    var fields: HitFields
    /// `GET` or `HEAD` of HTTP/1.1 without a body: may be answered ahead of the decoder.
    var mayBeAnswered: Bool
    /// `POST /transcode` of HTTP/1.1 with a body by `Content-Length`: may be a cache hit answered ahead.
    var mayBeTranscodeHit = false
    /// HTTP/1.0, or a `close` in `Connection`: llhttp reads nothing after this request.
    var endsConnection: Bool {
        self.isHTTP10 || self.fields.asksToClose
    }
    var isHTTP10: Bool
    /// The body's length (`Content-Length`, else 0); `nil` when it is not known here: `Transfer-Encoding`,
    /// `Upgrade`, `CONNECT`, several or a malformed `Content-Length`.
    var bodyLength: Int?

    private static let read = HitFields.read.map { Array($0.name.canonicalName.utf8) }
    private static let contentLength = Array("content-length".utf8)
    private static let transferEncoding = Array("transfer-encoding".utf8)
    private static let upgrade = Array("upgrade".utf8)

    /// - Parameter bytes: the head, up to and including its empty line.
    init?(_ bytes: UnsafeRawBufferPointer) {
        var start = 0
        /// The next line, without its CRLF; `nil` at a CR not followed by LF.
        func nextLine() -> Range<Int>? {
            guard let cr = bytes[start...].firstIndex(of: 0x0D), cr + 1 < bytes.count, bytes[cr + 1] == 0x0A else {
                return nil
            }
            defer { start = cr + 2 }
            return start..<cr
        }
        // Request line: method SP target SP version.
        guard let line = nextLine(), let space = bytes[line].firstIndex(of: 0x20),
            let second = bytes[(space + 1)..<line.upperBound].firstIndex(of: 0x20)
        else { return nil }
        let method = bytes[line.lowerBound..<space]
        let target = bytes[(space + 1)..<second]
        let version = bytes[(second + 1)..<line.upperBound]
        guard !method.isEmpty, method.allSatisfy(Self.isTokenByte), !target.isEmpty,
            target.allSatisfy({ (0x21...0x7E).contains($0) }), version.count == 8,
            version.starts(with: "HTTP/1.".utf8), version.last == 0x31 || version.last == 0x30
        else { return nil }
        let isGet = method.elementsEqual("GET".utf8)
        let isHead = !isGet && method.elementsEqual("HEAD".utf8)
        let isPost = method.elementsEqual("POST".utf8)
        self.method = isHead ? .head : isPost ? .post : .get
        self.isHTTP10 = version.last == 0x30
        self.target = String(decoding: target, as: UTF8.self)
        self.fields = HitFields()
        var length: Int? = nil
        var framed = !method.elementsEqual("CONNECT".utf8)
        // Field lines: name ":" OWS value OWS, up to the empty line.
        while let line = nextLine() {
            if line.isEmpty {
                self.bodyLength = framed ? length ?? 0 : nil
                self.mayBeAnswered = (isGet || isHead) && version.last == 0x31 && length == nil && framed
                self.mayBeTranscodeHit =
                    isPost && version.last == 0x31 && length != nil && framed && target.elementsEqual("/transcode".utf8)
                return
            }
            guard let colon = bytes[line].firstIndex(of: 0x3A), colon > line.lowerBound else { return nil }
            let name = bytes[line.lowerBound..<colon]
            var value = bytes[(colon + 1)..<line.upperBound]
            guard name.allSatisfy(Self.isTokenByte), value.allSatisfy({ $0 == 0x09 || (0x20...0x7E).contains($0) })
            else { return nil }
            while let first = value.first, first == 0x20 || first == 0x09 { value = value.dropFirst() }
            while let last = value.last, last == 0x20 || last == 0x09 { value = value.dropLast() }
            if Self.equalsLowercased(name, Self.contentLength) {
                guard length == nil, (1...15).contains(value.count), value.allSatisfy({ (0x30...0x39).contains($0) })
                else {
                    framed = false
                    continue
                }
                length = value.reduce(0) { $0 * 10 + Int($1 - 0x30) }
            } else if Self.equalsLowercased(name, Self.transferEncoding) || Self.equalsLowercased(name, Self.upgrade) {
                framed = false
            } else if let index = Self.read.firstIndex(where: { Self.equalsLowercased(name, $0) }) {
                self.fields.append(String(decoding: value, as: UTF8.self), at: index)
            }
        }
        return nil
    }

    /// A `tchar` (RFC 9110 §5.6.2).
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E: true
        default: false
        }
    }

    private static func equalsLowercased(_ bytes: Slice<UnsafeRawBufferPointer>, _ lowercase: [UInt8]) -> Bool {
        bytes.count == lowercase.count
            && zip(bytes, lowercase).allSatisfy { ($0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0) == $1 }
    }
}
