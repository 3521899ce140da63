#!/usr/bin/python3
"""Drives the demo page in headless Chromium: converts a GIF by URL and checks the MP4 really plays.

Usage: /usr/bin/python3 demo_page_check.py PAGE_URL GIF_URL [PLAYS]
       /usr/bin/python3 demo_page_check.py PAGE_URL sample

With `sample`, the page is shown in dark mode (emulated): the background picker must start at the page's dark
colour; it is set to #123456 and the built-in sample GIF (transparent corners) converted through the "Try the
sample" button; the video's corner pixel, read through a canvas, must be that colour, the animated WebP's corner
transparent, and /favicon.ico an icon.

With PLAYS, also waits for the video to end and checks that it played exactly PLAYS times (a loop wrap, seen
as requestVideoFrameCallback's mediaTime going back, ends a play; so does `ended`) and stopped on its end.

Prints one JSON line ({"ok": true, ...} or {"ok": false, "error": ...}) and exits 0 on success, 1 when a
check fails, 2 when Chromium, chromedriver or Selenium is missing (Debian: chromium chromium-driver
python3-selenium).
"""

import os
import sys
import time

# One way to start and stop headless Chromium for every browser test: the oracle's (its options keep Chromium
# on 127.0.0.1, its quit() reaps what chromedriver leaves behind), its CSP recorder and its play counter.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "TranscoderTests", "Browser"))
from chromium_oracle import PACKAGES, WATCH_FIRST_VIDEO, Browser, CheckFailed, report  # noqa: E402


def wait_for(description, timeout, probe, interval=0.2):
    """Calls probe until it returns a truthy value; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CheckFailed("timed out after %ss waiting for %s" % (timeout, description))
        time.sleep(interval)


def main():
    if len(sys.argv) not in (3, 4):
        report({"ok": False, "error": "usage: demo_page_check.py PAGE_URL GIF_URL [PLAYS]"}, 2)
    page_url, gif_url = sys.argv[1], sys.argv[2]
    expected_plays = int(sys.argv[3]) if len(sys.argv) == 4 else None

    missing = Browser.missing_tools()
    if missing:
        report({"ok": False, "error": "missing %s; install with: %s" % (", ".join(missing), PACKAGES)}, 2)
    from selenium.webdriver.common.by import By

    started = time.monotonic()
    browser = Browser(record_csp=True, instrument=WATCH_FIRST_VIDEO)
    try:
        driver = browser.start()
    except Exception as error:  # noqa: BLE001 - reported as JSON like every other failure
        report({"ok": False, "error": "Chromium did not start: %s: %s" % (type(error).__name__, error)}, 1)
    result = {"ok": False, "page": page_url, "gif": gif_url}
    try:
        sample = gif_url == "sample"
        if sample:
            driver.execute_cdp_cmd(
                "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        driver.get(page_url)
        script = driver.execute_script

        # The inline style applied (its CSP hash matches).
        if script("return getComputedStyle(document.querySelector('main')).maxWidth") == "none":
            raise CheckFailed("the page's inline style did not apply")

        if sample:
            picked = script("return document.getElementById('background').value")
            page_background = script("return getComputedStyle(document.body).backgroundColor")
            result.update(pickerDefault=picked, pageBackground=page_background)
            if picked != "#121212" or page_background != "rgb(18, 18, 18)":
                raise CheckFailed("dark mode: picker %s, page %s" % (picked, page_background))
            script("const b = document.getElementById('background'); b.value = '#123456';"
                   "b.dispatchEvent(new Event('change'));")
            driver.find_element(By.ID, "sample").click()
        else:
            driver.find_element(By.ID, "url").send_keys(gif_url)
            driver.find_element(By.ID, "convert").click()

        def answered():
            if script("return !document.getElementById('error').hidden"):
                raise CheckFailed("the page shows an error: " + driver.find_element(By.ID, "error").text)
            return script(
                "const v = document.querySelector('#video');"
                "return v !== null && !document.getElementById('result').hidden && v.currentSrc !== '';"
            )

        wait_for("#video with a source", 60, answered)
        result["videoSrc"] = script("return document.querySelector('#video').currentSrc")

        def ready():
            state = script(
                "const v = document.querySelector('#video');"
                "return {readyState: v.readyState, error: v.error && (v.error.code + ' ' + v.error.message)};"
            )
            if state["error"]:
                raise CheckFailed("the video failed to load: " + state["error"])
            return state["readyState"] == 4

        wait_for("#video readyState 4 (HAVE_ENOUGH_DATA)", 30, ready)
        result["readyState"] = 4

        playback = (
            "const v = document.querySelector('#video');"
            "const q = v.getVideoPlaybackQuality();"
            "return {time: v.currentTime, played: v.played.length, paused: v.paused, loop: v.loop,"
            " width: v.videoWidth, height: v.videoHeight, frames: q.totalVideoFrames};"
        )
        first = script(playback)
        time.sleep(1.0)
        second = script(playback)
        result.update(first=first, second=second)
        advanced = second["time"] > first["time"]
        looped = second["played"] > 0 and second["time"] != first["time"]
        if not (advanced or looped):
            raise CheckFailed("currentTime did not advance: %s then %s" % (first, second))
        if second["width"] <= 0 or second["height"] <= 0:
            raise CheckFailed("the video has no picture size: %s" % second)

        if sample:
            # The transparent corner, flattened over the chosen colour (4:2:0 and limited range: within 6).
            corner = script(
                "const v = document.querySelector('#video'); const c = document.createElement('canvas');"
                "c.width = v.videoWidth; c.height = v.videoHeight; const x = c.getContext('2d');"
                "x.drawImage(v, 0, 0); return Array.from(x.getImageData(3, 3, 1, 1).data);")
            backdrop = script("return document.querySelector('.pair figure').style.backgroundColor")
            icon = script(
                "return fetch('/favicon.ico').then(async r => ({status: r.status,"
                " type: r.headers.get('Content-Type'), bytes: (await r.arrayBuffer()).byteLength}));")
            result.update(corner=corner, backdrop=backdrop, favicon=icon)
            if any(abs(a - b) > 6 for a, b in zip(corner[:3], (0x12, 0x34, 0x56))):
                raise CheckFailed("the video's transparent corner is %s, not #123456" % corner)
            if backdrop != "rgb(18, 52, 86)":
                raise CheckFailed("the figures' backdrop is %s" % backdrop)
            if icon["status"] != 200 or icon["type"] != "image/x-icon" or icon["bytes"] == 0:
                raise CheckFailed("/favicon.ico: %s" % icon)
            # The animated WebP beside it keeps the corner transparent (the figure's colour shows through).
            wait_for("#webp to load", 30, lambda: script(
                "const w = document.querySelector('#webp'); return w.complete && w.naturalWidth > 0"))
            webp_corner = script(
                "const w = document.querySelector('#webp'); const c = document.createElement('canvas');"
                "c.width = w.naturalWidth; c.height = w.naturalHeight; const x = c.getContext('2d');"
                "x.drawImage(w, 0, 0); return Array.from(x.getImageData(3, 3, 1, 1).data);")
            result["webpCorner"] = webp_corner
            if webp_corner[3] != 0:
                raise CheckFailed("the WebP's transparent corner is %s, not transparent" % webp_corner)

        snippet = script("return document.querySelector('#snippet').value")
        # A GIF better kept (no smaller video at the quality floor) named by its URL gets its own <img>.
        keep = driver.find_element(By.ID, "advice").text.startswith("Keep the GIF")
        result["advice"] = "keep-gif" if keep else "video"
        expected_tag = "<img" if keep and not sample else "<video"
        if not snippet.startswith(expected_tag):
            raise CheckFailed("#snippet does not start with %s: %r" % (expected_tag, snippet))
        # The original GIF is shown from its own address (the CSP's img-src allows it), or a blob: of the file.
        wait_for("#gif to load", 10, lambda: script("const g = document.querySelector('#gif');"
                                                     "return g.complete && g.naturalWidth > 0;"))
        for field in ("gif-size", "mp4-size", "saved"):
            result[field] = driver.find_element(By.ID, field).text
            if not result[field]:
                raise CheckFailed("#%s is empty" % field)

        if expected_plays is not None:
            # Ended, and still ended a second later (not about to start another play).
            def ended_for_good():
                if not script("return document.querySelector('#video').ended"):
                    return False
                time.sleep(1.0)
                return script("return document.querySelector('#video').ended")

            wait_for("#video to end", 60, ended_for_good, interval=0.5)
            plays = script("return window.__videoWatch")
            state = script("const v = document.querySelector('#video');"
                           "return {time: v.currentTime, duration: v.duration, paused: v.paused, loop: v.loop};")
            result.update(plays=plays["plays"], end=state)
            if result["plays"] != expected_plays:
                raise CheckFailed("played %d times, expected %d: %s" % (result["plays"], expected_plays, plays))
            if abs(state["time"] - state["duration"]) > 0.001:
                raise CheckFailed("did not stop on its last frame: %s" % state)

        violations = script("return window.__cspViolations")
        if violations:
            raise CheckFailed("Content-Security-Policy violations: %s" % violations)
        result["ok"] = True
    except Exception as error:  # noqa: BLE001 - any failure is reported as JSON with the page's state
        result["error"] = "%s: %s" % (type(error).__name__, error)
        try:
            result["status"] = driver.find_element(By.ID, "status").text
            result["cspViolations"] = driver.execute_script("return window.__cspViolations")
            result["browserLog"] = [entry["message"] for entry in driver.get_log("browser")]
        except Exception:  # noqa: BLE001 - the browser itself may be gone
            pass
    finally:
        result["seconds"] = round(time.monotonic() - started, 2)
        browser.quit()
    report(result, 0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
