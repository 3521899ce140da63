import Hummingbird
import NIOCore
import TranscodeCore

/// The router's request context: Hummingbird's core storage and the peer's address, which names the client of a
/// request on an open route (`RequestClient.address`).
package struct AppRequestContext: RequestContext, RemoteAddressRequestContext {
    package var coreContext: CoreRequestContextStorage
    package let remoteAddress: SocketAddress?

    package init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }
}
