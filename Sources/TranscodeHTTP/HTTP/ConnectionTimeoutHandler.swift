import NIOCore
import NIOHTTPTypes
import TranscodeCore

/// A connection's three deadlines:
/// - **the request head**: a head must arrive in full within `headTimeout`, from the moment the connection
///   opens and again once every request read so far has been answered and sent (a pipelined request already
///   read is not on the clock, nor is a client still reading a long answer). The idle timeout alone does not
///   stop a client that drips one header byte every few seconds (it never goes idle) while holding a
///   connection open.
/// - **idle**: a connection is closed after `idleTimeout` without a request part read while it waits for a
///   head or reads a request's body; not while the service is working on an answer.
/// - **sending**: while answer bytes written to the channel wait for the client to take them, it is closed
///   after `idleTimeout` without one such write completing (nginx's `send_timeout`): a client that asks for a
///   video and never reads it does not hold the connection, and the file, for ever. Each write of an answer's
///   body counts (`write`, for the router's answers; `sending`, for those written ahead of the decoder), in
///   parts of at most `MediaHitFront.filePartBytes`, so that a slow but steady reader makes progress.
///
/// Hummingbird's connection-state handler had the idle timeout; it is here, off there, because requests
/// answered ahead of the HTTP codec (`MediaHitFront`) never reach that handler: they report themselves
/// (`answeredAhead`), and a connection busy with them is neither idle nor waiting for a head.
///
/// It sits after the HTTP decoder, so it sees parsed request parts and the response parts on their way out.
package final class ConnectionTimeoutHandler: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPRequestPart
    package typealias InboundOut = HTTPRequestPart
    package typealias OutboundIn = HTTPResponsePart
    package typealias OutboundOut = HTTPResponsePart

    private let headTimeout: TimeAmount
    private let idleTimeout: TimeAmount
    /// When the wait for the current head began; `nil` while a request is being read or answered.
    private var waitingSince: NIODeadline?
    /// When the last part of the request being read arrived; `nil` when none is being read.
    private var lastRead: NIODeadline?
    /// Heads read whose answers have not ended.
    private var unanswered = 0
    /// Writes of answer bytes the client has not taken in full yet.
    private var pendingSends = 0
    /// When the last of those completed, or the first was written; `nil` when none is pending.
    private var lastSent: NIODeadline?
    /// At most one timer per connection, moved on when it fires early: scheduling and cancelling one per
    /// request was a visible part of a cache hit's cost.
    private var timer: (task: Scheduled<Void>, deadline: NIODeadline)?
    private var context: ChannelHandlerContext?

    package init(headTimeout: TimeAmount, idleTimeout: TimeAmount) {
        self.headTimeout = headTimeout
        self.idleTimeout = idleTimeout
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { self.arm() }
    }

    package func channelActive(context: ChannelHandlerContext) {
        self.arm()
        context.fireChannelActive()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        self.stop()
        context.fireChannelInactive()
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        self.stop()
        self.context = nil
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
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

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch self.unwrapOutboundIn(data) {
        case .head:
            context.write(data, promise: promise)
        case .body(var buffer):
            // A large buffer (a batch's results, a rewritten page) in parts, so that a slow but steady reader
            // shows progress before the whole of it is in the kernel.
            while buffer.readableBytes > MediaHitFront.filePartBytes {
                let part = context.eventLoop.makePromise(of: Void.self)
                self.sending(part)
                let slice = buffer.readSlice(length: MediaHitFront.filePartBytes)!
                context.write(self.wrapOutboundOut(.body(slice)), promise: part)
            }
            let written = promise ?? context.eventLoop.makePromise()
            self.sending(written)
            context.write(self.wrapOutboundOut(.body(buffer)), promise: written)
        case .end:
            self.unanswered = max(0, self.unanswered - 1)
            // A pipelined request already read is not waited for: only an idle connection waits for a head.
            if self.unanswered == 0 { self.arm() }
            context.write(data, promise: promise)
        }
    }

    /// A request read and answered ahead of the HTTP decoder: the wait for the next head starts now (or once
    /// its bytes have been sent, when they are `sending`).
    func answeredAhead() {
        if self.unanswered == 0, self.lastRead == nil { self.arm() }
    }

    /// Answer bytes written to the channel with `promise`, which completes once the client's kernel has them
    /// (or the write failed). Until then no head deadline runs, and the sending one does.
    func sending(_ promise: EventLoopPromise<Void>) {
        self.pendingSends += 1
        if self.pendingSends == 1 {
            self.lastSent = .now()
            self.schedule()
        }
        promise.futureResult.assumeIsolated().whenComplete { _ in
            self.pendingSends -= 1
            guard self.context?.channel.isActive == true else { return }
            if self.pendingSends > 0 {
                self.lastSent = .now()
            } else {
                self.lastSent = nil
                // All sent: the wait for the next head starts now, not when the answer was queued.
                if self.waitingSince != nil { self.arm() }
            }
        }
    }

    /// When the connection is closed unless something happens before.
    private var deadline: NIODeadline? {
        let reading = self.lastRead.map { $0 + self.idleTimeout }
        if let sent = self.lastSent {
            return min(sent + self.idleTimeout, reading ?? .distantFuture)
        }
        if let since = self.waitingSince { return since + min(self.headTimeout, self.idleTimeout) }
        return reading
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
