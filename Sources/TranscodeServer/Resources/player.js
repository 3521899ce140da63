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
            if (poster && !video.getAttribute("poster") && !video[posterWatched]) posterUnlessWebM(video, poster);
            video.preload = "auto";
            video.play().catch(() => {});
          } else if (!video.paused) {
            video.pause();
          }
        }
      }, { rootMargin: "200px" })
    : null;

  function playsWebM(video) {
    return Boolean(video.currentSrc) && /\.webm$/.test(new URL(video.currentSrc, location.href).pathname);
  }

  // The poster (a JPEG flattened over the background) shows only while the source is not the WebM: a WebM
  // (with alpha) shows the page through from its first picture, which the JPEG would cover until then; its
  // poster is the still WebP that keeps the transparency (data-gif2mp4-alpha-poster), or none. A WebM that
  // fails (the GIF has none) gives the JPEG back to the MP4 that plays instead.
  const posterWatched = Symbol.for("gif2mp4.poster");
  function posterUnlessWebM(video, poster) {
    video[posterWatched] = true;
    const alpha = video.getAttribute("data-gif2mp4-alpha-poster");
    const decide = () => {
      if (!playsWebM(video)) video.setAttribute("poster", poster);
      else if (alpha) video.setAttribute("poster", alpha);
      else video.removeAttribute("poster");
    };
    const webm = video.querySelector("source[type^='video/webm']");
    if (webm) webm.addEventListener("error", () => video.setAttribute("poster", poster), { once: true });
    video.addEventListener("loadstart", decide);
    if (video.currentSrc) decide();
  }

  function watch(video) {
    if (video[watched]) return;
    video[watched] = true;
    if (visibility) visibility.observe(video);
    else video.play().catch(() => {});
  }

  // <video data-gif2mp4-img='{...}'> (a rewritten <img>): the page's CSS styles images by their type
  // (`article img { max-width: 100%; height: auto; display: block }`), which no <video> matches. The box that
  // CSS gives the <img> is measured on an <img> of the same attributes (id, class, style, title, width,
  // height, srcset, sizes) put in the video's place for a moment, its every candidate an empty SVG of the GIF's
  // size scaled by its descriptor (nothing is fetched), and copied to the video; again when the window's size
  // changes. The GIF's size is the rewrite's (`natural`), else the video's own once its metadata is in.
  const boxed = Symbol.for("gif2mp4.box");
  const sides = ["top", "right", "bottom", "left"];
  const carried = ["display", "float", "vertical-align", "object-fit",
    "object-position", "background-color", "background-image", "background-position", "background-size",
    "background-repeat", "background-origin", "background-clip", "box-shadow", "opacity", "filter"].concat(
    sides.flatMap((side) => ["margin-" + side, "padding-" + side, "border-" + side + "-width",
      "border-" + side + "-style", "border-" + side + "-color"]),
    ["top-left", "top-right", "bottom-right", "bottom-left"].map((corner) => "border-" + corner + "-radius"));

  // An empty SVG of `natural` (the GIF's [width, height]) scaled by `scale`, at least 1x1.
  function emptySVG(natural, scale) {
    const [width, height] = natural.map((side) => Math.max(1, Math.round(side * scale)));
    return "data:image/svg+xml," + encodeURIComponent(
      '<svg xmlns="http://www.w3.org/2000/svg" width="' + width + '" height="' + height + '"/>');
  }

  // Once the page's Content-Security-Policy has refused a stand-in's SVG (no `img-src data:`), the later ones
  // (a resize measures again) have none: a refused image is a violation report each time.
  let dataImagesRefused = false;

  function placeholder(video) {
    const layout = video[boxed].layout;
    let natural = Array.isArray(layout.natural) ? layout.natural : null;
    if (!natural && video.videoWidth > 0) natural = [video.videoWidth, video.videoHeight];
    // Nothing loaded yet (a lazy video): the size the <img>'s width and height say, which the browser too
    // laid the image out by until it loaded.
    const said = ["width", "height"].map((name) => Number.parseInt(layout[name], 10));
    if (!natural && said.every((value) => Number.isFinite(value) && value > 0)) natural = said;
    if (!natural) return null;
    const image = document.createElement("img");
    for (const name of ["id", "class", "title"]) {
      if (video.hasAttribute(name)) image.setAttribute(name, video.getAttribute(name));
    }
    if (video[boxed].style !== null) image.setAttribute("style", video[boxed].style);
    for (const name of ["width", "height"]) {
      if (typeof layout[name] === "string") image.setAttribute(name, layout[name]);
    }
    image[boxed] = natural.map(String);
    if (dataImagesRefused) return image;
    // The `src`, a 1x candidate beside the `srcset`'s (the GIF's size over its own density when that is an x
    // descriptor), when the <img> had one: a `srcset` of "a.gif 2x" alone lays out at half the GIF's size.
    let srcScale = 1;
    // The candidates as the rewrite parsed them (the HTML standard's way: a URL may hold commas).
    if (Array.isArray(layout.candidates)) {
      const candidates = layout.candidates.filter((parts) => Array.isArray(parts) && parts[0]);
      const density = (parts) => {
        const value = Number.parseFloat(parts[1] || "1x");
        return Number.isFinite(value) && value > 0 ? value : 1;
      };
      const shown = candidates.find((parts) => parts[0] === layout.source);
      if (shown && /x$/i.test((shown[1] || "1x").trim())) srcScale = 1 / density(shown);
      if (shown) {
        image.srcset = candidates.map((parts) => {
          return emptySVG(natural, density(parts) / density(shown)) + " " + (parts[1] || "1x");
        }).join(", ");
        if (typeof layout.sizes === "string") image.sizes = layout.sizes;
      }
    }
    if (layout.src !== false) image.src = emptySVG(natural, srcScale);
    return image;
  }

  // Every video at once, as the page laid out every <img> at once: a video's box can depend on another's (two
  // in the tracks of one grid). The placeholders load first (an SVG data URL: no request leaves the page),
  // then, in one go, take the videos' places, are measured, and give way.
  let round = 0;
  function measureAll() {
    const current = ++round;
    const videos = Array.from(document.querySelectorAll("video[data-gif2mp4-img]"))
      .filter((video) => video[boxed] && video.isConnected);
    const placed = videos.map((video) => [video, placeholder(video)]).filter((pair) => pair[1]);
    const loaded = placed.map(([, image]) => new Promise((resolve) => {
      if (image.complete) resolve();
      image.addEventListener("load", resolve, { once: true });
      image.addEventListener("error", resolve, { once: true });
    }));
    Promise.all(loaded).then(() => {
      if (current !== round) return;
      // An SVG the page's Content-Security-Policy refused (no `img-src data:`): the image's box from its
      // width and height alone, the GIF's size where it gave none (a `srcset`'s density then not applied).
      for (const [, image] of placed) {
        if (image.naturalWidth > 0) continue;
        if (image.hasAttribute("src") || image.hasAttribute("srcset")) dataImagesRefused = true;
        const natural = image[boxed];
        image.removeAttribute("srcset");
        image.removeAttribute("src");
        if (!image.hasAttribute("width")) image.setAttribute("width", natural[0]);
        if (!image.hasAttribute("height")) image.setAttribute("height", natural[1]);
      }
      const shown = placed.filter(([video]) => video.isConnected);
      const hidden = shown.map(([video]) => {
        const before = [video.style.getPropertyValue("display"), video.style.getPropertyPriority("display")];
        video.style.setProperty("display", "none", "important");
        return before;
      });
      shown.forEach(([video, image]) => video.before(image));
      const measured = shown.map(([, image]) => {
        const style = getComputedStyle(image);
        // The border box as laid out, exactly (a computed width is rounded when written out: 156.953125px
        // reads 156.953px, which lays out 1/64 px shorter, and every box below moves by that).
        const rect = image.getBoundingClientRect();
        if (image.getClientRects().length === 0 || rect.width === 0 || rect.height === 0) return null;
        return carried.map((name) => [name, style.getPropertyValue(name)]).concat([
          ["box-sizing", "border-box"], ["width", rect.width + "px"], ["height", rect.height + "px"]]);
      });
      shown.forEach(([video, image], index) => {
        image.remove();
        video.style.setProperty("display", hidden[index][0], hidden[index][1]);
        // Not laid out (a hidden tab, a closed <details>): nothing to copy; measured again on resize.
        if (measured[index] === null) return;
        for (const [name, value] of measured[index]) video.style.setProperty(name, value);
        // Its box is the image's final one: flex and grid are not to stretch or shrink it again.
        video.style.setProperty("flex", "none");
      });
    });
  }

  let measuring = false;
  function remeasure() {
    if (measuring) return;
    measuring = true;
    requestAnimationFrame(() => {
      measuring = false;
      measureAll();
    });
  }

  let resizing = false;
  function carryBox(video) {
    if (video[boxed]) return;
    let layout;
    try {
      layout = JSON.parse(video.getAttribute("data-gif2mp4-img"));
    } catch (error) {
      return;
    }
    if (!layout || typeof layout !== "object") return;
    video[boxed] = { layout, style: video.getAttribute("style") };
    // A GIF not known when rewritten has the poster: off while its WebM is the source.
    const poster = video.getAttribute("poster");
    if (poster && !video[posterWatched]) posterUnlessWebM(video, poster);
    if (!Array.isArray(layout.natural)) video.addEventListener("loadedmetadata", remeasure);
    remeasure();
    if (!resizing) {
      resizing = true;
      window.addEventListener("resize", remeasure);
    }
  }

  // <video data-gif2mp4-src="GIF"> (a rewritten GIF not converted yet): if its sources fail before it has
  // loaded anything (the service refused the GIF: too large, not an animation), an <img> of the GIF comes
  // back with the video's id, class, style, title, size and label (as alt), which the browser still shows.
  // A video that has loaded keeps playing through a later network error.
  // Likewise when it plays the MP4 (its WebM failed: the object has none) and the GIF's manifest
  // (data-gif2mp4-manifest) says the GIF has transparency, which the MP4 flattened.
  const restored = Symbol.for("gif2mp4.fallback");
  function fallBack(video) {
    if (video.readyState >= HTMLMediaElement.HAVE_METADATA) return;
    restore(video);
  }

  function restore(video) {
    if (!video.isConnected || !video.hasAttribute("data-gif2mp4-src")) return;
    const image = document.createElement("img");
    // `loading` before `src`: an image is fetched by the loading it has when its source is set.
    if (video.hasAttribute("data-gif2mp4-lazy")) image.setAttribute("loading", "lazy");
    for (const name of ["id", "class", "style", "title", "width", "height"]) {
      // A boxed video's style is the box copied onto it; the page's own is put back below (setting the copy
      // would be an inline style a strict Content-Security-Policy reports, for nothing).
      if (name === "style" && video[boxed]) continue;
      if (video.hasAttribute(name)) image.setAttribute(name, video.getAttribute(name));
    }
    // The image's own size, srcset and sizes, when the rewrite recorded them (the video's width and height may
    // be the GIF's, which the image did not say).
    const layout = video[boxed] ? video[boxed].layout : null;
    if (layout) {
      for (const name of ["width", "height", "srcset", "sizes"]) {
        if (typeof layout[name] === "string") image.setAttribute(name, layout[name]);
        else image.removeAttribute(name);
      }
    }
    // The page's own style, not the box copied to the video.
    if (video[boxed] && video[boxed].style !== null) image.setAttribute("style", video[boxed].style);
    if (video.hasAttribute("aria-label")) image.setAttribute("alt", video.getAttribute("aria-label"));
    image.setAttribute("src", video.getAttribute("data-gif2mp4-src"));
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
    const manifest = video.getAttribute("data-gif2mp4-manifest");
    if (manifest && window.fetch) {
      // The manifest also gives the GIF's own size, which the rewrite did not know: the video's may differ (an
      // MP4 padded to even sizes, a video scaled into the service's box), and an <img> without width and
      // height is laid out at the GIF's.
      const check = () => {
        const layout = video[boxed] ? video[boxed].layout : null;
        const sizeUnknown = Boolean(layout) && !Array.isArray(layout.natural);
        if (playsWebM(video) && !sizeUnknown) return;
        fetch(manifest).then((reply) => reply.ok ? reply.json() : null)
          .then((object) => {
            if (!object) return;
            if (!playsWebM(video) && object.hasTransparency === true) {
              restore(video);
              return;
            }
            const width = object.sourceWidth, height = object.sourceHeight;
            if (layout && !Array.isArray(layout.natural) && width > 0 && height > 0) {
              layout.natural = [width, height];
              remeasure();
            }
          })
          .catch(() => {});
      };
      // Loaded before this script listened (a deferred script, a video added later): checked at once.
      if (video.readyState >= HTMLMediaElement.HAVE_CURRENT_DATA) check();
      else video.addEventListener("loadeddata", check, { once: true });
    }
    // Its sources may have failed before this (deferred) script listened: after a task, an error, or still no
    // source and nothing loaded. The latter is also a video whose source selection has not begun (WebKit
    // reads "no source" before it, for a video below the fold), so it is loaded again, with the listeners
    // above in place: a failing source then fails again, where they hear it. (A lazy video loads when it
    // comes near the viewport, with them in place already.)
    setTimeout(() => {
      if (video.error) fallBack(video);
      else if (video.networkState === HTMLMediaElement.NETWORK_NO_SOURCE && video.readyState === 0
          && !video.currentSrc && !video.hasAttribute("data-gif2mp4-lazy")) video.load();
    }, 0);
  }

  function scan(root) {
    // The box first: a guarded video that has loaded already reads its layout at once.
    if (root.matches && root.matches("video[data-gif2mp4-img]")) carryBox(root);
    if (root.querySelectorAll) root.querySelectorAll("video[data-gif2mp4-img]").forEach(carryBox);
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
    attributeFilter: ["data-play-count", "data-gif2mp4-lazy", "data-gif2mp4-src", "data-gif2mp4-img"] });
})();
