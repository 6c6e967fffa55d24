"""Fixtures for the server tests: each suite starts its own `deepinfer serve`
on a free loopback port and stops it with SIGTERM at the end, checking that
it exits 0 (under ASan that also means no leak was reported).

The binary and model come from DI_SERVE_BIN / DI_SERVE_MODEL (set by
run_pytest.sh). Only 127.0.0.1 is ever contacted.
"""
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time

import openai
import pytest

API_KEY = "sk-test-key"
# The shared server's --cors-origin (tests/server/test_http_head.py).
CORS_ORIGIN = "https://app.example"
BIN = os.environ.get("DI_SERVE_BIN", "build/deepinfer")
MODEL = os.environ.get("DI_SERVE_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf")
# Sanitizer builds are several times slower: timeouts scale with this.
SLOW = float(os.environ.get("DI_TEST_SLOW", "1"))


class Server:
    def __init__(self, *extra, model=None):
        self.log = []
        args = [BIN, "serve", "-m", model or MODEL, "--port", "0", "--api-key", API_KEY, "-c", "1024",
                "--kv-tokens", "8192", *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(m.group(1))
        self.base = f"http://127.0.0.1:{self.port}"
        # Drain stderr so the server never blocks on a full pipe.
        self._t = threading.Thread(target=self._drain, daemon=True)
        self._t.start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def client(self, key=API_KEY, retries=0, timeout=120):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=key, max_retries=retries, timeout=timeout * SLOW)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout * SLOW)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            raise AssertionError("server did not stop after SIGTERM:\n" + "".join(self.log[-50:]))
        self._t.join(timeout=5)
        return rc

    # ---- raw HTTP --------------------------------------------------------------

    def connect(self, timeout=30):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout * SLOW)
        return s

    def raw(self, data, timeout=30):
        """Sends raw bytes, returns (status, headers, body) of the answer, or
        (None, {}, b"") when the server closed without answering."""
        with self.connect(timeout) as s:
            s.sendall(data)
            return read_response(s)

    def request(self, method, path, body=None, headers=None, key=API_KEY):
        if isinstance(body, str):
            body = body.encode()
        h = {"Host": "127.0.0.1", "Connection": "close"}
        if key:
            h["Authorization"] = f"Bearer {key}"
        if body is not None:
            h["Content-Type"] = "application/json"
            h["Content-Length"] = str(len(body))
        h.update(headers or {})
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        return self.raw(head.encode() + (body or b""))

    def json(self, method, path, obj=None, **kw):
        import json
        st, hd, body = self.request(method, path, None if obj is None else json.dumps(obj), **kw)
        return st, (json.loads(body) if body else None)

    def metrics(self):
        st, _, body = self.request("GET", "/metrics", key=None)
        assert st == 200
        out = {}
        for line in body.decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def wait_idle(self, timeout=30):
        """Waits until no request is queued, running or in flight."""
        deadline = time.time() + timeout * SLOW
        while True:
            m = self.metrics()
            if (m["deepinfer_requests_in_flight"] == 0 and m["deepinfer_num_requests_running"] == 0
                    and m["deepinfer_num_requests_waiting"] == 0):
                return m
            if time.time() > deadline:
                raise AssertionError(f"server not idle: {m}")
            time.sleep(0.05)


def read_response(s):
    """Reads one HTTP response from socket s (Content-Length, chunked or
    until close)."""
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                return (None, {}, b"")
            buf += chunk
    except (ConnectionResetError, BrokenPipeError):
        return (None, {}, b"")
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    body = rest
    try:
        if "content-length" in headers:
            n = int(headers["content-length"])
            while len(body) < n:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
            body = body[:n]
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            while not body.endswith(b"0\r\n\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
            body = dechunk(body)
        else:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    return status, headers, body


def dechunk(data):
    out = b""
    while data:
        line, _, data = data.partition(b"\r\n")
        n = int(line.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out += data[:n]
        data = data[n + 2:]
    return out


def closed_by_peer(s, timeout):
    """True when the server closes s within timeout seconds."""
    r, _, _ = select.select([s], [], [], timeout)
    if not r:
        return False
    try:
        data = s.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return True
    if data:
        # An answer (e.g. 408/400) then close also counts as closing.
        return closed_by_peer(s, timeout)
    return True


@pytest.fixture(scope="session")
def server():
    srv = Server("--max-queue", "160", "--max-body-bytes", str(256 * 1024), "--max-header-bytes", "8192",
                 "--cors-origin", CORS_ORIGIN)
    yield srv
    rc = srv.stop()
    assert rc == 0, "server exited %d:\n%s" % (rc, "".join(srv.log[-80:]))


@pytest.fixture(scope="session")
def client(server):
    return server.client()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """The tiny DeepSeek-V4.1 checkpoint with the protocol's special tokens
    (tests/data/golden/deepseek_v41/tiny_dsml), its output scripted by
    test_tools.SCRIPT (--test-scripted-output); shared by test_tools.py and
    test_protocols.py so their long tool prompts hit one prefix cache."""
    import json
    from pathlib import Path
    from test_tools import BODY_LIMIT, SCRIPT
    script = tmp_path_factory.mktemp("script") / "outputs.json"
    script.write_text(json.dumps(SCRIPT, ensure_ascii=False), encoding="utf-8")
    model = Path(__file__).resolve().parents[2] / "tests/data/golden/deepseek_v41/tiny_dsml"
    srv = Server("-c", "4096", "--kv-tokens", "16384", "--max-body-bytes", str(BODY_LIMIT),
                 "--test-scripted-output", str(script), model=str(model))
    yield srv
    assert srv.stop() == 0, "".join(srv.log[-40:])


@pytest.fixture(scope="session")
def tiny_free():
    """The same tiny DeepSeek-V4.1 checkpoint without scripted outputs: its
    random weights say whatever they say, so only what the server enforces
    (the tool-call grammar of test_tools.py) shapes the reply."""
    from pathlib import Path
    model = Path(__file__).resolve().parents[2] / "tests/data/golden/deepseek_v41/tiny_dsml"
    srv = Server("-c", "4096", "--kv-tokens", "16384", model=str(model))
    yield srv
    assert srv.stop() == 0, "".join(srv.log[-40:])
