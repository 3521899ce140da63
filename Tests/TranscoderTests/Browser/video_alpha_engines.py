#!/usr/bin/python3
"""A WebM with alpha as Firefox ESR or WebKitGTK shows it on a page: what is under the video, and where.

Usage: /usr/bin/python3 video_alpha_engines.py --engine firefox|webkitgtk --page-colour RRGGBB --out PATH FILE.webm

Serves FILE (video/webm, with byte ranges, as media elements ask for it) and a page from its own HTTP server on
127.0.0.1. The page's body is the colour RRGGBB; a `<video muted playsinline preload=auto>` of FILE sits at
(20, 20) CSS pixels at its natural size, device scale 1. The script waits until the video has its first frame
(`readyState` HAVE_CURRENT_DATA or more, paused at 0: nothing plays or seeks it), lets the page settle, and takes
screenshots of the viewport until two in a row show the video's box alike (WebKitGTK paints a video's frame some
time after it has it). The video's box from the last of them goes to PATH: raw RGB, `width * height * 3` bytes,
rows top to bottom: the video as the page shows it, composited over the body.

The engines, started as `Tests/TranscodeServerTests/Browser/page_fidelity.py` starts them (imported from there):

- firefox: headless Firefox ESR through Marionette (Debian firefox-esr; PyPI marionette-driver);
- webkitgtk: WebKitGTK's MiniBrowser (`--automation`) through WebKitWebDriver under its own Xvfb (Debian
  webkit2gtk-driver, xvfb; python3-selenium).

Prints one JSON line {"ok", "engine", "version", "width", "height" (the video's box, CSS pixels), "duration"
(`video.duration`, seconds), "videoWidth", "videoHeight", "box" ([x, y, width, height]), "readyState",
"currentTime", "paused", "screenshots" (how many were taken), "ring" (the share of the pixels in a 4-pixel ring
just outside the video's box that are the page colour, within 2 levels), "error"}. Every wait is bounded. Exit
status: 0 ok; 1 the browser failed or the video did not show (`error` says why; nothing written to PATH); 2 the
browser, its driver or a Python module is missing, or bad arguments.
"""

import argparse
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "TranscodeServerTests", "Browser"))
# page_fidelity puts this directory on the path too, for chromium_oracle.
import page_fidelity  # noqa: E402
from chromium_oracle import Server, report  # noqa: E402

# The video's first frame: metadata, then data for the current position. WebKitGTK (GStreamer) can take a few
# seconds on a busy machine.
LOAD_SECONDS = 30
# After the first frame is there: how long to let the page paint before each screenshot, and how many
# screenshots to take at most until two in a row agree.
SETTLE_SECONDS = {"firefox": 0.3, "webkitgtk": 1.0}
MAX_SCREENSHOTS = 8
# The video's place on the page (CSS pixels) and the viewport's size.
LEFT, TOP = 20, 20
VIEWPORT = (1000, 800)
RING = 4

PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
html, body {{ margin: 0; padding: 0; background: #{colour} }}
video {{ position: absolute; left: {left}px; top: {top}px; margin: 0; padding: 0; border: 0 }}
</style></head><body><video muted playsinline preload="auto" src="/input/video.webm"></video></body></html>"""

WAIT_FOR_FIRST_FRAME = """
const [seconds, done] = [arguments[0], arguments[arguments.length - 1]];
const video = document.querySelector("video");
const deadline = performance.now() + seconds * 1000;
const state = (why) => {
  const box = video.getBoundingClientRect();
  done({why, readyState: video.readyState, currentTime: video.currentTime, paused: video.paused,
        duration: video.duration, videoWidth: video.videoWidth, videoHeight: video.videoHeight,
        box: [box.left, box.top, box.width, box.height], dpr: devicePixelRatio,
        error: video.error ? "MediaError " + video.error.code + ": " + video.error.message : null});
};
const poll = () => {
  if (video.error) {
    state("error");
  } else if (video.readyState >= 2 && video.videoWidth > 0) {
    // Two animation frames: laid out at the natural size and painted.
    requestAnimationFrame(() => requestAnimationFrame(() => state("first frame")));
  } else if (performance.now() > deadline) {
    state("timeout");
  } else {
    setTimeout(poll, 50);
  }
};
poll();
"""

READ_STATE = """
const video = document.querySelector("video");
const box = video.getBoundingClientRect();
return {readyState: video.readyState, currentTime: video.currentTime, paused: video.paused,
        box: [box.left, box.top, box.width, box.height]};
"""


def viewport_png(engine):
    if isinstance(engine, page_fidelity.Firefox):
        return engine.client.screenshot(format="binary", full=False)
    return engine.driver.get_screenshot_as_png()


def crop(rows, x, y, width, height):
    return b"".join(bytes(rows[y + row][3 * x:3 * (x + width)]) for row in range(height))


def ring_share(rows, image_width, image_height, box, colour):
    """The share of the pixels in a RING-pixel band around `box` that are `colour` within 2 levels."""
    x, y, width, height = box
    matching = total = 0
    for row in range(max(0, y - RING), min(image_height, y + height + RING)):
        for column in range(max(0, x - RING), min(image_width, x + width + RING)):
            if x <= column < x + width and y <= row < y + height:
                continue
            pixel = rows[row][3 * column:3 * column + 3]
            total += 1
            matching += all(abs(pixel[c] - colour[c]) <= 2 for c in range(3))
    return matching / total if total else 0.0


def show(engine, name, colour_hex, video_path, out_path):
    colour = bytes.fromhex(colour_hex)
    with Server() as server:
        server.pages["/page.html"] = PAGE.format(colour=colour_hex, left=LEFT, top=TOP)
        server.inputs["video.webm"] = video_path
        engine.start("light")
        result = {"engine": name, "version": None}
        if isinstance(engine, page_fidelity.Firefox):
            result["version"] = engine.client.session_capabilities.get("browserVersion")
        else:
            result["version"] = engine.driver.capabilities.get("browserVersion")
        engine.open(server.origin + "/page.html", VIEWPORT[0], "light")
        state = engine.async_script(WAIT_FOR_FIRST_FRAME, LOAD_SECONDS)
        result.update({key: state[key] for key in (
            "readyState", "currentTime", "paused", "duration", "videoWidth", "videoHeight", "box")})
        if state["why"] != "first frame":
            result["error"] = "the video did not show its first frame: %s (%s)" % (state["why"], state["error"])
            return result, 1
        if state["dpr"] != 1:
            result["error"] = "device pixel ratio %s, not 1" % state["dpr"]
            return result, 1
        x, y, width, height = [int(round(value)) for value in state["box"]]
        result.update(width=width, height=height)
        if (x, y, width, height) != (LEFT, TOP, state["videoWidth"], state["videoHeight"]):
            result["error"] = "the video's box is %s, not its natural size at (%d, %d)" % (state["box"], LEFT, TOP)
            return result, 1
        previous, shots = None, 0
        while shots < MAX_SCREENSHOTS:
            time.sleep(SETTLE_SECONDS[name])
            image_width, image_height, rows = page_fidelity.decode_png(viewport_png(engine))
            shots += 1
            if x + width + RING > image_width or y + height + RING > image_height:
                result["error"] = "the video's box %s is not inside the %dx%d screenshot" % (
                    state["box"], image_width, image_height)
                return result, 1
            picture = crop(rows, x, y, width, height)
            if picture == previous:
                break
            previous = picture
        result["screenshots"] = shots
        if picture != previous:
            result["error"] = "the video's box still changed after %d screenshots" % shots
            return result, 1
        result["ring"] = ring_share(rows, image_width, image_height, (x, y, width, height), colour)
        after = engine.script(READ_STATE)
        result.update(readyState=after["readyState"], currentTime=after["currentTime"], paused=after["paused"])
        if after["currentTime"] != 0 or not after["paused"]:
            result["error"] = "the video moved off its first frame: %s" % after
            return result, 1
        with open(out_path, "wb") as file:
            file.write(picture)
        result["error"] = None
        return result, 0


def main():
    # As page_fidelity.py: the browsers, their drivers and Xvfb get a clean signal state.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("firefox", "webkitgtk"), required=True)
    parser.add_argument("--page-colour", required=True, help="the body's colour, RRGGBB")
    parser.add_argument("--out", required=True, help="where the video's pixels go (raw RGB)")
    parser.add_argument("video")
    args = parser.parse_args()
    colour = args.page_colour.lower().lstrip("#")
    if len(colour) != 6 or any(c not in "0123456789abcdef" for c in colour):
        report({"ok": False, "error": "--page-colour must be RRGGBB, not %r" % args.page_colour}, 2)
    if not os.path.isfile(args.video):
        report({"ok": False, "error": "no such file: %s" % args.video}, 2)
    missing = page_fidelity.MISSING[args.engine]()
    if missing:
        report({"ok": False, "error": "missing %s; install with: %s" % (
            ", ".join(missing), page_fidelity.INSTALL[args.engine])}, 2)
    engine = page_fidelity.ENGINES[args.engine]()
    try:
        result, code = show(engine, args.engine, colour, os.path.abspath(args.video), args.out)
    except Exception as error:  # noqa: BLE001 - reported as JSON
        result, code = {"engine": args.engine, "error": "%s: %s" % (type(error).__name__, error),
                        "trace": traceback.format_exc()}, 1
    finally:
        engine.quit()
    result["ok"] = code == 0
    report(result, code)


if __name__ == "__main__":
    main()
