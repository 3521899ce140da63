import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import TranscodeCore

/// `GET /`: a one-page demo of the API. Paste a GIF's address, drop a GIF file or take the built-in sample, pick
/// the colour transparency is flattened over, and the page calls `POST /transcode` (following a 202 by polling its
/// `Location`), then shows the GIF next to the MP4 over that colour, with the sizes, the bytes saved and the
/// snippet to copy. Light and dark, by the reader's setting. The page is self-contained: its style and script are
/// inline and allowed by hash, so the Content-Security-Policy needs no `'unsafe-inline'`. They are resource files
/// (`Resources/demo.css`, `Resources/demo.js`) that a linter reads, as `player.js` is. Also `GET
/// /demo/sample.gif` (the sample: a disc circling inside a ring, on transparency) and `GET /favicon.ico`.
package struct DemoPageController<Context: RequestContext>: Sendable {

    package init() {}
    package func addRoutes(to router: Router<Context>) {
        router.get("/", use: self.page)
        router.get("demo/sample.gif") { _, _ in try Self.resource("sample.gif", type: "image/gif") }
        router.get("favicon.ico") { _, _ in try Self.resource("favicon.ico", type: "image/x-icon") }
    }

    @Sendable func page(_ request: Request, context: Context) async throws -> Response {
        Response(status: .ok, headers: DemoPage.headers, body: .init(byteBuffer: DemoPage.body))
    }

    /// A resource shipped with the executable (`ServerResources`), read once.
    static func resource(_ name: String, type: String) throws -> Response {
        guard let bytes = DemoPage.resources[name] else {
            throw ServiceError.notFound("\(name) is not installed beside the executable")
        }
        return Response(
            status: .ok,
            headers: [.contentType: type, .cacheControl: "public, max-age=86400", .xContentTypeOptions: "nosniff"],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}

/// The page and its headers, built once.
enum DemoPage {
    static let headers: HTTPFields = [
        .contentType: "text/html; charset=utf-8",
        .cacheControl: "no-cache",
        .xContentTypeOptions: "nosniff",
        .contentSecurityPolicy: Self.contentSecurityPolicy,
    ]

    static let body = ByteBuffer(string: Self.html)

    /// The sample GIF and the favicon, read once (missing: not installed).
    static let resources = ["sample.gif", "favicon.ico"].reduce(into: [String: [UInt8]]()) { found, name in
        found[name] = ServerResources.bytes(name)
    }

    /// The page's colours, light and dark: the background picker starts at the page's own, so a transparent GIF
    /// is flattened over what the reader sees around it.
    static let lightBackground = "#ffffff"
    static let darkBackground = "#121212"

    /// Nothing loads unless listed. A pasted GIF is shown from its own address (any http: or https: host);
    /// a dropped one from a blob: URL; the video, poster and API calls are same-origin.
    static let contentSecurityPolicy = [
        "default-src 'none'",
        "script-src 'self' \(Self.sourceHash(Self.script))",
        "style-src \(Self.sourceHash(Self.style))",
        "img-src 'self' blob: http: https:",
        "media-src 'self' blob:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ].joined(separator: "; ")

    /// A CSP source expression that allows exactly this inline `<script>` or `<style>` text.
    static func sourceHash(_ text: String) -> String {
        "'sha256-\(Data(SHA256.hash(data: Data(text.utf8))).base64EncodedString())'"
    }

    static let html = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>GIF to MP4</title>
        <link rel="icon" href="/favicon.ico">
        <script src="/player.js" defer></script>
        <style>\(Self.style)</style>
        </head>
        <body>
        <main>
          <h1>GIF to MP4</h1>
          <p>Paste the address of a GIF, or drop a GIF file: the service turns it into a small MP4 that plays
          like the GIF.</p>
          <form id="url-form">
            <label for="url">GIF address</label>
            <div class="row">
              <input id="url" name="url" type="url" inputmode="url" autocomplete="off" required
                placeholder="https://example.com/animation.gif">
              <button id="convert" type="submit">Convert</button>
            </div>
          </form>
          <div id="drop" class="drop">
            <label for="file">Or drop a GIF here, or choose one</label>
            <input id="file" type="file" accept="image/gif,image/png,image/apng,image/webp">
            <p>No GIF at hand? <button id="sample" type="button">Try the sample</button> (a transparent one)</p>
          </div>
          <div class="row background">
            <label for="background">Background for transparent parts</label>
            <input id="background" type="color" value="\(Self.lightBackground)">
            <span>the video has no transparency: it is flattened over this colour; the WebP keeps it</span>
          </div>
          <details>
            <summary>Access token</summary>
            <label for="token">Bearer token, if the server asks for one (kept in this browser)</label>
            <input id="token" type="password" autocomplete="off">
          </details>
          <p id="status" role="status" aria-live="polite"></p>
          <p id="error" role="alert" hidden></p>
          <section id="result" hidden aria-labelledby="result-title">
            <h2 id="result-title">Result</h2>
            <div class="pair">
              <figure>
                <img id="gif" alt="The original GIF" referrerpolicy="no-referrer">
                <figcaption>GIF: <span id="gif-size"></span></figcaption>
              </figure>
              <figure>
                <video id="video" autoplay muted playsinline aria-label="The MP4"></video>
                <figcaption>MP4: <span id="mp4-size"></span></figcaption>
              </figure>
              <figure>
                <img id="webp" alt="The animated WebP">
                <figcaption>WebP, transparency kept: <span id="webp-size"></span></figcaption>
              </figure>
            </div>
            <dl>
              <dt>Duration</dt><dd id="duration"></dd>
              <dt>Saved</dt><dd id="saved"></dd>
              <dt>Advice</dt><dd id="advice"></dd>
            </dl>
            <label for="snippet">HTML to embed the video</label>
            <textarea id="snippet" readonly rows="4"></textarea>
            <p><button id="copy" type="button">Copy</button> <span id="copied" role="status"></span></p>
          </section>
        </main>
        <script>\(Self.script)</script>
        </body>
        </html>

        """

    /// The page's style: `Resources/demo.css`, its colours filled in.
    static let style = Self.resource("demo.css")

    /// The page's script: `Resources/demo.js` (checked by `make lint`), its colours filled in.
    static let script = Self.resource("demo.js")

    /// A text resource of the page with `__LIGHT_BACKGROUND__` and `__DARK_BACKGROUND__` filled in; empty when it is
    /// not installed (the page then has no style or no script).
    static func resource(_ name: String) -> String {
        guard let bytes = ServerResources.bytes(name) else { return "" }
        return String(decoding: bytes, as: UTF8.self)
            .replacingOccurrences(of: "__LIGHT_BACKGROUND__", with: Self.lightBackground)
            .replacingOccurrences(of: "__DARK_BACKGROUND__", with: Self.darkBackground)
    }
}
