import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import TranscodeCore

/// The answer to a request NIO's HTTP decoder refuses (a folded field, a NUL or other control byte in a field, an
/// unknown method, a malformed request line), made the service's own: JSON `bad-request` with `X-Error-Code` and
/// `Cache-Control: no-store`, as every other error answer. Hummingbird answers a parser error with a bare 400
/// (`Connection: close`, `Content-Length: 0`), which a cache in front could keep.
///
/// It sits after the decoder among the channel's handlers: it sees the parser's error go by on its way to
/// Hummingbird's request loop, and then that loop's answer on its way out, which it replaces. Answers to earlier
/// requests on the connection (written before the error's answer, in order) pass unchanged: only a 400 with an
/// empty body written after a parser error is replaced.
package final class ParseErrorAnswer: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPRequestPart
    package typealias InboundOut = HTTPRequestPart
    package typealias OutboundIn = HTTPResponsePart
    package typealias OutboundOut = HTTPResponsePart

    static let failure = ServiceError(
        .badRequest,
        "the request is malformed: a folded field, a control character in a field, or a bad method or request line")

    private var parserFailed = false
    /// The bare answer's head was replaced: its end carries the body.
    private var replacing = false

    package init() {}

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is HTTPParserError { self.parserFailed = true }
        context.fireErrorCaught(error)
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch self.unwrapOutboundIn(data) {
        case .head(let head)
        where self.parserFailed && !self.replacing && head.status == .badRequest
            && head.headerFields[.contentLength] == "0":
            self.replacing = true
            // The router's error answer (`ServiceError.response()`: its JSON, code and cache policy), closing.
            var fields = Self.failure.response().headers
            fields[.connection] = "close"
            fields[.contentLength] = String(Self.failure.jsonBody.utf8.count)
            context.write(
                self.wrapOutboundOut(.head(HTTPResponse(status: .badRequest, headerFields: fields))), promise: promise)
        case .end where self.replacing:
            self.replacing = false
            context.write(self.wrapOutboundOut(.body(ByteBuffer(string: Self.failure.jsonBody))), promise: nil)
            context.write(data, promise: promise)
        default:
            context.write(data, promise: promise)
        }
    }
}
