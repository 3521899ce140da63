import NIOCore
import NIOHTTPTypes

/// Closes a connection whose request head does not arrive in full within `timeout`: from the moment the
/// connection opens, and again after each response, until the next head is parsed.
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
    private var deadline: Scheduled<Void>?

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
        self.disarm()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.disarm()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = self.unwrapInboundIn(data) { self.disarm() }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = self.unwrapOutboundIn(data) { self.arm(context) }
        context.write(data, promise: promise)
    }

    private func arm(_ context: ChannelHandlerContext) {
        self.disarm()
        let channel = context.channel
        self.deadline = context.eventLoop.scheduleTask(in: self.timeout) {
            channel.close(promise: nil)
        }
    }

    private func disarm() {
        self.deadline?.cancel()
        self.deadline = nil
    }
}
