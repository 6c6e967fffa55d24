"""Limits and lifecycle on a server of its own with tight limits: queue full
-> 503, body limit -> 413 through the client, idle and half-open
connections closed, the connection cap, and graceful shutdown on SIGTERM
(in-flight streams finish, new connections are refused, exit 0)."""
import json
import select
import signal
import time

import openai
import pytest

from conftest import API_KEY, SLOW, Server, closed_by_peer, read_response

MSG = [{"role": "user", "content": "Write a poem about the sea."}]


@pytest.fixture(scope="module")
def tight():
    srv = Server("--max-queue", "2", "--max-connections", "8", "--idle-timeout", "2", "--max-body-bytes", "4096")
    yield srv
    rc = srv.stop()
    assert rc == 0, "server exited %d:\n%s" % (rc, "".join(srv.log[-80:]))


def open_stream(srv, n=1, max_tokens=300, path="/v1/chat/completions"):
    body = json.dumps({"messages": MSG, "max_tokens": max_tokens, "n": n, "stream": True, "ignore_eos": True}).encode()
    s = srv.connect()
    s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    first = s.recv(65536)
    assert first.startswith(b"HTTP/1.1 200"), first
    return s, first


def test_queue_full_is_503_and_recovers(tight):
    client = tight.client()
    model = client.models.list().data[0].id
    s, _ = open_stream(tight, n=2)
    try:
        with pytest.raises(openai.InternalServerError) as e:
            client.chat.completions.create(model=model, messages=MSG, max_tokens=2)
        assert e.value.status_code == 503 and e.value.code == "queue_full"
        # More choices than the queue could ever hold is the client's error.
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=model, messages=MSG, max_tokens=2, n=3)
    finally:
        s.close()
    tight.wait_idle()
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=2)
    assert r.choices[0].message.content is not None
    assert tight.metrics()["deepinfer_requests_rejected_total"] >= 1


def test_body_limit_through_the_client(tight):
    client = tight.client()
    with pytest.raises(openai.APIStatusError) as e:
        client.completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt="x" * 5000, max_tokens=1)
    assert e.value.status_code == 413


def test_idle_and_half_sent_connections_are_closed(tight):
    socks = [tight.connect() for _ in range(3)]
    socks[1].sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
    socks[2].sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() +
                     b"\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
    for s in socks:
        assert closed_by_peer(s, 6 * SLOW)
        s.close()


def test_connection_cap(tight):
    """At the cap MHD stops accepting: the next client waits in the kernel's
    backlog, unserved, until a connection closes."""
    socks = [tight.connect() for _ in range(8)]
    try:
        time.sleep(0.2)
        extra = tight.connect()
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        r, _, _ = select.select([extra], [], [], 0.8)
        assert not r, "served past the connection cap"
    finally:
        for s in socks:
            s.close()
    st, _, body = read_response(extra)
    extra.close()
    assert st == 200 and b"ok" in body


def test_no_cors_headers_without_the_flag(tight):
    st, hd, _ = tight.request("GET", "/health", key=None)
    assert st == 200 and "access-control-allow-origin" not in hd
    st, hd, _ = tight.request("OPTIONS", "/v1/completions", key=None)
    assert st == 204 and hd["allow"] == "POST, OPTIONS" and "access-control-allow-origin" not in hd


def read_sse_to_end(s, got=b"", timeout=120):
    s.settimeout(timeout * SLOW)
    while not got.endswith(b"0\r\n\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_zz_graceful_shutdown_finishes_streams(tight):
    s, first = open_stream(tight, max_tokens=12)
    tight.proc.send_signal(signal.SIGTERM)
    # The listener closes soon and new clients are refused (a request that
    # beats the signal handling may still get 200, later ones 503)...
    deadline = time.time() + 10 * SLOW
    while True:
        try:
            st, _, _ = tight.raw(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=5)
        except ConnectionRefusedError:
            break
        except OSError:
            st = None
        assert st in (None, 200, 503)
        assert time.time() < deadline, "listener still open"
        time.sleep(0.05)
    # ...while the running stream completes.
    body = read_sse_to_end(s, first)
    s.close()
    assert b'"finish_reason":"length"' in body and b"data: [DONE]" in body
    assert tight.proc.wait(timeout=60 * SLOW) == 0


def test_second_signal_cancels_running_requests():
    srv = Server("--shutdown-grace", "600")
    s, first = open_stream(srv, max_tokens=800)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    t0 = time.time()
    srv.proc.send_signal(signal.SIGINT)
    body = read_sse_to_end(s, first, timeout=30)
    s.close()
    assert b'"finish_reason":"abort"' in body and b"data: [DONE]" in body
    assert srv.stop(timeout=30) == 0
    assert time.time() - t0 < 20 * SLOW
