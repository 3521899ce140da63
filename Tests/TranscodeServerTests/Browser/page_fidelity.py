#!/usr/bin/python3
"""A page before and after POST /v1/rewrite, as a reader sees it in headless Chromium.

Usage: /usr/bin/python3 page_fidelity.py ORIGINAL.html REWRITTEN.html [--widths 390,1280] [--schemes light,dark]

Serves both files from its own HTTP server on 127.0.0.1 (their images are wherever their URLs say: the test's
origin and service, on 127.0.0.1 too) and loads each page at every width (CSS pixels, device scale 1) and colour
scheme (`prefers-color-scheme`, emulated), with animated images held on their first frame (Chromium's
`settings.a11y.animation_policy: none`, what the accessibility setting "no animation" does): a GIF and the WebP
made from it are then compared frame 0 to frame 0. For each run, before any scrolling:

- `overflow`: how far the document is wider than the viewport (horizontal scrolling), in CSS pixels;
- `fetchedBeforeScroll`: the image URLs the page had requested (Resource Timing, `initiatorType` img);

then for each `<img>` of the document, in order, scrolled into view and loaded: its box in the document (x, y,
width, height, CSS pixels) and a screenshot of it. It compares the two pages image by image: the largest
difference of the boxes' edges and the PSNR (RGB, of 2x2 averages) of the screenshots.

Prints one JSON line {"ok": true, "runs": [{"width", "scheme", "original": {...}, "rewritten": {...},
"images": [{"index", "boxDelta", "psnr", "originalSrc", "rewrittenSrc"}]}]} (or "ok": false with "error") and
exits 0; 1 when the browser failed; 2 when Chromium, chromedriver or Selenium is missing.
"""

import argparse
import functools
import http.server
import json
import math
import os
import struct
import sys
import threading
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "TranscoderTests", "Browser"))
from chromium_oracle import PACKAGES, Browser, report  # noqa: E402

LOAD_SECONDS = 60


def decode_png(data):
    """8-bit RGB or RGBA, non-interlaced PNG (what Chromium's screenshots are) -> (width, height, RGB rows)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    position, idat, header = 8, b"", None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        chunk = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        position += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError("unsupported PNG: depth %d colour %d interlace %d" % (depth, color, interlace))
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous, offset = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[offset], bytearray(raw[offset + 1:offset + 1 + stride])
        offset += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                predictor = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + predictor) & 0xFF
        previous = line
        rgb = bytearray()
        for x in range(width):
            rgb += line[x * channels:x * channels + 3]
        rows.append(rgb)
    return width, height, rows


def psnr_2x2(a, b):
    """PSNR (dB) over RGB of two same-sized pictures' 2x2 averages; None when the sizes differ."""
    (width, height, rows_a), (width_b, height_b, rows_b) = a, b
    if (width, height) != (width_b, height_b):
        return None
    total, count = 0.0, 0
    for y in range(0, height - 1, 2):
        for x in range(0, width - 1, 2):
            for c in range(3):
                i, j = 3 * x + c, 3 * (x + 1) + c
                mean_a = rows_a[y][i] + rows_a[y][j] + rows_a[y + 1][i] + rows_a[y + 1][j]
                mean_b = rows_b[y][i] + rows_b[y][j] + rows_b[y + 1][i] + rows_b[y + 1][j]
                total += ((mean_a - mean_b) / 4.0) ** 2
                count += 1
    if count == 0:
        return None
    mean = total / count
    return 100.0 if mean == 0 else 10 * math.log10(255 * 255 / mean)


READ_PAGE = """
const root = document.documentElement;
return {
  overflow: Math.max(0, root.scrollWidth - root.clientWidth),
  fetchedBeforeScroll: performance.getEntriesByType("resource")
    .filter((entry) => entry.initiatorType === "img").map((entry) => entry.name),
  images: document.images.length,
};
"""

SHOW_IMAGE = """
const [index, done] = [arguments[0], arguments[arguments.length - 1]];
const image = document.images[index];
image.scrollIntoView({block: "center", inline: "center"});
const finish = () => {
  const rect = image.getBoundingClientRect();
  done({x: rect.left + scrollX, y: rect.top + scrollY, width: rect.width, height: rect.height,
        src: image.currentSrc || image.src, complete: image.complete, natural: image.naturalWidth});
};
const deadline = Date.now() + 20000;
const poll = () => {
  if ((image.complete && (image.naturalWidth > 0 || !image.currentSrc)) || Date.now() > deadline) {
    requestAnimationFrame(() => requestAnimationFrame(finish));
  } else {
    setTimeout(poll, 50);
  }
};
poll();
"""


def read_page(driver, url, width, scheme):
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
    driver.get(url)
    deadline = time.monotonic() + LOAD_SECONDS
    while driver.execute_script("return document.readyState") != "complete":
        if time.monotonic() > deadline:
            raise RuntimeError("%s did not load in %d s" % (url, LOAD_SECONDS))
        time.sleep(0.1)
    time.sleep(0.3)
    page = driver.execute_script(READ_PAGE)
    images = []
    for index in range(page["images"]):
        box = driver.execute_async_script(SHOW_IMAGE, index)
        element = driver.execute_script("return document.images[arguments[0]]", index)
        shot = decode_png(element.screenshot_as_png) if box["width"] >= 1 and box["height"] >= 1 else None
        images.append((box, shot))
    return page, images


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("original")
    parser.add_argument("rewritten")
    parser.add_argument("--widths", default="390,1280")
    parser.add_argument("--schemes", default="light,dark")
    args = parser.parse_args()
    missing = Browser.missing_tools()
    if missing:
        report({"ok": False, "error": "missing %s; install with: %s" % (", ".join(missing), PACKAGES)}, 2)
    directory = os.path.dirname(os.path.abspath(args.original))
    if directory != os.path.dirname(os.path.abspath(args.rewritten)):
        report({"ok": False, "error": "the two pages must be in one directory"}, 2)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *arguments):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=directory))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d/" % server.server_address[1]
    browser = Browser(page_load_timeout=LOAD_SECONDS, preferences={"settings": {"a11y": {"animation_policy": "none"}}})
    runs = []
    try:
        driver = browser.start()
        for width in [int(value) for value in args.widths.split(",")]:
            for scheme in args.schemes.split(","):
                before, before_images = read_page(driver, base + os.path.basename(args.original), width, scheme)
                after, after_images = read_page(driver, base + os.path.basename(args.rewritten), width, scheme)
                compared = []
                for index, ((box_a, shot_a), (box_b, shot_b)) in enumerate(zip(before_images, after_images)):
                    delta = max(abs(box_a[key] - box_b[key]) for key in ("x", "y", "width", "height"))
                    compared.append({
                        "index": index, "boxDelta": delta,
                        "psnr": psnr_2x2(shot_a, shot_b) if shot_a and shot_b else None,
                        "originalBox": [box_a[key] for key in ("x", "y", "width", "height")],
                        "rewrittenBox": [box_b[key] for key in ("x", "y", "width", "height")],
                        "originalSrc": box_a["src"], "rewrittenSrc": box_b["src"],
                        "loaded": bool(box_b["complete"] and (box_b["natural"] > 0 or not box_b["src"])),
                    })
                runs.append({
                    "width": width, "scheme": scheme,
                    "original": {"overflow": before["overflow"], "fetchedBeforeScroll": before["fetchedBeforeScroll"],
                                 "images": before["images"]},
                    "rewritten": {"overflow": after["overflow"], "fetchedBeforeScroll": after["fetchedBeforeScroll"],
                                  "images": after["images"]},
                    "images": compared,
                })
    except Exception as error:  # noqa: BLE001 - reported as JSON
        browser.quit()
        report({"ok": False, "error": "%s: %s" % (type(error).__name__, error), "runs": runs}, 1)
    browser.quit()
    report({"ok": True, "runs": runs}, 0)


if __name__ == "__main__":
    main()
