import Hummingbird
import NIOCore

/// The router's request context: Hummingbird's core storage and the peer's address, which names the client of a
/// request on an open route (`RequestClient.address`).
struct AppRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }
}
