import Foundation
import HTTPTypes
import Hummingbird
import NIOPosix
import TranscodeCore
import Transcoder

/// `POST /v1/rewrite` (bearer token when tokens are configured): an HTML document in, the same document out
/// with every GIF's URL in its `<img>` (and `<picture>` sources) a signed `.auto` URL, or (`output=video`) every
/// GIF `<img>` (or `<picture>`) turned into a `<video>` of signed `GET /v1/...` URLs; every other byte unchanged
/// (`HTMLGIFScanner`, `HTMLRewriter`).
///
/// Query: `output=img` (the default: the elements stay, so the page's CSS, lazy loading, `srcset` choices and
/// pages without scripts work as before; each `.auto` URL answers the smallest file that browser's `<img>`
/// shows, or the GIF) or `output=video`; `mode=lazy` (the default: rewritten at once, the GET URLs convert on
/// first view) or `mode=eager` (each GIF converted first; a GIF whose conversion fails or that nothing beats
/// stays as it is); `base=URL` to resolve relative sources (a `<base href>` in the document is honoured too);
/// `background=RRGGBB`.
package struct RewriteController<Context: RequestContext>: Sendable {
    let service: TranscodeService
    let links: PublicLinks
    /// Largest document (`rewrite.maxBodyBytes`).
    let maxBodyBytes: Int
    /// Most GIFs in one document (`rewrite.maxGifs`); beyond, 422 `too-many-gifs` before any work.
    let maxGIFs: Int
    /// Longest a parse may take (`rewrite.parseTimeoutSeconds`); beyond, 422 `too-complex`.
    let parseTimeoutSeconds: Double
    /// The bound on parses at once (`rewrite.maxParses`).
    let parses: CountingLimit

    package init(
        service: TranscodeService, links: PublicLinks, maxBodyBytes: Int, maxGIFs: Int, parseTimeoutSeconds: Double,
        parses: CountingLimit
    ) {
        self.service = service
        self.links = links
        self.maxBodyBytes = maxBodyBytes
        self.maxGIFs = maxGIFs
        self.parseTimeoutSeconds = parseTimeoutSeconds
        self.parses = parses
    }
    /// Conversions run at once for one `eager` document.
    static var eagerConcurrency: Int { 4 }

    enum Mode: String, Sendable { case lazy, eager }

    /// What a GIF becomes: its own element with `.auto` URLs, or a `<video>`.
    enum Output: String, Sendable { case img, video }

    package func addRoutes(to router: Router<Context>, authenticator: BearerAuthenticator<Context>) {
        router.group("v1/rewrite").add(middleware: authenticator).post(use: self.rewrite)
    }

    @Sendable func rewrite(_ request: Request, context: Context) async throws -> Response {
        let contentType = request.headers[.contentType] ?? ""
        guard contentType.lowercased().hasPrefix("text/html") else {
            throw ServiceError(
                .unsupportedMediaType, "send the document as text/html, got \(contentType)")
        }
        try StrictQuery.check(request, allowed: ["output", "mode", "base", "background"], route: "POST /v1/rewrite")
        let modeText = request.uri.queryParameters.get("mode") ?? Mode.lazy.rawValue
        guard let mode = Mode(rawValue: modeText) else {
            throw ServiceError.badRequest("mode must be lazy or eager, got \(modeText)")
        }
        let outputText = request.uri.queryParameters.get("output") ?? Output.img.rawValue
        guard let output = Output(rawValue: outputText) else {
            throw ServiceError.badRequest("output must be img or video, got \(outputText)")
        }
        var base: URL?
        if let text = request.uri.queryParameters.get("base") {
            guard let url = URL(string: text), ["http", "https"].contains(url.scheme?.lowercased() ?? ""),
                url.host != nil
            else { throw ServiceError.badRequest("base must be an absolute http(s) URL, got \(text)") }
            base = url
        }
        let background = try TranscodeController<Context>.background(request.uri.queryParameters.get("background"))
        guard self.links.signer.canSign else {
            throw ServiceError(
                .signingNotConfigured, "rewriting needs signed URLs: configure signing.keys and signing.salts")
        }
        let body = try await TranscodeController<Context>.collect(request, upTo: self.maxBodyBytes)
        let html = Array(body.readableBytesView)
        // Parsing is CPU work: on threads of its own, not the executor or the shared I/O pool; never of a
        // document whose shape would make the parser's cost quadratic (nested too deep, an element with too many
        // attributes) and hold a thread for minutes; and not waited for beyond its deadline, counted from now.
        let scan = try await HTMLGIFScanner.parse(within: self.parseTimeoutSeconds, admittedBy: self.parses) {
            deadline in
            if let refusal = HTMLGIFScanner.refusal(html) { throw refusal }
            return try HTMLGIFScanner.scan(html, until: deadline)
        }
        guard scan.elements.count <= self.maxGIFs else {
            throw ServiceError(
                .tooManyGIFs,
                "the document has \(scan.elements.count) GIFs; at most \(self.maxGIFs) are rewritten in one request")
        }
        if let href = scan.baseHref, let resolved = URL(string: href, relativeTo: base)?.absoluteURL,
            ["http", "https"].contains(resolved.scheme?.lowercased() ?? "")
        {
            base = resolved
        }
        // An `.auto` URL's object has the animated WebP and AVIF as well: what eager mode converts and lazy mode looks
        // up and queues (the same options as the `.auto` route's, so the same key).
        // A video's object has the VP9 WebM as well (made only of a GIF with transparency or of odd size): its
        // `<video>` lists it first, so the page shows through where the GIF is transparent, and an odd size is kept.
        let options = self.service.options(
            background: background,
            extraFormats: output == .img ? ImageNegotiation.objectFormats : HTMLRewriter.videoExtras)
        let links = self.links(for: request)
        // Each element's GIF, absolute; elements whose source cannot be fetched (relative without a base,
        // data: URLs, other schemes) stay as they are.
        var sources: [Int: URL] = [:]
        for (index, element) in scan.elements.enumerated() {
            // A video shows one GIF: a `srcset`'s largest, which the browser would show at the widest.
            let shown = output == .video && !element.browserChoosesSource ? element.largestSource : element.source
            let text = shown.trimmingCharacters(in: .whitespacesAndNewlines)
            guard let url = URL(string: text, relativeTo: base)?.absoluteURL,
                let valid = try? Downloader.validate(url.absoluteString)
            else { continue }
            sources[index] = valid
        }
        // What this rewrite may convert: every GIF but, in `output=video`, those of pictures it leaves pictures.
        let converted = sources.filter { output == .img || !scan.elements[$0.key].browserChoosesSource }
        let metadata = try await self.metadata(for: Set(converted.values), mode: mode, options: options)
        if mode == .lazy {
            // What the page will ask for is prepared now, behind readers (`JobPriority.upgrade`): the first reader
            // of a freshly published page then finds the AVIF made, or waits for less.
            await self.prepare(Set(converted.values).filter { metadata[$0] == nil }, options: options)
        }
        var replacements: [(range: Range<Int>, text: String)] = []
        var rewritten = 0
        // The element kept, its GIF URLs signed `.auto` ones. - Returns: whether a URL changed.
        func rewriteImage(_ element: GIFElement) -> Bool {
            let changes = HTMLRewriter.image(for: element) { text in
                guard let candidate = URL(string: text, relativeTo: base)?.absoluteURL,
                    let valid = try? Downloader.validate(candidate.absoluteString)
                else { return nil }
                let path = SourcePath(
                    sourceURL: valid.absoluteString, background: background, fileExtension: SourcePath.negotiated
                ).path
                return links.absolute(links.signer.signedPath(path))
            }
            replacements += changes
            return !changes.isEmpty
        }
        for (index, element) in scan.elements.enumerated() where output == .img || element.browserChoosesSource {
            guard let url = sources[index] else { continue }
            // A `<picture>` offering another format stays a picture in `output=video` too (the browser shows that
            // format, not its GIF): its GIF URLs are `.auto` ones in `mode=lazy`; `mode=eager`, which changes only
            // what it converted, leaves it as it is (its `.auto` object is not the video's).
            if mode == .eager, output == .video { continue }
            if mode == .eager, !(metadata[url].map(ImageNegotiation.beatsTheSource) ?? false) { continue }
            if rewriteImage(element) { rewritten += 1 }
        }
        for (index, element) in scan.elements.enumerated() where output == .video && !element.browserChoosesSource {
            guard let url = sources[index] else { continue }
            let known = metadata[url]
            // A transparent GIF whose object has no WebM smaller than it (none reached the quality floor): a video
            // would show it flattened, an opaque box on a dark page. It stays an image: an `.auto` one in `mode=lazy`
            // (as `output=img` has it), the GIF as it is in `mode=eager` (which changes only what it converted).
            if let known, Self.videoLosesTransparency(known) {
                if mode == .lazy, rewriteImage(element) { rewritten += 1 }
                continue
            }
            if mode == .eager, known?.recommendation != .video { continue }
            guard
                let signed = links.signed(
                    sourceURL: url.absoluteString, background: background, extras: HTMLRewriter.videoExtras),
                let mp4 = signed[.video], let poster = signed[.poster]
            else { continue }
            var target = RewriteTarget(
                mp4URL: mp4, posterURL: poster, webmURL: signed[.extra(.webm)],
                alphaPosterURL: signed[.extra(.webpPoster)], metadata: known)
            target.manifestURL = signed[.metadata]
            replacements.append(
                (
                    element.range,
                    HTMLRewriter.video(
                        for: element, target: target, playerScript: links.absolute(PlayerScript.path))
                ))
            rewritten += 1
        }
        let document = HTMLRewriter.rewrite(html, replacements)
        return Response(
            status: .ok,
            headers: [
                .contentType: contentType,
                HTTPField.Name("X-GIFs-Found")!: String(scan.elements.count),
                HTTPField.Name("X-GIFs-Rewritten")!: String(rewritten),
            ],
            body: .init(byteBuffer: ByteBuffer(bytes: document)))
    }

    /// Whether `metadata`'s object shows its GIF's transparency in no video: the GIF has some, and the object has no
    /// WebM (none reached the quality floor) or one not smaller than the GIF (which the `<video>` does not list).
    static func videoLosesTransparency(_ metadata: TranscodeMetadata) -> Bool {
        guard metadata.hasTransparency else { return false }
        guard let webm = ObjectFiles.recorded(.webm, in: metadata) else { return true }
        return webm.recommendation == .keepGIF
    }

    /// The URLs a rewritten page needs are absolute: the page lives on another site. Under
    /// `http.publicBaseURL`, or else this request's own origin (`X-Forwarded-Proto` and `Host`).
    private func links(for request: Request) -> PublicLinks {
        guard self.links.baseURL.isEmpty, let host = request.head.authority else {
            return self.links
        }
        let scheme = request.headers[HTTPField.Name("X-Forwarded-Proto")!] == "https" ? "https" : "http"
        return PublicLinks(baseURL: "\(scheme)://\(host)", signer: self.links.signer)
    }

    /// Queues the conversion of each of `urls` with `options` at upgrade priority, without waiting for any. One the
    /// upgrades' queue has no room for is left to the page's first request.
    private func prepare(_ urls: Set<URL>, options: TranscodeOptions) async {
        for url in urls.sorted(by: { $0.absoluteString < $1.absoluteString }) {
            do {
                try await self.service.queue(
                    url: url, options: options, keys: SourceKeys(url: url, options: options), priority: .upgrade)
            } catch {
                let failure = ServiceError.from(error)
                if failure.code == .queueFull || failure.code == .shuttingDown { return }
            }
        }
    }

    /// What is known of each GIF: in `lazy` mode what the cache has; in `eager` mode each converted (several
    /// at once), failures absent.
    private func metadata(
        for urls: Set<URL>, mode: Mode, options: TranscodeOptions
    ) async throws -> [URL: TranscodeMetadata] {
        switch mode {
        case .lazy:
            var known: [URL: TranscodeMetadata] = [:]
            // A GIF whose object cannot be checked now (out of descriptors) is left as it is, like one not
            // converted yet: the page loses nothing.
            for url in urls { known[url] = try? self.service.cachedMetadata(url: url, options: options) }
            return known
        case .eager:
            return await withTaskGroup(of: (URL, TranscodeMetadata?).self) { group in
                var known: [URL: TranscodeMetadata] = [:]
                var pending = urls.sorted { $0.absoluteString < $1.absoluteString }[...]
                func start() {
                    guard let url = pending.popFirst() else { return }
                    group.addTask {
                        guard
                            case .done(let outcome, _)? = try? await self.service.transcode(
                                url: url, options: options, untilDone: true)
                        else { return (url, nil) }
                        return (url, outcome.metadata)
                    }
                }
                for _ in 0..<Self.eagerConcurrency { start() }
                while let (url, metadata) = await group.next() {
                    known[url] = metadata
                    start()
                }
                return known
            }
        }
    }
}
