import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// `GET /`: a one-page demo of the API. Paste a GIF's address, drop a GIF file or take the built-in sample, pick
/// the colour transparency is flattened over, and the page calls `POST /transcode` (following a 202 by polling its
/// `Location`), then shows the GIF next to the MP4 over that colour, with the sizes, the bytes saved and the
/// snippet to copy. Light and dark, by the reader's setting. The page is self-contained: its style and script are
/// inline and allowed by hash, so the Content-Security-Policy needs no `'unsafe-inline'`. Also `GET
/// /demo/sample.gif` (the sample: a disc circling inside a ring, on transparency) and `GET /favicon.ico`.
struct DemoPageController<Context: RequestContext>: Sendable {
    func addRoutes(to router: Router<Context>) {
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

    static let style = #"""

        :root { color-scheme: light dark; font-family: system-ui, sans-serif; line-height: 1.5; }
        body { margin: 0; background: \#(DemoPage.lightBackground); color: #1a1a1a; }
        @media (prefers-color-scheme: dark) { body { background: \#(DemoPage.darkBackground); color: #e8e8e8; } }
        .background { align-items: center; flex-wrap: wrap; }
        .background label { margin: 0; }
        .background span { opacity: 0.75; font-size: 0.9rem; }
        .pair figure { padding: 0.5rem; border-radius: 0.5rem; }
        main { max-width: 60rem; margin: 0 auto; padding: 1rem; }
        h1 { font-size: 1.6rem; margin: 0.5rem 0; }
        label { display: block; font-weight: 600; margin: 0.75rem 0 0.25rem; }
        .row { display: flex; gap: 0.5rem; }
        input, button, textarea { font: inherit; }
        #url, #token { flex: 1; min-width: 0; padding: 0.5rem; box-sizing: border-box; }
        button { padding: 0.5rem 1rem; cursor: pointer; }
        .drop { border: 2px dashed #888; border-radius: 0.5rem; padding: 1rem; margin: 1rem 0; }
        .drop.over { border-color: #2a7ae2; background: rgba(42, 122, 226, 0.1); }
        #error { border-left: 4px solid #c62828; background: rgba(198, 40, 40, 0.1); padding: 0.5rem 0.75rem; }
        .pair { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; align-items: start; }
        figure { margin: 0; }
        img, video { display: block; max-width: 100%; height: auto; }
        dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.25rem 1rem; }
        dt { font-weight: 600; }
        dd { margin: 0; }
        textarea { width: 100%; box-sizing: border-box; font-family: ui-monospace, monospace; font-size: 0.85rem; }
        [hidden] { display: none !important; }
        @media (max-width: 40rem) { .pair { grid-template-columns: 1fr; } }

        """#

    static let script = #"""

        "use strict";
        const $ = (id) => document.getElementById(id);
        const statusLine = $("status"), errorBox = $("error"), result = $("result");
        const gif = $("gif"), video = $("video"), fileInput = $("file"), drop = $("drop"), token = $("token");
        const backgroundInput = $("background");
        let run = 0; // bumped by every conversion, so a stale answer or poll is dropped
        let previewURL = null;
        let last = null; // the last conversion asked for, run again when the background changes

        // The page's own background in the reader's scheme, unless they chose another.
        const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
        backgroundInput.value = dark ? "\#(DemoPage.darkBackground)" : "\#(DemoPage.lightBackground)";
        function paintBackdrops() {
          for (const figure of document.querySelectorAll(".pair figure")) {
            figure.style.background = backgroundInput.value;
          }
        }
        paintBackdrops();
        backgroundInput.addEventListener("change", () => {
          paintBackdrops();
          if (last) last();
        });

        try { token.value = localStorage.getItem("gif2mp4.token") || ""; } catch (_) {}
        token.addEventListener("change", () => {
          try { localStorage.setItem("gif2mp4.token", token.value.trim()); } catch (_) {}
        });

        const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
        const kb = (bytes) => (bytes / 1024).toFixed(1) + " KB";

        function showError(error) {
          const code = document.createElement("strong");
          code.textContent = error.code || "error";
          errorBox.replaceChildren(code, ": " + (error.message || "something went wrong"));
          errorBox.hidden = false;
          statusLine.textContent = "";
        }

        async function apiError(response) {
          try {
            const body = await response.json();
            if (body && body.error && body.error.code) return body.error;
          } catch (_) {}
          return { code: "http-" + response.status, message: response.statusText || "the request failed" };
        }

        async function convert(body, contentType, preview) {
          last = () => convert(body, contentType, preview);
          const mine = ++run;
          errorBox.hidden = true;
          result.hidden = true;
          statusLine.textContent = "Converting…";
          const headers = { "Content-Type": contentType };
          if (token.value.trim()) headers.Authorization = "Bearer " + token.value.trim();
          try {
            const background = backgroundInput.value;
            let response;
            if (contentType === "application/json") {
              const fields = JSON.parse(body);
              fields.background = background;
              fields.formats = ["webp"];
              response = await fetch("/transcode", { method: "POST", headers, body: JSON.stringify(fields) });
            } else {
              const query = "?formats=webp&background=" + encodeURIComponent(background);
              response = await fetch("/transcode" + query, { method: "POST", headers, body });
            }
            let answer;
            if (response.status === 202) {
              // Slow conversions answer 202 with the job to poll.
              const job = response.headers.get("Location");
              const started = Date.now();
              for (;;) {
                await sleep(1000);
                if (mine !== run) return;
                statusLine.textContent = "Converting… " + Math.round((Date.now() - started) / 1000) + " s";
                response = await fetch(job, { cache: "no-store" });
                if (!response.ok) throw await apiError(response);
                const state = await response.json();
                if (state.status === "done") { answer = state.result; break; }
                if (state.status === "failed") throw state.error || { code: "failed", message: "conversion failed" };
              }
            } else if (!response.ok) {
              throw await apiError(response);
            } else {
              answer = await response.json();
            }
            if (mine === run) show(answer, preview);
          } catch (error) {
            if (mine !== run) return;
            const message = String((error && error.message) || error);
            showError(error && error.code ? error : { code: "network", message });
          }
        }

        function show(r, preview) {
          gif.src = preview;
          const webp = $("webp");
          for (const media of [gif, video, webp]) { media.width = r.sourceWidth; media.height = r.sourceHeight; }
          const webpEntry = (r.artifacts || []).find((a) => a.format === "webp");
          webp.src = r.webp || "";
          webp.closest("figure").hidden = !r.webp;
          $("webp-size").textContent = webpEntry
            ? kb(webpEntry.bytes) + (webpEntry.lossless ? ", lossless" : "")
              + (webpEntry.recommendation === "keep-gif" ? " (not smaller than the GIF)" : "")
            : "";
          video.loop = r.loopsForever;
          // A finite loop count is played by /player.js, as in the snippet.
          if (!r.loopsForever && r.playCount > 1) video.dataset.playCount = r.playCount;
          else delete video.dataset.playCount;
          video.muted = true;
          video.poster = r.poster;
          video.src = r.mp4;
          $("gif-size").textContent = kb(r.sourceBytes);
          $("mp4-size").textContent = kb(r.mp4Bytes);
          const plays = r.loopsForever ? "loops forever"
            : r.playCount > 1 ? "plays " + r.playCount + " times" : "plays once";
          $("duration").textContent = (r.durationMs / 1000).toFixed(2) + " s, " + plays;
          const saved = r.sourceBytes - r.mp4Bytes;
          $("saved").textContent = saved > 0
            ? kb(saved) + " (" + Math.round(saved * 100 / r.sourceBytes) + "%)"
            : "nothing: the MP4 is " + kb(-saved) + " larger";
          $("advice").textContent = (r.recommendation === "video" ? "Use the video." : "Keep the GIF.")
            + (r.truncated ? " The GIF is truncated; the frames before the break were kept." : "");
          $("snippet").value = r.html;
          $("copied").textContent = "";
          statusLine.textContent = "Done.";
          result.hidden = false;
          video.play().catch(() => {}); // autoplay may be refused; the poster stays
        }

        function convertFile(file) {
          if (!file) return;
          // The service tells the format by its signature; this only turns away what cannot be one.
          if (file.type && !/^image\/(gif|png|apng|webp)$/.test(file.type)) {
            showError({ code: "unsupported-format", message: file.name + " is not a GIF, APNG or WebP" });
            return;
          }
          if (previewURL) URL.revokeObjectURL(previewURL);
          previewURL = URL.createObjectURL(file);
          convert(file, file.type || "application/octet-stream", previewURL);
        }

        $("url-form").addEventListener("submit", (event) => {
          event.preventDefault();
          const url = $("url").value.trim();
          convert(JSON.stringify({ url }), "application/json", url);
        });
        fileInput.addEventListener("change", () => { convertFile(fileInput.files[0]); fileInput.value = ""; });
        $("sample").addEventListener("click", async () => {
          try {
            const response = await fetch("/demo/sample.gif");
            if (!response.ok) throw await apiError(response);
            const blob = await response.blob();
            convertFile(new File([blob], "sample.gif", { type: "image/gif" }));
          } catch (error) {
            showError(error && error.code ? error : { code: "network", message: String(error) });
          }
        });
        drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
        drop.addEventListener("dragleave", () => drop.classList.remove("over"));
        drop.addEventListener("drop", (event) => {
          event.preventDefault();
          drop.classList.remove("over");
          convertFile(event.dataTransfer.files[0]);
        });
        // A file dropped beside the zone would otherwise replace the page.
        window.addEventListener("dragover", (event) => event.preventDefault());
        window.addEventListener("drop", (event) => event.preventDefault());

        $("copy").addEventListener("click", async () => {
          const snippet = $("snippet");
          let copied = true;
          try {
            await navigator.clipboard.writeText(snippet.value);
          } catch (_) {
            // No Clipboard API (an http: page on another host): select and use the older command.
            snippet.focus();
            snippet.select();
            copied = document.execCommand("copy");
          }
          $("copied").textContent = copied ? "Copied." : "Press Ctrl+C (⌘C) to copy.";
        });

        """#
}
