import NIOCore
import NIOHTTPTypes

/// A connection's two deadlines:
/// - **the request head**: a head must arrive in full within `headTimeout`, from the moment the connection
///   opens and again once every request read so far has been answered (a pipelined request already read is
///   not on the clock). The idle timeout alone does not stop a client that drips one header byte every few
///   seconds (it never goes idle) while holding a connection open.
/// - **idle**: a connection is closed after `idleTimeout` without a request part read while it waits for a
///   head or reads a request's body; not while the service is answering.
///
/// Hummingbird's connection-state handler had the idle timeout; it is here, off there, because requests
/// answered ahead of the HTTP codec (`MediaHitFront`) never reach that handler: they report themselves
/// (`answeredAhead`), and a connection busy with them is neither idle nor waiting for a head.
///
/// It sits after the HTTP decoder, so it sees parsed request parts and the response parts on their way out.
final class ConnectionTimeoutHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let headTimeout: TimeAmount
    private let idleTimeout: TimeAmount
    /// When the wait for the current head began; `nil` while a request is being read or answered.
    private var waitingSince: NIODeadline?
    /// When the last part of the request being read arrived; `nil` when none is being read.
    private var lastRead: NIODeadline?
    /// Heads read whose answers have not ended.
    private var unanswered = 0
    /// Answers written ahead of the HTTP decoder whose bytes are still being sent (files, `MediaHitFront`).
    private var answersBeingSent = 0
    /// At most one timer per connection, moved on when it fires early: scheduling and cancelling one per
    /// request was a visible part of a cache hit's cost.
    private var timer: (task: Scheduled<Void>, deadline: NIODeadline)?
    private var context: ChannelHandlerContext?

    init(headTimeout: TimeAmount, idleTimeout: TimeAmount) {
        self.headTimeout = headTimeout
        self.idleTimeout = idleTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { self.arm() }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.arm()
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.stop()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.stop()
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head:
            self.unanswered += 1
            self.waitingSince = nil
            self.lastRead = .now()
            self.schedule()
        case .body:
            self.lastRead = .now()
        case .end:
            self.lastRead = nil
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = self.unwrapOutboundIn(data) {
            self.unanswered = max(0, self.unanswered - 1)
            // A pipelined request already read is not waited for: only an idle connection waits for a head.
            if self.unanswered == 0, self.answersBeingSent == 0 { self.arm() }
        }
        context.write(data, promise: promise)
    }

    /// A request read and answered ahead of the HTTP decoder: the wait for the next head starts now.
    func answeredAhead() {
        if self.unanswered == 0, self.lastRead == nil, self.answersBeingSent == 0 { self.arm() }
    }

    /// A request read ahead of the HTTP decoder whose answer takes a while to send (a file to a slow client):
    /// the connection is busy, no deadline runs, until `sentAhead`.
    func sendingAhead() {
        self.answersBeingSent += 1
        self.waitingSince = nil
    }

    /// The answer of a `sendingAhead` has been sent (or the write failed).
    func sentAhead() {
        self.answersBeingSent = max(0, self.answersBeingSent - 1)
        self.answeredAhead()
    }

    /// When the connection is closed unless something happens before.
    private var deadline: NIODeadline? {
        if let since = self.waitingSince { return since + min(self.headTimeout, self.idleTimeout) }
        return self.lastRead.map { $0 + self.idleTimeout }
    }

    private func arm() {
        self.waitingSince = .now()
        self.schedule()
    }

    /// Makes sure the timer fires no later than the deadline (it only moves back, or appears, when the
    /// connection starts waiting for a head or reading a request).
    private func schedule() {
        guard let context = self.context, let deadline = self.deadline else { return }
        if let timer = self.timer {
            guard deadline < timer.deadline else { return }
            timer.task.cancel()
        }
        let channel = context.channel
        let task = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) {
            self.timer = nil
            guard let due = self.deadline else { return }
            if due <= .now() {
                channel.close(promise: nil)
            } else {
                self.schedule()
            }
        }
        self.timer = (task, deadline)
    }

    private func stop() {
        self.timer?.task.cancel()
        self.timer = nil
        self.waitingSince = nil
        self.lastRead = nil
    }
}
