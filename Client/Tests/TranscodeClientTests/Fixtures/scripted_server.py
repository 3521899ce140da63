#!/usr/bin/env python3
"""A loopback HTTP server that answers from a script, for the client's tests of what the real service seldom does
(a 503 with Retry-After, bytes that differ from their manifest) and a webhook receiver.

scripted_server.py PORT SCRIPT.json LOG.jsonl
SCRIPT maps a path to a list of answers, used in turn (the last repeats): {"status", "headers", "body"}.
Every request is appended to LOG as one JSON line: method, path, headers, body (base64).
"""
import base64
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, script_path, log_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(script_path) as f:
    script = json.load(f)
served = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with open(log_path, "a") as log:
            log.write(json.dumps({"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                                  "body": base64.b64encode(body).decode()}) + "\n")
        path = self.path.split("?")[0]
        answers = script.get(path) or script.get("*") or [{"status": 404, "body": ""}]
        index = served.get(path, 0)
        served[path] = index + 1
        reply = answers[min(index, len(answers) - 1)]
        data = reply.get("body", "")
        data = base64.b64decode(reply["base64"]) if "base64" in reply else data.encode()
        self.send_response(reply.get("status", 200))
        for name, value in reply.get("headers", {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = answer

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
