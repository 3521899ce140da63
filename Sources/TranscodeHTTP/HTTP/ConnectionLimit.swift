import NIOCore
import TranscodeCore

/// The connections a server holds open at once (`http.maxConnections`). Each holds a descriptor, and the process
/// has a fixed number: connections that send nothing must not take the ones the work needs (an object's files,
/// a download, a webhook). A connection over the limit is answered `503` with `Retry-After` and closed by a
/// `Refusal` handler put first in its pipeline, before any of its bytes is read; those already open are served as
/// before.
package final class ConnectionLimit: Sendable {
    private let open: CountingLimit
    var limit: Int { self.open.limit }

    package init(limit: Int) {
        self.open = CountingLimit(limit: limit)
    }

    /// The default limit for a process allowed `descriptors` open files: three quarters of them, leaving the
    /// rest (at least 64) for the work the connections bring.
    package static func automatic(descriptors: Int) -> Int {
        max(16, descriptors - max(64, descriptors / 4))
    }

    /// Counts `channel` in when there is room, until it closes. - Returns: false when it is over the limit (then
    /// it is not counted: the caller refuses it, `Refusal`).
    func admit(_ channel: any Channel) -> Bool {
        guard self.open.take() else { return false }
        channel.closeFuture.whenComplete { _ in self.open.give() }
        return true
    }

    /// What a connection over the limit is told, whatever it sent (nothing has been read).
    static let refusal = ServiceError.overloaded("too many connections are open; try again shortly").closingAnswer

    /// The first handler of a connection over the limit: once the connection is active it writes `refusal`
    /// straight to the socket and closes; what the client sends is dropped unread. (Failing the channel's
    /// setup instead left the connection open and stopped the server taking new ones.)
    final class Refusal: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        private var refused = false

        func handlerAdded(context: ChannelHandlerContext) {
            if context.channel.isActive { self.refuse(context) }
        }

        func channelActive(context: ChannelHandlerContext) {
            self.refuse(context)
            context.fireChannelActive()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

        private func refuse(_ context: ChannelHandlerContext) {
            guard !self.refused else { return }
            self.refused = true
            let channel = context.channel
            context.writeAndFlush(Self.wrapOutboundOut(ConnectionLimit.refusal)).whenComplete {
                _ in channel.close(promise: nil)
            }
        }
    }
}
