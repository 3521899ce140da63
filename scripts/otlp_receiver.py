#!/usr/bin/env python3
"""An OTLP/HTTP trace receiver on loopback, for TracingTests and scripts/bench-tracing, and an origin that records
the `traceparent` each request brought.

  POST /v1/traces  an ExportTraceServiceRequest (protobuf, PyPI `opentelemetry-proto`): each span is appended to
                   SPANS (a JSON object a line: trace, span, parent, name, kind, start, end, attributes, status,
                   links: the linked spans' "trace:span")
  POST /hook       a webhook receiver: answers 204, and appends the request's `traceparent` (or "-") to SPANS.hook
  GET /gif/<n>     the GIF file GIF with the path after its trailer (each URL is new content, the same work); the
                   request's `traceparent` (or "-") is appended to SPANS.origin, a line per request

Usage: otlp_receiver.py SPANS GIF   prints the port it listens on (127.0.0.1), then serves until killed.
"""
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

with open(sys.argv[2], "rb") as f:
    GIF = f.read()
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces":
            with lock, open(sys.argv[1] + ".hook", "a") as out:
                out.write((self.headers.get("traceparent") or "-") + "\n")
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    lines.append(json.dumps({
                        "trace": span.trace_id.hex(), "span": span.span_id.hex(),
                        "parent": span.parent_span_id.hex(), "name": span.name, "kind": span.kind,
                        "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                        "attributes": {a.key: a.value.string_value or a.value.int_value for a in span.attributes},
                        "status": span.status.code,
                        "links": [link.trace_id.hex() + ":" + link.span_id.hex() for link in span.links],
                    }))
        with lock, open(sys.argv[1], "a") as out:
            out.writelines(line + "\n" for line in lines)
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        with lock, open(sys.argv[1] + ".origin", "a") as out:
            out.write((self.headers.get("traceparent") or "-") + "\n")
        body = GIF + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Type", "image/gif")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
