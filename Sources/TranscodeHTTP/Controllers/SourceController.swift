import Foundation
import HTTPTypes
import Hummingbird
import Synchronization
import TranscodeCore
import Transcoder

/// `GET` and `HEAD /v1/{signature}/{options}/{base64url source URL}.{mp4|jpg|json}`: a GIF's video, poster
/// or metadata addressed by the GIF's URL, signed like imgproxy's URLs (`URLSigner`, `SourcePath`).
///
/// The first request for a URL shares one download and one transcode with every other request for it
/// (the service's single flight) and waits for the result, however long: a `<video src>` cannot poll. The
/// answer is the file itself (`http.sourceAnswer: bytes`, the default) or a `302` to the immutable
/// `/media/<key>.<ext>` (`redirect`), with `Cache-Control: public, max-age=http.sourceMaxAgeSeconds`:
/// the URL's result may change when the origin's GIF does, unlike `/media`. Errors are never cached
/// (`no-store`, set for every error answer).
package struct SourceController<Context: RequestContext>: Sendable {
    package enum Answer: String, Sendable {
        case bytes
        case redirect
    }

    let service: TranscodeService
    let signer: URLSigner
    let media: MediaController<Context>
    let links: PublicLinks
    let answer: Answer
    let maxAgeSeconds: Int
    /// `Cache-Control: max-age` of an `.auto` answer given while its better formats are being made (the GIF, or
    /// Safari's MP4): short, so the client asks again soon (`http.interimMaxAgeSeconds`).
    let interimMaxAgeSeconds: Int
    /// Paths already verified and parsed, by the whole path (signature included): keys do not change while
    /// the process runs, so a hit skips the HMAC, the base64 and URL parsing and the hashing. Shared with
    /// `MediaHitHandler`, which answers hits of the paths found here.
    let resolved: ResolvedPaths

    package init(
        service: TranscodeService, signer: URLSigner, media: MediaController<Context>, links: PublicLinks,
        answer: Answer, maxAgeSeconds: Int, interimMaxAgeSeconds: Int, tables: HitTables
    ) {
        self.service = service
        self.signer = signer
        self.media = media
        self.links = links
        self.answer = answer
        self.maxAgeSeconds = maxAgeSeconds
        self.interimMaxAgeSeconds = interimMaxAgeSeconds
        self.resolved = tables.paths
    }

    /// Where the signed paths start.

    /// `Cache-Control` of the route's answers: the URL's result may change when the origin's GIF does.
    package static func cacheControl(maxAgeSeconds: Int) -> String { "public, max-age=\(maxAgeSeconds)" }

    package func addRoutes(to router: Router<Context>) {
        router.get(RouterPath(ResponsePolicy.signed.routerPath), use: self.get)
        router.head(RouterPath(ResponsePolicy.signed.routerPath), use: self.head)
    }

    @Sendable func get(_ request: Request, context: Context) async throws -> Response {
        try await self.serve(request, includeBody: true)
    }

    @Sendable func head(_ request: Request, context: Context) async throws -> Response {
        try await self.serve(request, includeBody: false)
    }

    private func serve(_ request: Request, includeBody: Bool) async throws -> Response {
        // The raw path, as signed: no percent-decoding (base64url and `:` need none).
        let full = request.uri.path
        let target = try self.resolved.get(full) ?? self.resolve(full)
        // A signed URL counts against its key's client (the site that signed it); unsigned, the reader's address.
        guard let client = target.client else { return try await self.serve(request, target, includeBody) }
        return try await RequestClient.$current.withValue(client) {
            try await self.serve(request, target, includeBody)
        }
    }

    private func serve(
        _ request: Request, _ target: ResolvedPaths.Target, _ includeBody: Bool
    ) async throws -> Response {
        if target.source.fileExtension == SourcePath.negotiated {
            return try await self.serveNegotiated(request, target: target, includeBody: includeBody)
        }
        let source = target.source
        let outcome = try await self.outcome(target)
        let cacheControl = Self.cacheControl(maxAgeSeconds: self.maxAgeSeconds)
        switch self.answer {
        case .redirect:
            return Response(
                status: .found,
                headers: [
                    .location: self.links.absolute("/media/\(outcome.key).\(source.fileExtension)"),
                    .cacheControl: cacheControl, .contentLength: "0",
                ])
        case .bytes:
            return try await self.media.respond(
                key: outcome.key, fileExtension: source.fileExtension,
                contentType: OutputFormat.withExtension(source.fileExtension)?.mediaType ?? "application/octet-stream",
                request: request, includeBody: includeBody, cacheControl: cacheControl, checked: outcome.object)
        }
    }
}

extension SourceController {
    /// `.auto`: the object's file the client's `<img>` shows best (`ImageNegotiation`), or a redirect to the
    /// source, without making a reader wait for an expensive encode:
    /// - the object with its AVIF and WebP (`ImageNegotiation.objectFormats`), when the cache has it: answered as
    ///   final (`public, max-age=http.sourceMaxAgeSeconds, immutable`);
    /// - else its conversion is queued as an upgrade (`JobPriority.upgrade`, not waited for), and meanwhile a client
    ///   whose `<img>` plays video gets the MP4, made at once at interactive priority (the object without extras,
    ///   the `.mp4` URL's own), and every other client a redirect to the source; both with the short
    ///   `http.interimMaxAgeSeconds`, so the next view gets the better file.
    ///
    /// Never worse than the page without the service: a GIF the service cannot or will not convert (too large, not
    /// animated, not a GIF, the origin failing, the service overloaded) is a redirect to the source too, not an error
    /// an `<img>` would show as a broken image; a takedown stays an error. Every redirect to the source is logged
    /// and counted by its reason (`transcode_auto_fallbacks_total`). Every answer varies by `Accept`.
    fileprivate func serveNegotiated(
        _ request: Request, target: ResolvedPaths.Target, includeBody: Bool
    ) async throws -> Response {
        let accept = request.headers[.accept]
        let final = Self.cacheControl(maxAgeSeconds: self.maxAgeSeconds) + ", immutable"
        let interim = Self.cacheControl(maxAgeSeconds: self.interimMaxAgeSeconds)
        let found: Resolution
        do {
            found = try await self.service.cached(url: target.url, keys: target.keys)
        } catch {
            let failure = ServiceError.from(error)
            guard failure.code != .takenDown else { throw failure }
            return self.toSource(target, cacheControl: "no-store", reason: .failed(failure.code))
        }
        let reason: AutoFallback
        switch found {
        case .fresh(let outcome):
            return try await self.answer(
                outcome, accept: accept, target: target, request: request, includeBody: includeBody,
                cacheControl: final)
        case .stale(let outcome):
            // Served as it is while its job revalidates the URL with the origin.
            _ = await self.queueUpgrade(target)
            return try await self.answer(
                outcome, accept: accept, target: target, request: request, includeBody: includeBody,
                cacheControl: interim)
        case .miss:
            reason = await self.queueUpgrade(target)
        }
        // A failure is not cached by the client: the next view asks again.
        let fallbackCacheControl = reason == .upgrading || reason == .upgradeRefused ? interim : "no-store"
        if case .failed(.takenDown) = reason { throw ServiceError.takenDown("this GIF was taken down") }
        guard ImageNegotiation.playsVideo(accept: accept), let interimTarget = target.interim else {
            return self.toSource(target, cacheControl: fallbackCacheControl, reason: reason)
        }
        // A client whose <img> plays video: the MP4, made now (the reader waits as long as for a `.mp4` URL).
        let outcome: TranscodeOutcome
        do {
            outcome = try await self.outcome(url: target.url, options: interimTarget.options, keys: interimTarget.keys)
        } catch {
            let failure = ServiceError.from(error)
            guard failure.code != .takenDown else { throw failure }
            return self.toSource(target, cacheControl: "no-store", reason: .failed(failure.code))
        }
        guard ImageNegotiation.videoServes(outcome.metadata) else {
            return self.toSource(target, cacheControl: fallbackCacheControl, reason: reason)
        }
        return try await self.answer(
            outcome, accept: accept, target: target, request: request, includeBody: includeBody, cacheControl: interim,
            format: ObjectFiles.video)
    }

    /// How long an `.auto` object whose conversion failed is not queued again: its URL answers the source, with the
    /// failure's code, meanwhile (a GIF past the limits would otherwise be downloaded again on every view).
    static var failedUpgradeRetrySeconds: Double { 600 }

    /// Queues the `.auto` object's conversion at upgrade priority, unless it failed a moment ago.
    /// - Returns: why the source answers meanwhile: `upgrading` once queued (or running).
    private func queueUpgrade(_ target: ResolvedPaths.Target) async -> AutoFallback {
        if let failure = self.service.jobs.failure(of: target.keys.urlKey.rawValue),
            Date().timeIntervalSince(failure.at) < Self.failedUpgradeRetrySeconds,
            await !self.service.jobs.isRunning(target.keys.urlKey.rawValue)
        {
            return .failed(failure.error.code)
        }
        do {
            try await self.service.queue(
                url: target.url, options: target.options, keys: target.keys, priority: .upgrade)
            return .upgrading
        } catch {
            let failure = ServiceError.from(error)
            switch failure.code {
            case .queueFull, .shuttingDown: return .upgradeRefused
            default: return .failed(failure.code)
            }
        }
    }

    /// The answer from `outcome`'s object for `accept`: the file `ImageNegotiation` chooses (or `format`), or the
    /// source when none beats it.
    private func answer(
        _ outcome: TranscodeOutcome, accept: String?, target: ResolvedPaths.Target, request: Request,
        includeBody: Bool, cacheControl: String, format chosen: OutputFormat? = nil
    ) async throws -> Response {
        let format: OutputFormat
        if let chosen {
            format = chosen
        } else {
            switch ImageNegotiation.choose(accept: accept, metadata: outcome.metadata) {
            case .source:
                let reason: AutoFallback =
                    ImageNegotiation.beatsTheSource(outcome.metadata) ? .notAccepted : .keptGIF
                return self.toSource(target, cacheControl: cacheControl, reason: reason)
            case .file(let file): format = file
            }
        }
        var response: Response
        if self.answer == .redirect {
            response = Response(
                status: .found,
                headers: [
                    .location: self.links.absolute(outcome.key.mediaPath(format)), .cacheControl: cacheControl,
                    .contentLength: "0",
                ])
        } else {
            do {
                response = try await self.media.respond(
                    key: outcome.key, fileExtension: format.fileExtension, contentType: format.mediaType,
                    request: request, includeBody: includeBody, cacheControl: cacheControl, checked: outcome.object)
            } catch {
                // The file could not be served now (the shared store failing, the node short of descriptors):
                // the source, as for a failed conversion.
                let failure = ServiceError.from(error)
                guard failure.code != .takenDown else { throw failure }
                return self.toSource(target, cacheControl: "no-store", reason: .failed(failure.code))
            }
        }
        response.headers[.vary] = "Accept"
        return response
    }

    /// The target's object, converted first if need be, waited for however long it takes (a `<video src>` or an
    /// `<img src>` cannot poll).
    private func outcome(_ target: ResolvedPaths.Target) async throws -> TranscodeOutcome {
        try await self.outcome(url: target.url, options: target.options, keys: target.keys)
    }

    private func outcome(url: URL, options: TranscodeOptions, keys: SourceKeys) async throws -> TranscodeOutcome {
        guard
            case .done(let outcome, _) = try await self.service.transcode(
                url: url, options: options, untilDone: true, keys: keys)
        else {
            throw ServiceError.internal("a transcode waited for in full answered pending")
        }
        return outcome
    }

    /// A redirect to the source's own URL, varying by `Accept`, with its reason in `X-Fallback`: logged and counted
    /// (`transcode_auto_fallbacks_total{reason}`), so that a page that looks right and saves nothing is seen.
    private func toSource(_ target: ResolvedPaths.Target, cacheControl: String, reason: AutoFallback) -> Response {
        let headers: HTTPFields = [
            .location: target.url.absoluteString, .cacheControl: cacheControl, .vary: "Accept", .contentLength: "0",
            HTTPField.Name("X-Fallback")!: reason.label,
        ]
        self.service.metrics.autoFallback(reason)
        self.service.logger.info(
            "auto answered the source",
            metadata: [
                "fallback.reason": "\(reason.label)", "url.key": "\(target.keys.urlKey.rawValue.prefix(16))",
            ])
        return Response(status: .found, headers: headers)
    }

    /// Verifies the signature of `full` (`/v1/<signature>/<path>`), parses it and remembers the result.
    fileprivate func resolve(_ full: String) throws -> ResolvedPaths.Target {
        guard full.hasPrefix(ResponsePolicy.signed.prefix) else { throw ServiceError.notFound("no such route") }
        let afterPrefix = full.dropFirst(ResponsePolicy.signed.prefix.count)
        guard let slash = afterPrefix.firstIndex(of: "/") else { throw ServiceError.invalidSignature }
        let signature = afterPrefix[..<slash]
        let path = String(afterPrefix[slash...])
        // Checked before anything else is read from the path: an unsigned path costs one HMAC per key.
        let pair = self.signer.signingPair(signature: signature, path: path)
        guard pair != nil || self.signer.disabled else { throw ServiceError.invalidSignature }
        let source = try SourcePath.parse(path)
        let url = try Downloader.validate(source.sourceURL)
        // A `.webp`, `.avif` or `.webm` is an extra of its object: asked for, it is made (with the video and the poster) by
        // one job, as are those `also:` names. `.auto` chooses among the files of an object made with
        // `ImageNegotiation.objectFormats`.
        let extras = source.fileExtension == SourcePath.negotiated ? ImageNegotiation.objectFormats : source.extras
        let options = self.service.options(
            background: source.background, maxWidth: source.width, maxHeight: source.height,
            previewSeconds: source.preview, extraFormats: extras)
        var target = ResolvedPaths.Target(
            source: source, url: url, options: options, keys: SourceKeys(url: url, options: options),
            client: pair.map { RequestClient.named($0.client) })
        if source.fileExtension == SourcePath.negotiated {
            let plain = self.service.options(
                background: source.background, maxWidth: source.width, maxHeight: source.height,
                previewSeconds: source.preview)
            target.interim = .init(options: plain, keys: SourceKeys(url: url, options: plain))
        }
        self.resolved.set(full, target)
        return target
    }
}

/// Signed paths already verified and parsed: bounded (emptied when full), only valid ones are kept.
final class ResolvedPaths: Sendable {
    struct Target: Sendable {
        let source: SourcePath
        let url: URL
        let options: TranscodeOptions
        let keys: SourceKeys
        /// The signing key's client; nil when the URL was not signed (signing disabled).
        var client: RequestClient? = nil
        /// `.auto`'s interim object: the same without the extras (its MP4, made at once for a client that plays it).
        var interim: ResolvedPaths.Target.Interim? = nil

        struct Interim: Sendable {
            let options: TranscodeOptions
            let keys: SourceKeys
        }
    }

    static var capacity: Int { 10_000 }
    private let targets = Mutex<[String: Target]>([:])

    func get(_ path: String) -> Target? { self.targets.withLock { $0[path] } }

    func set(_ path: String, _ target: Target) {
        self.targets.withLock { targets in
            if targets.count >= Self.capacity { targets.removeAll(keepingCapacity: true) }
            targets[path] = target
        }
    }
}
