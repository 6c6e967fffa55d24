#!/usr/bin/env python3
"""A misbehaving OpenAI-compatible server for tests/cli/bench_serve.sh.

The request's "model" picks the behaviour, so one stub serves every case:
  ok         a well-formed stream: 3 content chunks, usage, [DONE]
  stall      one chunk, then silence (the client's --stall must end it)
  malformed  a data line that is not JSON
  html       200 with an HTML page instead of an event stream
  early      one chunk, then the connection closes without [DONE]
  http500    an HTTP 500 with an OpenAI error body
  huge       a 2 MiB line that never ends (past the client's event limit)
  corpus:N   the bytes of CORPUS_DIR/N.sse as an event stream, then close
             (CORPUS_DIR is argv[1]: tests/data/malformed/sse)
Prints its port on stdout once listening; stdlib only.
"""
import http.server
import json
import os
import socketserver
import sys
import time

MODES = ["ok", "stall", "malformed", "html", "early", "http500", "huge"]
CORPUS_DIR = sys.argv[1] if len(sys.argv) > 1 else None


def chunk(text):
    return {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def log_message(self, *args):
        pass

    def send(self, code, ctype, body):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.end_headers()
        self.wfile.write(body)

    def event(self, obj):
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def do_GET(self):
        if self.path == "/v1/models":
            body = {"object": "list", "data": [{"id": m, "object": "model"} for m in MODES]}
            self.send(200, "application/json", json.dumps(body).encode())
        else:
            self.send(404, "application/json", b'{"error": {"message": "not found"}}')

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        mode = req.get("model", "ok")
        if mode == "http500":
            return self.send(500, "application/json", b'{"error": {"message": "boom", "type": "server_error"}}')
        if mode == "html":
            return self.send(200, "text/html", b"<html><body>hello</body></html>")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if mode.startswith("corpus:") and CORPUS_DIR:
            name = os.path.basename(mode[len("corpus:"):])
            with open(os.path.join(CORPUS_DIR, name + ".sse"), "rb") as f:
                self.wfile.write(f.read())
            return
        if mode == "huge":
            self.wfile.write(b"data: " + b"x" * (2 << 20))
            return
        self.event(chunk("Hello"))
        if mode == "stall":
            time.sleep(30)
            return
        if mode == "early":
            return
        if mode == "malformed":
            self.event("{not json")
            return
        self.event(chunk(" there"))
        self.event(chunk(" friend"))
        self.event({"id": "c", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3,
                                                       "prompt_tokens_details": {"cached_tokens": 2}}})
        self.event("[DONE]")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


if __name__ == "__main__":
    srv = Server(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()
