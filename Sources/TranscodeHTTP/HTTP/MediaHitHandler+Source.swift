import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization
import TranscodeCore
import Transcoder

/// What the hit handler is given: one per server, shared by every connection.
extension MediaHitHandler {
    /// What the handler needs of the application; one per server, shared by every connection.
    package struct Source: Sendable {
        /// This node's disk, read through to the fleet's shared store.
        let results: ReadThroughResults
        let metrics: ServiceMetrics
        var cache: DiskCache { self.results.local }
        /// Whether a request is a hit: the one rule (`HitLookup`).
        var lookup: HitLookup { HitLookup(results: self.results) }
        let logger: Logger
        /// `Cache-Control` of `/media`.
        let cacheControl: String
        /// `GET /v1/...` hits too, when answered with bytes (`http.sourceAnswer: bytes`).
        var signedRoute: SignedRoute? = nil
        /// Cache-hit `POST /transcode` with a JSON body too (ahead of the codec only: `MediaHitFront`).
        var transcodeRoute: TranscodeRoute? = nil

        package init(
            results: ReadThroughResults, metrics: ServiceMetrics, logger: Logger, cacheControl: String,
            signedRoute: SignedRoute? = nil, transcodeRoute: TranscodeRoute? = nil
        ) {
            self.results = results
            self.metrics = metrics
            self.logger = logger
            self.cacheControl = cacheControl
            self.signedRoute = signedRoute
            self.transcodeRoute = transcodeRoute
        }
    }

    /// What cache-hit `POST /transcode` needs: the bodies the route has answered (only those: no JSON is
    /// parsed here), the encoded answers it shares with the route, the service that says whether the URL's
    /// link is fresh, the answers' base URL and the route's tokens.
    package struct TranscodeRoute: Sendable {
        let resolved: ResolvedBodies
        let encoded: EncodedResults
        let service: TranscodeService
        let baseURL: String
        let tokens: BearerAuthenticator<AppRequestContext>

        package init(
            tables: HitTables, service: TranscodeService, baseURL: String,
            tokens: BearerAuthenticator<AppRequestContext>
        ) {
            self.resolved = tables.bodies
            self.encoded = tables.encoded
            self.service = service
            self.baseURL = baseURL
            self.tokens = tokens
        }
    }

    /// What `GET /v1/...` hits need: the signed paths the route has verified and parsed (only those are
    /// answered here: no signature is checked twice), the service that says whether the URL's link is fresh,
    /// and the route's `Cache-Control`.
    package struct SignedRoute: Sendable {
        let resolved: ResolvedPaths
        let service: TranscodeService
        let cacheControl: String

        package init(tables: HitTables, service: TranscodeService, cacheControl: String) {
            self.resolved = tables.paths
            self.service = service
            self.cacheControl = cacheControl
        }
    }
}
