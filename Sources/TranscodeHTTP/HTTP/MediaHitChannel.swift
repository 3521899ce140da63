import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization
import TranscodeCore
import Transcoder

/// Hummingbird's HTTP/1.1 channel with `MediaHitHandler` added right after its `HTTPConnectionStateHandler`
/// (`HTTP1Channel.Configuration.additionalChannelHandlers` go before it, where graceful shutdown would not
/// see the requests answered by the handler), and `MediaHitFront` before the HTTP decoder.
package struct MediaHitChannel: ServerChildChannel, HTTPChannelHandler {
    package typealias Value = HTTP1Channel.Value

    let http1: HTTP1Channel
    let source: MediaHitHandler.Source
    /// The bound on connections open at once.
    let connections: ConnectionLimit
    /// Whether `MediaHitFront` answers hits ahead of the decoder (`http.answerAhead`).
    let answerAhead: Bool

    package init(
        http1: HTTP1Channel, source: MediaHitHandler.Source, connections: ConnectionLimit, answerAhead: Bool = true
    ) {
        self.http1 = http1
        self.source = source
        self.connections = connections
        self.answerAhead = answerAhead
    }

    package var responder: HTTPChannelHandler.Responder { self.http1.responder }

    package func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let admitted = self.connections.admit(channel)
        return self.http1.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let pipeline = channel.pipeline.syncOperations
            let state = try pipeline.handler(type: HTTPConnectionStateHandler.self)
            let hits = MediaHitHandler(source: self.source)
            try pipeline.addHandler(hits, position: .after(state))
            if self.answerAhead {
                let timeouts = try pipeline.handler(type: ConnectionTimeoutHandler.self)
                // First: it reads the bytes off the socket (the server speaks plain HTTP/1.1; a TLS handler would
                // have to come before it).
                try pipeline.addHandler(MediaHitFront(hits: hits, timeouts: timeouts), position: .first)
            }
            // Over the connection limit: answered 503 and closed before a byte is read.
            if !admitted { try pipeline.addHandler(ConnectionLimit.Refusal(), position: .first) }
            return value
        }
    }

    package func handle(value: Value, logger: Logger) async {
        await self.http1.handle(value: value, logger: logger)
    }
}
