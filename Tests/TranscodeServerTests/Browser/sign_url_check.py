#!/usr/bin/python3
"""Runs the JavaScript signer of docs/api.md (WebCrypto) in headless Chromium and prints the URL it makes.

Usage: /usr/bin/python3 sign_url_check.py PAGE_URL JS_FILE KEY SALT GIF_URL EXT [BG]

PAGE_URL: any page of a secure context (http://127.0.0.1:... is one; WebCrypto needs it). JS_FILE: the code
block, which defines gifVideoURL(base, gifURL, {ext, bg}) and reads the globals KEY and SALT.

Prints one JSON line ({"ok": true, "url": ...} or {"ok": false, "error": ...}); exits 0 on success, 1 when
the script fails, 2 when Chromium, chromedriver or Selenium is missing.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "TranscoderTests", "Browser"))
from chromium_oracle import PACKAGES, Browser, report  # noqa: E402


def main():
    if len(sys.argv) not in (7, 8):
        report({"ok": False, "error": "usage: sign_url_check.py PAGE_URL JS_FILE KEY SALT GIF_URL EXT [BG]"}, 2)
    page, js_file, key, salt, gif_url, ext = sys.argv[1:7]
    background = sys.argv[7] if len(sys.argv) == 8 else None
    missing = Browser.missing_tools()
    if missing:
        report({"ok": False, "error": "missing %s; install with: %s" % (", ".join(missing), PACKAGES)}, 2)
    with open(js_file) as file:
        code = file.read()
    script = (
        "const KEY = arguments[0], SALT = arguments[1];\n" + code + "\n"
        "const done = arguments[arguments.length - 1];\n"
        "gifVideoURL('', arguments[2], {ext: arguments[3], bg: arguments[4] || undefined})"
        ".then((url) => done({url}), (error) => done({error: String(error)}));"
    )
    browser = Browser()
    try:
        driver = browser.start()
        driver.get(page)
        driver.set_script_timeout(30)
        answer = driver.execute_async_script(script, key, salt, gif_url, ext, background)
    except Exception as error:  # noqa: BLE001 - reported as JSON like every other failure
        report({"ok": False, "error": "%s: %s" % (type(error).__name__, error)}, 1)
    finally:
        browser.quit()
    if "error" in answer:
        report({"ok": False, "error": answer["error"]}, 1)
    report({"ok": True, "url": answer["url"]}, 0)


if __name__ == "__main__":
    main()
