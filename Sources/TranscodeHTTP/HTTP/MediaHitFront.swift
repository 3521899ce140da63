import HTTPTypes
import NIOCore
import TranscodeCore

/// Answers `MediaHitHandler`'s hits before NIO's HTTP codec, from the bytes read: the first handler of a
/// connection's pipeline. A hit answered here costs a scan of its head and one write of bytes, not the
/// codec's parsing, its conversions to and from swift-http-types, the response encoder and five handlers
/// each way; on a small file that was most of a hit's cost (`scripts/bench-service`, docs/benchmarks.md).
///
/// It frames the byte stream itself, so that the decoder behind it only ever sees whole requests: a head
/// (up to the first empty line) and then exactly `Content-Length` bytes of body. What it cannot frame for
/// certain it does not try to: a head that is not plain CRLF-ended lines of visible ASCII (a bare CR or LF,
/// obs-fold, a control or non-ASCII byte), `Transfer-Encoding`, `Upgrade`, `CONNECT`, several or a malformed
/// `Content-Length`. Then it passes everything from there on, as read, to the decoder, whose rules and limits
/// apply as before, for the rest of the connection (hits are then answered after the codec by
/// `MediaHitHandler`, as before this handler). A head longer than `RequestFraming.maxHeadBytes` is answered
/// here, 414 `uri-too-long` or 431 `header-too-large` in JSON, and the connection closed (the decoder's own
/// answer, past 80 KB, is a bare 400).
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

    /// A body up to this long is written with the head, in one buffer; a longer one as its own.
    private static let copiedBodyBytes = 16 * 1024

    private let hits: MediaHitHandler
    private let timeouts: ConnectionTimeoutHandler
    /// Where requests begin and end in the bytes read.
    private var framing = RequestFraming()
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

    /// The answers to a head longer than `RequestFraming.maxHeadBytes`.
    static let uriTooLong = ServiceError(
        .uriTooLong, "the request line is longer than \(RequestFraming.maxHeadBytes / 1024) KB"
    ).closingAnswer
    static let headerTooLarge = ServiceError(
        .headerTooLarge, "the request head is longer than \(RequestFraming.maxHeadBytes / 1024) KB"
    ).closingAnswer

    init(hits: MediaHitHandler, timeouts: ConnectionTimeoutHandler) {
        self.hits = hits
        self.timeouts = timeouts
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.framing.mode {
        case .closed: return
        case .passing:
            self.passedOn = true
            return context.fireChannelRead(data)
        case .framing: break
        }
        self.framing.read(self.unwrapInboundIn(data))
        while true {
            switch self.framing.next() {
            case .done:
                return
            case .body(let bytes), .passOn(let bytes):
                self.passedOn = true
                context.fireChannelRead(self.wrapInboundOut(bytes))
            case .tooLong(let requestLine):
                guard self.mayAnswer(context: context) else {
                    // Behind answers still to come: the decoder's error, in order.
                    guard case .passOn(let rest) = self.framing.passRest() else { return }
                    self.passedOn = true
                    context.fireChannelRead(self.wrapInboundOut(rest))
                    return
                }
                self.framing.close()
                let answer = requestLine ? Self.uriTooLong : Self.headerTooLarge
                self.hits.countError(requestLine ? .uriTooLong : .headerTooLarge)
                let channel = context.channel
                // The rest of the head is still coming: closing with it unread would reset the connection, and the
                // client could lose the answer. Its output ends after the answer; what it sends is read and dropped
                // (`framing` is closed) until it closes, for a second at most.
                context.writeAndFlush(self.wrapOutboundOut(.byteBuffer(answer))).whenComplete { _ in
                    channel.close(mode: .output, promise: nil)
                    channel.eventLoop.scheduleTask(in: .seconds(1)) { channel.close(promise: nil) }
                }
                return
            case .head(let head, _, let bodyLength):
                if head.mayBeAnswered, self.answer(head, context: context) {
                    self.framing.answered()
                    continue
                }
                // A cache-hit POST /transcode, its body read in full with its head.
                if head.mayBeTranscodeHit, (1...ResolvedBodies.maxBytes).contains(bodyLength),
                    let body = self.framing.wholeBody, self.answerTranscode(head, body: body, context: context)
                {
                    self.framing.answered(withBody: true)
                    continue
                }
                self.headsPassed += 1
                self.passedOn = true
                context.fireChannelRead(self.wrapInboundOut(self.framing.passHead()))
                // After a request that ends the connection, llhttp refuses whatever follows: so does the decoder's
                // error, not an answer written here.
                if head.endsConnection, case .passOn(let rest) = self.framing.passRest() {
                    context.fireChannelRead(self.wrapInboundOut(rest))
                    return
                }
            }
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
        guard let held = self.framing.takeHeld() else { return }
        self.passedOn = true
        context.fireChannelRead(self.wrapInboundOut(held))
        context.fireChannelReadComplete()
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if self.needsFlush {
            self.needsFlush = false
            context.flush()
        }
        // A read answered here in full gave the handlers behind nothing to complete (it was a visible part of a
        // hit's cost: five handlers and the async channel's delivery).
        if self.passedOn || self.framing.mode != .framing {
            self.passedOn = false
            context.fireChannelReadComplete()
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
            self.framing.close()
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
                // The descriptor is the answer's own (`LocalObjects.openUnchanged`): closed once the kernel has sent
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
