/// What the routes learn that lets a later request be answered as a hit ahead of the router, by
/// `MediaHitHandler`: the signed `GET /v1/...` paths verified and parsed (`ResolvedPaths`), the `POST /transcode`
/// JSON bodies answered (`ResolvedBodies`), and those answers' JSON (`EncodedResults`). One per server, filled by
/// `SourceController` and `TranscodeController`, read by the hit handler. Opaque outside this module: the
/// executable makes one and hands the same to the routes and to the handler.
package struct HitTables: Sendable {
    let paths = ResolvedPaths()
    let bodies = ResolvedBodies()
    let encoded = EncodedResults()

    package init() {}
}
