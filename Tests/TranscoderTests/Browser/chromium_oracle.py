#!/usr/bin/python3
"""Headless Chromium as a test oracle: how the browser decodes animated images and plays MP4s.

Usage:
  /usr/bin/python3 chromium_oracle.py frames --background RRGGBB --out DIR FILE...
  /usr/bin/python3 chromium_oracle.py video [--rate R] [--metadata-only] [--probes P.json] [--pixels DIR] --out JSON_FILE FILE...
  /usr/bin/python3 chromium_oracle.py snippet --app URL --html SNIPPET [--timeout S]
  /usr/bin/python3 chromium_oracle.py elements --app URL --html SNIPPET --until JS [--timeout S]

frames   Decodes each GIF / APNG / WebP with WebCodecs ImageDecoder (composited frames, as the browser
         shows them), flattens every frame on the opaque background colour and writes DIR/<name>.rgba (the
         frames in order, tightly packed, width * height * 4 bytes each) and DIR/<name>.json
         ({"width", "height", "frameCount", "repetitionCount" (null = Infinity), "durationsMs", "error"}).
         A file the decoder rejects still gets its .json, with the frames that did decode and "error" set
         (width and height are null when no frame decoded, frameCount when not even the track did; a still
         PNG or WebP has a null duration). Prints one JSON summary line.
video    Plays each MP4 or WebM once from the start at playbackRate R (default 0.25, slow enough that every frame
         is presented) and writes a JSON list of {"file", "duration", "mediaTimes" (every presented
         frame's requestVideoFrameCallback mediaTime, in order), "endedCurrentTime", "error"}.
         --metadata-only stops at loadedmetadata: only "duration" (mediaTimes empty, endedCurrentTime null).
         --probes P.json ({FILE.mp4: [seconds, ...]}): after the play, seeks (paused) to each time and adds
         "probes": [{"time", "mediaTime"}], the mediaTime of the frame presented there; exact under load,
         where playback may drop frames. --pixels DIR: at each probe, also the picture presented, drawn over
         black and over white on a canvas of the video's size, written to DIR/<name>.probe<i>.black.rgba and
         .white.rgba (RGBA, tightly packed): how a page shows a video with alpha over what is behind it.
snippet  Serves a page from another origin than URL, with the Content-Security-Policy docs/embedding.md
         asks of a page (scripts, media, images and `/player.js`'s requests from URL; images also from `data:`), whose body is SNIPPET (a <video> and maybe a <script src> from URL);
         counts how many times the first <video> plays, waits until it has ended and stayed ended for 1 s
         (or S seconds, default 60) and prints one JSON line ({"ok", "plays", "ended", "paused",
         "currentTime", "duration", "loopAttribute", "lastMediaTime", "currentSrc", "cspViolations", "console"}, and
         "error" when not ok). ok: it ended, without a media error or a CSP violation. The CSP source and
         the <base> are "URL/" (a source ending in "/" allows every path below it).
elements The snippet on the same page until the JavaScript expression JS is true (or S seconds, default 30):
         prints {"ok", "until" (whether JS became true), "elements" (each <img> and <video> of the body: its
         "tag", "currentSrc", "attributes" and "rect", [x, y, width, height] in CSS pixels), "cspViolations"}.
         With --resize W,W,...: the window then resized to each width (and "cspViolationsBeforeResize", a count);
         with --no-data-images: the page's CSP without `img-src data:`.

The script serves its pages and files from its own HTTP server on 127.0.0.1 and Chromium is kept off every
other host. Every wait is bounded. Exit status: 0 ok; 1 a check failed (frames and video: the browser
crashed on a file or an input could not be read; a decoder error on corrupt input or a video that does not
play is not a failure but that file's "error"; snippet: "ok" is false); 2 Chromium, chromedriver or
Selenium is missing, or bad arguments (Debian: chromium chromium-driver python3-selenium).
"""

import argparse
import http.server
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
import urllib.parse

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PACKAGES = "apt-get install -y chromium chromium-driver python3-selenium"

# frames: a file whose decoding makes no progress (no frame arrives) for this long is given up on, so a
# decoder stall on a hostile file costs bounded time; no real frame takes anywhere near this long.
STALL_SECONDS = 30
# video: how long loading may take before the duration (and so the playback bound) is known.
METADATA_SECONDS = 15
# One WebDriver call waits at most this long in the page, so Python regains control regularly.
WAIT_SLICE_SECONDS = 1.0
SCRIPT_TIMEOUT_SECONDS = WAIT_SLICE_SECONDS + 10
# Past chromedriver's own timeouts, how long Python waits for any answer from it: chromedriver itself can
# wait forever on a renderer stuck in a page script (seen with get_log), so every command needs a bound.
COMMAND_MARGIN_SECONDS = 15

SIGNATURES = (
    (lambda head: head.startswith(b"GIF8"), "image/gif"),
    (lambda head: head.startswith(b"\x89PNG\r\n\x1a\n"), "image/png"),
    (lambda head: head[:4] == b"RIFF" and head[8:12] == b"WEBP", "image/webp"),
    # An ISO BMFF file type box whose major brand is an AVIF image sequence or still.
    (lambda head: head[4:8] == b"ftyp" and head[8:12] in (b"avis", b"avif"), "image/avif"),
)

# Installed before any page script runs (DevTools scripts are exempt from the page's CSP), so a blocked
# script or media load is reported instead of silently breaking the page.
RECORD_CSP_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(event.violatedDirective + " " + event.blockedURI);
});
"""

# Also installed before any page script: the snippet's own script may create, start or restart the video
# at any moment, so the watcher attaches as soon as the first <video> is in the document.
# A play ends when `ended` fires, or when the presented frame's mediaTime goes backwards (the loop
# attribute or a script seeking back wraps without `ended`). A script that restarts the video after `ended`
# also makes mediaTime go backwards; that play was already counted at `ended`, so the first wrap after an
# `ended` is not counted. (The flag is cleared by that wrap, not by a later frame: the last frame's callback
# may be delivered after `ended`.)
WATCH_FIRST_VIDEO = """
(() => {
  const watch = window.__videoWatch = {plays: 0, lastMediaTime: null, mediaError: null};
  let countedAtEnded = false;
  const attach = (video) => {
    window.__watchedVideo = video;
    const onFrame = (now, metadata) => {
      if (watch.lastMediaTime !== null && metadata.mediaTime < watch.lastMediaTime) {
        if (!countedAtEnded) watch.plays += 1;
        countedAtEnded = false;
      }
      watch.lastMediaTime = metadata.mediaTime;
      video.requestVideoFrameCallback(onFrame);
    };
    video.requestVideoFrameCallback(onFrame);
    video.addEventListener("ended", () => { watch.plays += 1; countedAtEnded = true; });
    video.addEventListener("error", () => {
      watch.mediaError = video.error ? video.error.code + " " + video.error.message : "error event";
    });
  };
  const observer = new MutationObserver(() => {
    const video = document.querySelector("video");
    if (video) { observer.disconnect(); attach(video); }
  });
  observer.observe(document, {childList: true, subtree: true});
})();
"""

FRAMES_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>frames</title></head><body>
<script>
"use strict";
// One job (file) at a time. Frames go to the server one by one as soon as they are drawn, at most one
// upload in flight, so memory stays at about two frames whatever the file; the server keeps durations.
const canvas = document.createElement("canvas");
const context = canvas.getContext("2d", {willReadFrequently: true});
let job = {done: true, result: null, waiters: []};

function finish(error) {
  job.done = true;
  job.result = {error: error};
  for (const waiter of job.waiters) waiter(job.result);
  job.waiters = [];
}

async function post(url, body) {
  const response = await fetch(url, {method: "POST", body: body});
  if (!response.ok) throw new Error("upload refused: " + response.status + " " + await response.text());
}

async function decodeFile(key, mime, background) {
  let decoder = null;
  let pending = Promise.resolve();
  let uploadError = null;
  try {
    const response = await fetch("/input/" + key);
    if (!response.ok) throw new Error("fetching the input: HTTP " + response.status);
    const data = await response.arrayBuffer();
    decoder = new ImageDecoder({data: data, type: mime});
    await decoder.tracks.ready;
    await decoder.completed;
    const track = decoder.tracks.selectedTrack;
    if (!track) throw new Error("no image track");
    const repetitionCount = Number.isFinite(track.repetitionCount) ? track.repetitionCount : null;
    await post("/meta?key=" + key, JSON.stringify({frameCount: track.frameCount, repetitionCount}));
    for (let index = 0; index < track.frameCount; index++) {
      const frame = (await decoder.decode({frameIndex: index, completeFramesOnly: true})).image;
      let width, height, duration;
      try {
        width = frame.displayWidth;
        height = frame.displayHeight;
        duration = frame.duration;
        if (canvas.width !== width || canvas.height !== height) {
          canvas.width = width;
          canvas.height = height;
        }
        context.fillStyle = background;
        context.fillRect(0, 0, width, height);
        context.drawImage(frame, 0, 0, width, height);
      } finally {
        frame.close();
      }
      const pixels = context.getImageData(0, 0, width, height).data;
      // Uploads stay in order: the next one starts only when the previous one has been stored.
      await pending;
      if (uploadError) throw uploadError;
      const url = "/frame?key=" + key + "&index=" + index + "&width=" + width + "&height=" + height +
        "&durationUs=" + (duration === null ? "" : duration);
      pending = post(url, pixels).catch((error) => { uploadError = error; });
    }
    await pending;
    if (uploadError) throw uploadError;
    finish(null);
  } catch (error) {
    await pending;  // frames already drawn still count
    finish(String(error && error.name ? error.name + ": " + error.message : error));
  } finally {
    if (decoder) decoder.close();
  }
}

window.startJob = (key, mime, background) => {
  job = {done: false, result: null, waiters: []};
  decodeFile(key, mime, background);
};

// Resolves with the job's result, or with null after `ms` if it is still running.
window.waitJob = (ms) => new Promise((resolve) => {
  if (job.done) return resolve(job.result);
  const timer = setTimeout(() => resolve(null), ms);
  job.waiters.push((result) => { clearTimeout(timer); resolve(result); });
});
</script>
</body></html>
"""

VIDEO_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>video</title></head><body>
<video muted playsinline preload="auto" style="width: 320px"></video>
<script>
"use strict";
const parameters = new URLSearchParams(location.search);
const rate = Number(parameters.get("rate"));
const video = document.querySelector("video");
const probeTimes = (parameters.get("probes") || "").split(",").filter((t) => t !== "").map(Number);
const state = window.__state = {loaded: false, duration: null, mediaTimes: [], endedCurrentTime: null,
                                probes: [], error: null, done: false};
let playing = true;
let lastMediaTime = null;
// Registered before the source is set, so the very first presented frame is seen too.
const onFrame = (now, metadata) => {
  lastMediaTime = metadata.mediaTime;
  const times = state.mediaTimes;
  if (playing && (times.length === 0 || times[times.length - 1] !== metadata.mediaTime)) {
    times.push(metadata.mediaTime);
  }
  if (!state.done) video.requestVideoFrameCallback(onFrame);
};
// After the play: seek (paused) to each probe time and record the mediaTime of the frame then presented.
// Exact whatever the machine's load, where playback may drop a frame. A seek that lands on the frame
// already shown presents nothing new; after 500 ms the frame on screen is taken as the answer.
// Run once, paused: under load a short clip's play() can settle after `ended`, so a seek back to 0 played
// it again and a second `ended` ran the probes twice (4 answers for 2 probes).
let probesStarted = false;
async function runProbes() {
  playing = false;
  video.pause();
  for (const time of probeTimes) {
    const presented = new Promise((resolve) => {
      const timer = setTimeout(resolve, 500);
      video.requestVideoFrameCallback(() => { clearTimeout(timer); resolve(); });
    });
    const seeked = new Promise((resolve) => video.addEventListener("seeked", resolve, {once: true}));
    video.currentTime = time;
    await seeked;
    await presented;
    if (capture) await captureProbe(state.probes.length).catch((error) => fail("capturing: " + error));
    state.probes.push({time, mediaTime: lastMediaTime});
  }
}
// --pixels: the picture presented, over black and over white, sent to the server.
const capture = parameters.get("pixels") === "1";
const canvas = document.createElement("canvas");
const context = canvas.getContext("2d", {willReadFrequently: true});
async function captureProbe(index) {
  const width = video.videoWidth, height = video.videoHeight;
  canvas.width = width;
  canvas.height = height;
  for (const [name, colour] of [["black", "#000000"], ["white", "#ffffff"]]) {
    context.fillStyle = colour;
    context.fillRect(0, 0, width, height);
    context.drawImage(video, 0, 0, width, height);
    const pixels = context.getImageData(0, 0, width, height).data;
    const query = "key=" + parameters.get("key") + "&index=" + index + "&background=" + name + "&width=" + width +
      "&height=" + height;
    const response = await fetch("/probe?" + query, {method: "POST", body: pixels});
    if (!response.ok) throw new Error("probe upload refused: " + response.status);
  }
}
video.requestVideoFrameCallback(onFrame);
const fail = (message) => { state.error = message; state.done = true; };
video.addEventListener("loadedmetadata", () => {
  state.loaded = true;
  state.duration = Number.isFinite(video.duration) ? video.duration : null;
  // A short video can end before play() settles, which rejects it with AbortError: not a failure.
  video.play().catch((error) => { if (!(error.name === "AbortError" && video.ended)) fail("play(): " + error); });
});
video.addEventListener("ended", () => {
  if (probesStarted) return;
  probesStarted = true;
  state.endedCurrentTime = video.currentTime;
  // The last frame's callback may be delivered just after `ended`.
  setTimeout(async () => {
    await runProbes();
    state.done = true;
  }, 500);
});
video.addEventListener("error", () => {
  fail(video.error ? "media error " + video.error.code + ": " + video.error.message : "media error");
});
// Loading resets playbackRate to defaultPlaybackRate, so both are set.
video.defaultPlaybackRate = rate;
video.playbackRate = rate;
video.src = parameters.get("src");
</script>
</body></html>
"""

SNIPPET_PAGE = """<!doctype html><html><head><meta http-equiv="Content-Security-Policy" content="default-src 'none'; \
script-src {source}; media-src {source}; img-src {source} data:; connect-src {source}"><base href="{base}"></head>\
<body>{snippet}</body></html>"""


class CheckFailed(Exception):
    pass


class Stalled(Exception):
    """The page made no progress on a file for STALL_SECONDS."""


def report(result, code):
    print(json.dumps(result), flush=True)
    sys.exit(code)


def mime_type(path):
    """The ImageDecoder type from the file's signature (its name may lie), or None."""
    with open(path, "rb") as file:
        head = file.read(12)
    for matches, mime in SIGNATURES:
        if matches(head):
            return mime
    return None


class FramesSink:
    """Where the frames of the file being decoded go; the server stores them as they arrive.

    The server, not the page, is the record of what was stored: if the page stalls or crashes the .json
    still describes exactly the frames in the .rgba.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.key = None

    def begin(self, key, rgba_path):
        with self.lock:
            self.key = key
            self.file = open(rgba_path, "wb")
            self.width = self.height = self.frame_count = self.repetition_count = None
            self.durations = []

    def end(self):
        with self.lock:
            self.key = None
            self.file.close()
            return {"width": self.width, "height": self.height, "frameCount": self.frame_count,
                    "repetitionCount": self.repetition_count, "durationsMs": list(self.durations)}

    def progress(self):
        with self.lock:
            return len(self.durations)

    def meta(self, key, body):
        with self.lock:
            if key != self.key:
                return "not the file being decoded"
            values = json.loads(body)
            self.frame_count = values["frameCount"]
            self.repetition_count = values["repetitionCount"]
            return None

    def frame(self, key, query, length, rfile):
        """Appends one frame; refuses anything that would break the tightly packed layout."""
        with self.lock:
            index, width, height = int(query["index"]), int(query["width"]), int(query["height"])
            if key != self.key:
                return "not the file being decoded"
            if index != len(self.durations):
                return "frame %d arrived, expected %d" % (index, len(self.durations))
            if self.width is not None and (width, height) != (self.width, self.height):
                return "frame %d is %dx%d, the first was %dx%d" % (index, width, height, self.width, self.height)
            if length != width * height * 4:
                return "frame %d has %d bytes for %dx%d" % (index, length, width, height)
            start, remaining = self.file.tell(), length
            while remaining > 0:
                chunk = rfile.read(min(remaining, 1 << 20))
                if not chunk:  # a part of a frame would shift every later one: take it back out
                    self.file.seek(start)
                    self.file.truncate()
                    return "frame %d: the upload ended early" % index
                self.file.write(chunk)
                remaining -= len(chunk)
            self.width, self.height = width, height
            duration = query.get("durationUs", "")
            self.durations.append(float(duration) / 1000 if duration else None)
            return None


class Server:
    """127.0.0.1, port 0: the pages, the input files (with byte ranges, as media elements ask for them) and
    the frame uploads."""

    def __init__(self):
        self.pages = {}  # path -> HTML
        self.inputs = {}  # key -> file path
        self.sink = FramesSink()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: one connection carries all uploads
            # Socket timeout: an upload that stops halfway must not hold the sink's lock (and so the stall
            # watchdog, which reads the progress under it) for ever.
            timeout = STALL_SECONDS

            def log_message(self, format, *args):
                pass

            def send(self, status, body=b"", content_type="text/plain; charset=utf-8", headers=()):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path in server.pages:
                    self.send(200, server.pages[url.path].encode(), "text/html; charset=utf-8")
                elif url.path.startswith("/input/") and url.path[len("/input/"):] in server.inputs:
                    self.send_input(server.inputs[url.path[len("/input/"):]])
                else:
                    self.send(404 if url.path != "/favicon.ico" else 204)

            def send_input(self, path):
                try:
                    size = os.path.getsize(path)
                except OSError as error:
                    self.send(404, str(error).encode())
                    return
                content_type = {".mp4": "video/mp4", ".webm": "video/webm"}.get(
                    os.path.splitext(path.lower())[1], "application/octet-stream")
                headers = [("Accept-Ranges", "bytes")]
                first, last, status = 0, size - 1, 200
                match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "").strip())
                if match and (match.group(1) or match.group(2)):
                    if match.group(1):
                        first = int(match.group(1))
                        last = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
                    else:  # suffix range: the last n bytes
                        first = max(0, size - int(match.group(2)))
                    if first > last:
                        self.send(416, headers=[("Content-Range", "bytes */%d" % size)])
                        return
                    status = 206
                    headers.append(("Content-Range", "bytes %d-%d/%d" % (first, last, size)))
                with open(path, "rb") as file:
                    file.seek(first)
                    self.send(status, file.read(last + 1 - first), content_type, headers)

            def do_POST(self):
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    if url.path == "/probe":
                        problem = server.save_probe(query, length, self.rfile)
                    elif url.path == "/frame":
                        problem = server.sink.frame(query.get("key"), query, length, self.rfile)
                    elif url.path == "/meta":
                        problem = server.sink.meta(query.get("key"), self.rfile.read(length))
                    else:
                        problem = "no such endpoint"
                except (ValueError, KeyError, OSError) as error:
                    problem = "%s: %s" % (type(error).__name__, error)
                if problem:
                    # The body may be unread: this connection cannot carry another request.
                    self.close_connection = True
                    self.send(400, problem.encode())
                else:
                    self.send(200)

        self.probe_dir = None  # video --pixels: where the probes' pictures go
        self.probe_names = {}  # key -> the file's base name

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.origin = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="oracle-http", daemon=True)

    def save_probe(self, query, length, rfile):
        """Writes one probe's picture over one background (video --pixels)."""
        key, index, background = query.get("key"), int(query["index"]), query.get("background")
        width, height = int(query["width"]), int(query["height"])
        if self.probe_dir is None or key not in self.probe_names or background not in ("black", "white"):
            return "no such probe"
        if length != width * height * 4:
            return "probe %d has %d bytes for %dx%d" % (index, length, width, height)
        path = os.path.join(self.probe_dir, "%s.probe%d.%s.rgba" % (self.probe_names[key], index, background))
        with open(path, "wb") as file:
            file.write(rfile.read(length))
        return None

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class Browser:
    """Headless Chromium through chromedriver, restartable after a crash."""

    def __init__(self, page=None, record_csp=False, instrument=None, page_load_timeout=30, preferences=None):
        self.page = page  # opened on every (re)start
        self.page_load_timeout = page_load_timeout
        # Chromium's profile preferences (`{"settings": {"a11y": {"animation_policy": "none"}}}` holds animated
        # images on their first frame).
        self.preferences = preferences
        self.scripts = ([RECORD_CSP_VIOLATIONS] if record_csp else []) + ([instrument] if instrument else [])
        self.driver = None

    @staticmethod
    def missing_tools():
        missing = [path for path in (CHROMIUM, CHROMEDRIVER) if shutil.which(path) is None]
        try:
            import selenium  # noqa: F401
        except ImportError as error:
            missing.append("selenium (%s)" % error)
        return missing

    def start(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.remote.remote_connection import RemoteConnection

        # Class-wide in Selenium 4.8; there is only ever one browser at a time here.
        RemoteConnection.set_timeout(max(self.page_load_timeout, SCRIPT_TIMEOUT_SECONDS) + COMMAND_MARGIN_SECONDS)

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--autoplay-policy=no-user-gesture-required",
            "--disable-dev-shm-usage",
            "--window-size=1200,900",
            # Only 127.0.0.1 (an address, never resolved) is reachable: no background traffic, and any host
            # name a page or Chromium itself asks for fails to resolve.
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-sync",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            # A page in the background (headless has no focus) must not have its timers and frames throttled.
            "--disable-background-timer-throttling",
            "--disable-renderer-backgrounding",
            "--disable-backgrounding-occluded-windows",
        ):
            options.add_argument(argument)
        if self.preferences:
            options.add_experimental_option("prefs", self.preferences)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_page_load_timeout(self.page_load_timeout)
        self.driver.set_script_timeout(SCRIPT_TIMEOUT_SECONDS)
        for source in self.scripts:
            self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": source})
        if self.page:
            self.driver.get(self.page)
        return self.driver

    def restart(self):
        self.quit()
        return self.start()

    def quit(self):
        """Ends chromedriver and every Chromium process it started, even when they no longer answer."""
        if self.driver is not None:
            started = descendants(self.driver.service.process.pid)
            try:
                self.driver.quit()
            except Exception:  # noqa: BLE001 - the browser may already be gone
                pass
            self.driver = None
            # A Chromium whose chromedriver gave up on it may outlive it. Same id and same start time: still
            # the process we started, not a new one that was given a freed id.
            for pid, start_time in started.items():
                if process_start_time(pid) == start_time:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:  # gone in the meantime
                        pass


def process_stat(pid):
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        with open("/proc/%s/stat" % pid) as file:
            return file.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start_time(pid):
    fields = process_stat(pid)
    return fields[19] if fields and fields[0] != "Z" else None


def descendants(pid):
    """{id: start time} of every live process below pid (from /proc: Linux only, like the Debian packages)."""
    children = {}
    for entry in os.listdir("/proc"):
        fields = process_stat(entry) if entry.isdigit() else None
        if fields and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append((int(entry), fields[19]))
    found, pending = {}, [pid]
    while pending:
        for child, start_time in children.get(pending.pop(), []):
            found[child] = start_time
            pending.append(child)
    return found


def describe(error):
    text = "%s: %s" % (type(error).__name__, error)
    return text.split("\n  (Session info")[0].split("\nStacktrace:")[0].strip()


def run_frames(arguments):
    """One browser session for every file; a crashed or stalled page is replaced and the next file goes on."""
    background = "#" + arguments.background.lower()
    os.makedirs(arguments.out, exist_ok=True)
    names = [os.path.basename(path) for path in arguments.files]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        report({"ok": False, "error": "two inputs would write the same outputs: %s" % duplicates}, 2)

    started = time.monotonic()
    summary = {"ok": True, "files": 0, "filesWithError": 0, "errors": {}, "failures": {}}
    with Server() as server:
        server.pages["/frames.html"] = FRAMES_PAGE
        browser = Browser(page=server.origin + "/frames.html")
        try:
            try:
                browser.start()
            except Exception as error:  # noqa: BLE001 - reported as JSON like every other failure
                report({"ok": False, "error": "Chromium did not start: " + describe(error)}, 1)
            for key, path in enumerate(arguments.files):
                name = os.path.basename(path)
                server.inputs[str(key)] = path
                server.sink.begin(str(key), os.path.join(arguments.out, name + ".rgba"))
                try:
                    error, failure = frames_of_one_file(browser, server.sink, str(key), path, background)
                finally:
                    result = server.sink.end()
                    del server.inputs[str(key)]
                result["error"] = error
                with open(os.path.join(arguments.out, name + ".json"), "w") as file:
                    json.dump(result, file)
                    file.write("\n")
                summary["files"] += 1
                if error:
                    summary["filesWithError"] += 1
                    summary["errors"][name] = error
                if failure:
                    summary["ok"] = False
                    summary["failures"][name] = failure
        finally:
            browser.quit()
    summary["seconds"] = round(time.monotonic() - started, 2)
    report(summary, 0 if summary["ok"] else 1)


def frames_of_one_file(browser, sink, key, path, background):
    """Returns (the error for the file's .json, or None; the same when it is the tool's fault, not the file's).

    After a crash or a stall the browser is restarted before returning, so nothing from the old page can
    reach the server once the sink has moved on.
    """
    try:
        mime = mime_type(path)
    except OSError as error:
        message = "cannot read the input: %s" % error
        return message, message
    if mime is None:
        return "unrecognised file signature (not GIF, PNG, WebP or AVIF)", None
    try:
        return decode_in_page(browser.driver, sink, key, mime, background), None
    except Stalled as stall:  # the decoder's behaviour on this file: recorded, the page is replaced
        error, failure = str(stall), None
    except Exception as problem:  # noqa: BLE001 - a crashed page or browser: go on with a fresh one
        error = failure = "the browser failed: " + describe(problem)
    try:
        browser.restart()
    except Exception as problem:  # noqa: BLE001
        report({"ok": False, "error": "Chromium did not restart: " + describe(problem)}, 1)
    return error, failure


def decode_in_page(driver, sink, key, mime, background):
    """Runs one file's job in the page; returns the decoder's error message or None."""
    driver.execute_script("window.startJob(arguments[0], arguments[1], arguments[2]);", key, mime, background)
    last_progress, last_change = -1, time.monotonic()
    while True:
        result = driver.execute_async_script(
            "window.waitJob(arguments[0]).then(arguments[1]);", int(WAIT_SLICE_SECONDS * 1000))
        if result is not None:
            return result["error"]
        progress = sink.progress()
        if progress != last_progress:
            last_progress, last_change = progress, time.monotonic()
        elif time.monotonic() - last_change > STALL_SECONDS:
            raise Stalled("stalled: no frame for %d s after %d frames" % (STALL_SECONDS, progress))


def run_video(arguments):
    if not arguments.rate > 0:
        report({"ok": False, "error": "--rate must be positive"}, 2)
    probes = {}
    if arguments.probes:
        with open(arguments.probes) as file:
            probes = json.load(file)
    results, failures = [], []
    with Server() as server:
        server.pages["/video.html"] = VIDEO_PAGE
        if arguments.pixels:
            os.makedirs(arguments.pixels, exist_ok=True)
            server.probe_dir = arguments.pixels
        browser = Browser()
        try:
            try:
                browser.start()
            except Exception as error:  # noqa: BLE001
                report({"ok": False, "error": "Chromium did not start: " + describe(error)}, 1)
            for key, path in enumerate(arguments.files):
                server.inputs[str(key)] = path
                server.probe_names[str(key)] = os.path.basename(path)
                result = {"file": path, "duration": None, "mediaTimes": [], "endedCurrentTime": None, "probes": [],
                          "error": None}
                if not os.path.isfile(path) or not os.access(path, os.R_OK):
                    result["error"] = "cannot read the input"
                    failures.append(path)
                    results.append(result)
                    continue
                try:
                    play_once(browser.driver, server.origin, str(key), arguments.rate, arguments.metadata_only,
                              probes.get(path, []), result, bool(arguments.pixels))
                except CheckFailed as error:
                    result["error"] = str(error)
                except Exception as error:  # noqa: BLE001 - a crashed page: go on with a fresh browser
                    result["error"] = "the browser failed: " + describe(error)
                    failures.append(path)
                    try:
                        browser.restart()
                    except Exception as problem:  # noqa: BLE001
                        report({"ok": False, "error": "Chromium did not restart: " + describe(problem)}, 1)
                del server.inputs[str(key)]
                results.append(result)
        finally:
            browser.quit()
    with open(arguments.out, "w") as file:
        json.dump(results, file, indent=1)
        file.write("\n")
    # Like frames: a video that does not play is an observation (in its "error"), a crashed browser is not.
    errors = [result["file"] for result in results if result["error"]]
    report({"ok": not failures, "files": len(results), "filesWithError": errors, "failures": failures,
            "out": arguments.out}, 1 if failures else 0)


def play_once(driver, origin, key, rate, metadata_only, probe_times, result, pixels=False):
    """Fills result from one page load; raises CheckFailed when the video does not play to its end in time."""
    query = urllib.parse.urlencode({"src": "/input/" + key, "rate": repr(rate), "key": key,
                                    "pixels": "1" if pixels else "0",
                                    "probes": ",".join(repr(float(t)) for t in probe_times)})
    driver.get(origin + "/video.html?" + query)
    # Polled often, so it leaves out the growing list of frame times.
    read_status = ("const s = window.__state;"
                   "return {loaded: s.loaded, duration: s.duration, error: s.error, done: s.done};")
    deadline = time.monotonic() + METADATA_SECONDS
    while True:
        status = driver.execute_script(read_status)
        result.update(duration=status["duration"], error=status["error"])
        if status["error"]:
            return
        if status["loaded"]:
            break
        if time.monotonic() > deadline:
            raise CheckFailed("no metadata after %d s" % METADATA_SECONDS)
        time.sleep(0.1)
    if status["duration"] is None:
        raise CheckFailed("the duration is not a finite number")
    if metadata_only:
        return
    bound = status["duration"] / rate + 10 + len(probe_times)
    deadline = time.monotonic() + bound
    while not status["done"] and time.monotonic() < deadline:
        time.sleep(0.2)
        status = driver.execute_script(read_status)
    state = driver.execute_script("return window.__state;")
    result.update(mediaTimes=state["mediaTimes"], endedCurrentTime=state["endedCurrentTime"], probes=state["probes"],
                  error=state["error"])
    if not state["done"]:
        raise CheckFailed("not ended after %.1f s (duration / rate + 10 s)" % bound)


def report_page(result):
    """Reports a page check: failed by its own error, or by any Content-Security-Policy violation."""
    if "error" not in result and result["cspViolations"]:
        result["error"] = "Content-Security-Policy violations"
    result["ok"] = "error" not in result
    report(result, 0 if result["ok"] else 1)


def app_base(url):
    """The app's URL as "URL/", after checking it: it goes into a CSP source list and an HTML attribute as it is.
    A CSP source ending in "/" allows everything below it, and it is the base relative addresses resolve against."""
    app = urllib.parse.urlsplit(url)
    if app.scheme not in ("http", "https") or app.hostname != "127.0.0.1" or re.search(r"[\s;,'\"<>]", url):
        report({"ok": False, "error": "--app must be an http(s)://127.0.0.1 URL without spaces or ;,'\"<>"}, 2)
    return url.rstrip("/") + "/"


def run_snippet(arguments):
    from selenium.common.exceptions import TimeoutException

    if not arguments.timeout > 0:
        report({"ok": False, "error": "--timeout must be positive"}, 2)
    base = app_base(arguments.app)
    result = {"ok": False, "plays": 0, "ended": False, "paused": None, "currentTime": None, "duration": None,
              "loopAttribute": None, "lastMediaTime": None, "cspViolations": [], "console": []}
    with Server() as server:
        server.pages["/snippet.html"] = SNIPPET_PAGE.format(source=base, base=base, snippet=arguments.html)
        initial = dict(result)
        for attempt in (1, 2):
            first = result.get("error") if attempt == 2 else None
            result.clear()
            result.update(initial)
            if first:
                result["retriedAfter"] = first
            # The snippet's own script can keep the page from loading (or busy the renderer): that counts against
            # the same timeout.
            browser = Browser(record_csp=True, instrument=WATCH_FIRST_VIDEO, page_load_timeout=arguments.timeout)
            renderer_answers = True
            try:
                try:
                    driver = browser.start()
                except Exception as error:  # noqa: BLE001
                    report(dict(result, error="Chromium did not start: " + describe(error)), 1)
                try:
                    # The timeout counts from here: loading the page (which the snippet's script can hold up) too.
                    deadline = time.monotonic() + arguments.timeout
                    driver.get(server.origin + "/snippet.html")
                    watch_until_ended(driver, deadline, arguments.timeout, result)
                except TimeoutException as error:  # the renderer is stuck: asking it again would wait as long
                    result["error"] = describe(error)
                    renderer_answers = False
                except Exception as error:  # noqa: BLE001 - reported with whatever was observed
                    result["error"] = describe(error)
                try:
                    # Both ask the renderer (so does get_log); a stuck one would only make them wait out their bound.
                    if renderer_answers:
                        result["cspViolations"] = driver.execute_script("return window.__cspViolations || []")
                        result["console"] = [entry["message"] for entry in driver.get_log("browser")
                                             if entry.get("level") == "SEVERE"]
                except Exception:  # noqa: BLE001 - the browser itself may be gone
                    pass
            finally:
                browser.quit()
            # A renderer that did not answer within the bound: at the system tier's start (the corpus conversions on
            # both cores) Chromium once took longer than 30 s to load the snippet's page. Once more in a fresh
            # browser, as check_page does; a snippet that hangs the page hangs it again.
            if renderer_answers:
                break
    report_page(result)


LAZY_PAGE = """<!doctype html><html><head><meta http-equiv="Content-Security-Policy" content="default-src 'none'; \
script-src {source}; media-src {source}; img-src {source} data:; connect-src {source}; style-src 'unsafe-inline'">\
<base href="{base}"></head>\
<body style="margin:0"><div style="height:4000px">above the fold</div>{snippet}<div style="height:4000px"></div>\
</body></html>"""


def check_page(arguments, page, result, body):
    """Serves `page` (formatted with the app's base as CSP source and <base>) from another origin, opens it in a
    Chromium recording CSP violations, runs `body(driver)`, which fills `result`, adds the violations, and reports
    `result` (`report_page`), with the error of whatever failed."""
    from selenium.common.exceptions import TimeoutException
    base = app_base(arguments.app)
    initial = dict(result)
    with Server() as server:
        server.pages["/page.html"] = page.format(source=base, base=base, snippet=arguments.html)
        for attempt in (1, 2):
            first = result.get("error") if attempt == 2 else None
            result.clear()
            result.update(initial)
            if first:
                result["retriedAfter"] = first
            browser = Browser(record_csp=True, page_load_timeout=arguments.timeout)
            stuck = False
            try:
                try:
                    driver = browser.start()
                except Exception as error:  # noqa: BLE001
                    report(dict(result, error="Chromium did not start: " + describe(error)), 1)
                try:
                    driver.get(server.origin + "/page.html")
                    body(driver)
                    result["cspViolations"] = driver.execute_script("return window.__cspViolations || []")
                except TimeoutException as error:
                    # The renderer did not answer within the bound: on a loaded machine (two cores, every test at
                    # once) Chromium sometimes takes that long. Once more in a fresh browser; a page that hangs it
                    # hangs it again.
                    result["error"] = describe(error)
                    stuck = True
                except Exception as error:  # noqa: BLE001 - reported with whatever was observed
                    result["error"] = describe(error)
            finally:
                browser.quit()
            if not stuck:
                break
    report_page(result)


def run_lazy(arguments):
    """A rewritten <img loading=lazy> (<video data-gif2mp4-lazy preload=none>) below the fold: nothing loaded
    and not playing at first; playing once scrolled into view; paused again once scrolled away."""
    probe = ("const v = document.querySelector('video');"
             "return v && {paused: v.paused, readyState: v.readyState, currentTime: v.currentTime,"
             " preload: v.preload, autoplay: v.autoplay, poster: v.getAttribute('poster'),"
             " error: v.error && v.error.message};")
    result = {"ok": False, "cspViolations": []}

    def body(driver):
        time.sleep(1.5)
        result["beforeScroll"] = driver.execute_script(probe)

        def until(condition, failure):
            deadline = time.monotonic() + arguments.timeout
            while True:
                state = driver.execute_script(probe)
                if state and condition(state):
                    return state
                if time.monotonic() > deadline:
                    raise CheckFailed("%s: %s" % (failure, state))
                time.sleep(0.05)

        driver.execute_script("document.querySelector('video').scrollIntoView()")
        result["inView"] = until(lambda state: not state["paused"] and state["currentTime"] > 0.05,
                                 "the video did not play once in view")
        driver.execute_script("window.scrollTo(0, 0)")
        result["afterScroll"] = until(lambda state: state["paused"], "the video did not pause out of view")

    check_page(arguments, LAZY_PAGE, result, body)


def run_elements(arguments):
    """A snippet on a page of another origin (the snippet page's CSP) until the JavaScript expression UNTIL is true
    (or the timeout): the tag and attributes of every <img> and <video> in the body, and whether UNTIL became true."""
    result = {"ok": False, "until": False, "elements": [], "cspViolations": []}
    read = ("return Array.from(document.body.querySelectorAll('img, video')).map((e) => ({tag: e.tagName.toLowerCase(),"
            " currentSrc: e.currentSrc || null,"
            " rect: ((r) => [r.x, r.y, r.width, r.height])(e.getBoundingClientRect()),"
            " attributes: Object.fromEntries(Array.from(e.attributes).map((a) => [a.name, a.value]))}));")

    def body(driver):
        deadline = time.monotonic() + arguments.timeout
        while time.monotonic() < deadline:
            if driver.execute_script("return !!(" + arguments.until + ");"):
                result["until"] = True
                break
            time.sleep(0.1)
        if arguments.resize:
            # The window resized to each width in turn (the viewport's, through DevTools), the page given time to
            # answer each; the CSP violations counted before.
            result["cspViolationsBeforeResize"] = len(driver.execute_script("return window.__cspViolations || []"))
            for width in [int(value) for value in arguments.resize.split(",")]:
                driver.execute_cdp_cmd(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False})
                time.sleep(0.4)
        result["elements"] = driver.execute_script(read)

    page = SNIPPET_PAGE.replace(" data:;", ";") if arguments.no_data_images else SNIPPET_PAGE
    check_page(arguments, page, result, body)


def watch_until_ended(driver, deadline, timeout, result):
    probe = (
        "const w = window.__videoWatch, v = window.__watchedVideo;"
        "if (!w || !v) return null;"
        "const finite = (x) => Number.isFinite(x) ? x : null;"
        "return {plays: w.plays, ended: v.ended, paused: v.paused, currentTime: v.currentTime,"
        " duration: finite(v.duration), loopAttribute: v.loop, lastMediaTime: w.lastMediaTime,"
        " videoWidth: v.videoWidth, videoHeight: v.videoHeight, currentSrc: v.currentSrc,"
        " mediaError: w.mediaError};"
    )
    ended_since = None
    while True:
        state = driver.execute_script(probe)
        now = time.monotonic()
        if state is not None:
            media_error = state.pop("mediaError")
            result.update(state)
            if media_error:
                raise CheckFailed("the video failed: " + media_error)
            ended_since = (ended_since or now) if state["ended"] else None
            if ended_since is not None and now - ended_since >= 1.0:
                return
        if now > deadline:
            if state is None:
                raise CheckFailed("no <video> in the document after %s s" % timeout)
            raise CheckFailed("the video had not ended (and stayed ended for 1 s) after %s s" % timeout)
        time.sleep(0.1)


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    frames = commands.add_parser("frames", help="decode animated images with ImageDecoder")
    frames.add_argument("--background", required=True, help="opaque background colour, RRGGBB")
    frames.add_argument("--out", required=True, help="directory for <name>.rgba and <name>.json")
    frames.add_argument("files", nargs="+", metavar="FILE")

    video = commands.add_parser("video", help="play MP4s once and record the presented frames")
    video.add_argument("--rate", type=float, default=0.25, help="playbackRate (default 0.25)")
    video.add_argument("--metadata-only", action="store_true", help="record the duration only, do not play")
    video.add_argument("--probes", help="JSON file: {FILE.mp4: [seconds, ...]} times to seek to after the play")
    video.add_argument("--out", required=True, help="JSON file for the results")
    video.add_argument("--pixels", metavar="DIR", help="write each probe's picture over black and white into DIR")
    video.add_argument("files", nargs="+", metavar="FILE.mp4")

    snippet = commands.add_parser("snippet", help="count the plays of an app's <video> snippet")
    snippet.add_argument("--app", required=True, help="the app's base URL (http://127.0.0.1:PORT)")
    snippet.add_argument("--html", required=True, help="the snippet: a <video> and maybe a <script src>")
    snippet.add_argument("--timeout", type=float, default=60, help="seconds to wait for the end (default 60)")

    lazy = commands.add_parser("lazy", help="a lazy <video> plays in view and pauses out of it")
    lazy.add_argument("--app", required=True, help="the app's base URL (http://127.0.0.1:PORT)")
    lazy.add_argument("--html", required=True, help="the <video data-gif2mp4-lazy> and its <script src>")
    lazy.add_argument("--timeout", type=float, default=30, help="seconds for each step (default 30)")

    elements = commands.add_parser("elements", help="a snippet's <img> and <video> elements once UNTIL holds")
    elements.add_argument("--app", required=True, help="the app's base URL (http://127.0.0.1:PORT)")
    elements.add_argument("--html", required=True, help="the snippet")
    elements.add_argument("--until", required=True, help="a JavaScript expression to wait for")
    elements.add_argument("--timeout", type=float, default=30, help="seconds to wait (default 30)")
    elements.add_argument("--resize", help="widths (CSS pixels, comma-separated) to resize the window to afterwards")
    elements.add_argument("--no-data-images", action="store_true", help="the page's CSP without img-src data:")

    arguments = parser.parse_args()
    if arguments.command == "frames" and not re.fullmatch(r"[0-9A-Fa-f]{6}", arguments.background):
        parser.error("--background must be six hex digits, RRGGBB")
    return arguments


def main():
    arguments = parse_arguments()
    missing = Browser.missing_tools()
    if missing:
        report({"ok": False, "error": "missing %s; install with: %s" % (", ".join(missing), PACKAGES)}, 2)
    {"frames": run_frames, "video": run_video, "snippet": run_snippet, "lazy": run_lazy,
     "elements": run_elements}[arguments.command](arguments)


if __name__ == "__main__":
    main()
