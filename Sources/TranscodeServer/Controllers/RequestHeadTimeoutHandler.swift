import NIOCore
import NIOHTTPTypes

/// Closes a connection whose request head does not arrive in full within `timeout`: from the moment the
/// connection opens, and again once every request read so far has been answered, until the next head is
/// parsed (a pipelined request already read is not on the clock).
///
/// The idle timeout alone does not stop a client that drips one header byte every few seconds (it never
/// goes idle) while holding a connection open; this puts a deadline on the whole head. It sits after the
/// HTTP decoder, so it sees parsed request parts and the response parts on their way out.
final class RequestHeadTimeoutHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let timeout: TimeAmount
    /// When the wait for the current head began; `nil` while a request is being answered.
    private var waitingSince: NIODeadline?
    /// Heads read whose answers have not ended.
    private var unanswered = 0
    /// At most one timer per connection, moved on when it fires early: scheduling and cancelling one per
    /// request was a visible part of a cache hit's cost.
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.arm(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.arm(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.stop()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.stop()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = self.unwrapInboundIn(data) {
            self.unanswered += 1
            self.waitingSince = nil
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = self.unwrapOutboundIn(data) {
            self.unanswered = max(0, self.unanswered - 1)
            // A pipelined request already read is not waited for: only an idle connection waits for a head.
            if self.unanswered == 0 { self.arm(context) }
        }
        context.write(data, promise: promise)
    }

    private func arm(_ context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        self.waitingSince = now
        if self.timer == nil { self.schedule(context, at: now + self.timeout) }
    }

    private func schedule(_ context: ChannelHandlerContext, at deadline: NIODeadline) {
        let channel = context.channel
        self.timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) {
            self.timer = nil
            guard let since = self.waitingSince else { return }
            let due = since + self.timeout
            if due <= .now() {
                channel.close(promise: nil)
            } else {
                self.schedule(context, at: due)
            }
        }
    }

    private func stop() {
        self.timer?.cancel()
        self.timer = nil
        self.waitingSince = nil
    }
}
