import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// `GET /player.js`: the small script the `html` snippet of a finite-loop GIF references, so that the video
/// plays exactly `playCount` times and stops on its last frame, as the GIF does in a browser. Kept in the
/// executable (not a resource file) so it cannot go missing from an installation.
struct PlayerScriptController<Context: RequestContext>: Sendable {
    func addRoutes(to router: Router<Context>) {
        router.get("player.js", use: self.script)
    }

    @Sendable func script(_ request: Request, context: Context) async throws -> Response {
        if let tags = request.headers[.ifNoneMatch], EntityTag.matches(tags, PlayerScript.etag) {
            return Response(status: .notModified, headers: PlayerScript.headers)
        }
        return Response(status: .ok, headers: PlayerScript.headers, body: .init(byteBuffer: PlayerScript.body))
    }
}

/// The script and its headers, built once.
enum PlayerScript {
    /// The path the snippets reference.
    static let path = "/player.js"

    static let etag: String = {
        let digest = SHA256.hash(data: Data(Self.source.utf8))
        return "\"" + digest.prefix(16).map { String(format: "%02x", $0) }.joined() + "\""
    }()

    /// A day of caching: the URL is stable across releases, so it is not `immutable`; the ETag revalidates.
    /// Any page may load it (`*`), since every page embedding a snippet does.
    static let headers: HTTPFields = [
        .contentType: "text/javascript; charset=utf-8",
        .cacheControl: "public, max-age=86400",
        .eTag: Self.etag,
        .xContentTypeOptions: "nosniff",
        .accessControlAllowOrigin: "*",
    ]

    static let body = ByteBuffer(string: Self.source)

    static let source = #"""
        // Plays every <video data-play-count="N"> exactly N times, then leaves it on its last frame: what
        // browsers do with a GIF whose NETSCAPE loop count is N - 1. Also plays <video data-gif2mp4-lazy> near the
        // viewport, and puts a refused GIF's <img> back (both below). A GIF that loops forever needs
        // no script (`loop`), nor one that plays once (no `loop`). Served by the transcode service at
        // /player.js; the `html` snippet of a finite-loop GIF references it. Safe to include many times:
        // it attaches once per video.
        //
        // While plays remain, `loop` is set, so the browser wraps around seamlessly, as it does for the
        // GIF; every wrap is a seek back to the start, which counts one play. Before the last play `loop`
        // is cleared, so the video ends on its last frame. Without this script the video plays once.
        (() => {
          "use strict";
          const state = Symbol.for("gif2mp4.player");
          const watched = Symbol.for("gif2mp4.lazy");

          function playCount(video) {
            const count = Number.parseInt(video.dataset.playCount, 10);
            return Number.isSafeInteger(count) && count >= 1 ? count : null;
          }

          function arm(video) {
            const count = playCount(video);
            if (count !== null) video.loop = video[state].finished < count - 1;
          }

          function attach(video) {
            if (video[state]) {
              arm(video);
              return;
            }
            video[state] = { finished: 0, restarting: false };
            // A new source (the same element reused) starts the count again.
            video.addEventListener("loadstart", () => {
              video[state].finished = 0;
              arm(video);
            });
            video.addEventListener("seeking", () => {
              if (video[state].restarting) {
                video[state].restarting = false;
                return;
              }
              if (playCount(video) === null || !video.loop || video.currentTime > 0.001) return;
              video[state].finished += 1;
              arm(video);
            });
            // Only reached with `loop` cleared: normally the last play; if plays remain (the count was raised),
            // start the next one.
            video.addEventListener("ended", () => {
              const count = playCount(video);
              if (count === null) return;
              video[state].finished += 1;
              if (video[state].finished < count) {
                arm(video);
                video[state].restarting = true;
                video.currentTime = 0;
                video.play().catch(() => {});
              }
            });
            arm(video);
          }

          // <video data-gif2mp4-lazy> (a rewritten <img loading="lazy">): nothing is loaded until it comes near
          // the viewport; then it plays, as the GIF would have, and pauses while it is out of view.
          const visibility = "IntersectionObserver" in window
            ? new IntersectionObserver((entries) => {
                for (const entry of entries) {
                  const video = entry.target;
                  if (entry.isIntersecting) {
                    const poster = video.getAttribute("data-gif2mp4-poster");
                    if (poster && !video.getAttribute("poster")) video.setAttribute("poster", poster);
                    video.preload = "auto";
                    video.play().catch(() => {});
                  } else if (!video.paused) {
                    video.pause();
                  }
                }
              }, { rootMargin: "200px" })
            : null;

          function watch(video) {
            if (video[watched]) return;
            video[watched] = true;
            if (visibility) visibility.observe(video);
            else video.play().catch(() => {});
          }

          // <video data-gif2mp4-src="GIF"> (a rewritten GIF not converted yet): if its sources fail before it has
          // loaded anything (the service refused the GIF: too large, not an animation), an <img> of the GIF comes
          // back with the video's id, class, style, title, size and label (as alt), which the browser still shows.
          // A video that has loaded keeps playing through a later network error.
          const restored = Symbol.for("gif2mp4.fallback");
          function fallBack(video) {
            if (!video.isConnected || !video.hasAttribute("data-gif2mp4-src")) return;
            if (video.readyState >= HTMLMediaElement.HAVE_METADATA) return;
            const image = document.createElement("img");
            image.setAttribute("src", video.getAttribute("data-gif2mp4-src"));
            for (const name of ["id", "class", "style", "title", "width", "height"]) {
              if (video.hasAttribute(name)) image.setAttribute(name, video.getAttribute(name));
            }
            if (video.hasAttribute("aria-label")) image.setAttribute("alt", video.getAttribute("aria-label"));
            if (video.hasAttribute("data-gif2mp4-lazy")) image.setAttribute("loading", "lazy");
            if (visibility) visibility.unobserve(video);
            video.replaceWith(image);
          }

          function guard(video) {
            if (video[restored]) return;
            video[restored] = true;
            const sources = video.querySelectorAll("source");
            // A <source> that fails fires its own error; the last one's when none is left to try.
            if (sources.length > 0) sources[sources.length - 1].addEventListener("error", () => fallBack(video));
            video.addEventListener("error", () => fallBack(video));
            // Failed before this (deferred) script ran: after a task, still no source and nothing loaded. (A video
            // only starting to choose its source reads "no source" too, until its selection runs.)
            setTimeout(() => {
              if (video.error || (video.networkState === HTMLMediaElement.NETWORK_NO_SOURCE && video.readyState === 0
                  && !video.currentSrc)) fallBack(video);
            }, 0);
          }

          function scan(root) {
            if (root.matches && root.matches("video[data-gif2mp4-src]")) guard(root);
            if (root.querySelectorAll) root.querySelectorAll("video[data-gif2mp4-src]").forEach(guard);
            if (root.matches && root.matches("video[data-play-count]")) attach(root);
            if (root.querySelectorAll) root.querySelectorAll("video[data-play-count]").forEach(attach);
            if (root.matches && root.matches("video[data-gif2mp4-lazy]")) watch(root);
            if (root.querySelectorAll) root.querySelectorAll("video[data-gif2mp4-lazy]").forEach(watch);
          }

          if (window[state]) {
            scan(document);
            return;
          }
          window[state] = true;
          scan(document);
          // Videos added later (client-side rendering) or given a count later (the demo page) attach too.
          new MutationObserver((records) => {
            for (const record of records) {
              if (record.type === "attributes") scan(record.target);
              else record.addedNodes.forEach(scan);
            }
          }).observe(document.documentElement, { subtree: true, childList: true, attributes: true,
            attributeFilter: ["data-play-count", "data-gif2mp4-lazy", "data-gif2mp4-src"] });
        })();
        """#
}
