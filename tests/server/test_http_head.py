"""Issue 15, defect 6: the request head is checked before libmicrohttpd
sees it (src/server/http_head.c, http_listen.c). --max-header-bytes is
exact (the shared server runs with 8192), an over-limit head, a bad
Content-Length, a malformed request line, a missing Host or another HTTP
version get one status line and an OpenAI-shaped JSON error (never
libmicrohttpd's HTML pages); HEAD and OPTIONS are answered; --cors-origin
puts CORS headers on every answer (the tight server has none)."""
import json
import re

import pytest

from conftest import API_KEY, CORS_ORIGIN

LIMIT = 8192


def head_of(n, path="/health", method="GET", extra=""):
    """A request head of exactly n bytes (request line through the empty line)."""
    base = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}X-Pad: "
    pad = n - len(base) - 4
    assert pad >= 0
    return (base + "a" * pad + "\r\n\r\n").encode()


def raw_all(server, data):
    with server.connect() as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def assert_json_error(raw, status, code=None):
    """raw is a whole answer: exactly one status line, JSON error body."""
    assert len(re.findall(rb"HTTP/1\.[01] \d{3} ", raw)) == 1, raw[:400]
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), raw[:400]
    assert b"content-type: application/json" in head.lower(), head
    err = json.loads(body)["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["message"], err
    if code:
        assert err["code"] == code, err
    return head


def test_header_limit_is_exact(server):
    assert raw_all(server, head_of(LIMIT)).startswith(b"HTTP/1.1 200 ")
    assert_json_error(raw_all(server, head_of(LIMIT + 1)), 431, "request_header_fields_too_large")
    # Far over the limit, and over it in many small lines.
    assert_json_error(raw_all(server, head_of(20 * LIMIT)), 431)
    many = "".join(f"X-H{i}: b\r\n" for i in range(2000))
    assert_json_error(raw_all(server, f"GET /health HTTP/1.1\r\nHost: x\r\n{many}\r\n".encode()), 431)


def test_header_limit_is_exact_on_keep_alive_requests(server):
    first = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    out = raw_all(server, first + head_of(LIMIT))
    assert out.count(b"HTTP/1.1 200 ") == 2, out[:600]
    out = raw_all(server, first + head_of(LIMIT + 1))
    second = out[out.index(b"HTTP/1.1 ", 10):]
    assert_json_error(second, 431)


@pytest.mark.parametrize("value", [b"abc", b"-5", b"+5", b"1.5", b"0x10", b"", b"1 2", b"5, 5",
                                   b"99999999999999999999999"])
def test_bad_content_length_is_a_json_400(server, value):
    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() +
           b"\r\nContent-Length: " + value + b"\r\n\r\n{}")
    assert_json_error(raw_all(server, raw), 400)


def test_conflicting_content_lengths_are_a_json_400(server):
    raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}")
    assert_json_error(raw_all(server, raw), 400)
    # Equal duplicates are one length.
    body = b'{"prompt": "hi"}'
    raw = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() +
           b"\r\nContent-Length: %d\r\ncontent-length: %d\r\nConnection: close\r\n\r\n" % (len(body), len(body)) + body)
    assert raw_all(server, raw).startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("raw,status", [
    (b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n", 400),            # no Host
    (b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET  /health HTTP/1.1\r\nHost: x\r\n\r\n", 400),                     # two spaces
    (b"GET /health\r\nHost: x\r\n\r\n", 400),                               # no version
    (b"G(T /health HTTP/1.1\r\nHost: x\r\n\r\n", 400),                      # not a token
    (b"GET /health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", 400),
])
def test_malformed_heads_get_json(server, raw, status):
    assert_json_error(raw_all(server, raw), status)


def test_head_requests(server):
    st, hd, body = server.request("HEAD", "/health", key=None)
    assert st == 200 and body == b"" and hd["content-type"].startswith("application/json")
    st, _, body = server.request("HEAD", "/v1/models")
    assert st == 200 and body == b""
    st, hd, _ = server.request("HEAD", "/v1/chat/completions")
    assert st == 405 and hd["allow"] == "POST, OPTIONS"


def test_options_and_allow(server):
    st, hd, body = server.request("OPTIONS", "/v1/chat/completions", key=None,
                                  headers={"Origin": CORS_ORIGIN, "Access-Control-Request-Method": "POST"})
    assert st == 204 and body == b""
    assert hd["allow"] == "POST, OPTIONS"
    assert hd["access-control-allow-origin"] == CORS_ORIGIN
    assert "POST" in hd["access-control-allow-methods"]
    assert "authorization" in hd["access-control-allow-headers"].lower()
    st, hd, _ = server.request("OPTIONS", "/health", key=None)
    assert st == 204 and hd["allow"] == "GET, HEAD, OPTIONS"
    st, hd, _ = server.request("OPTIONS", "*", key=None)
    assert st == 204 and "POST" in hd["allow"]
    st, hd, body = server.request("OPTIONS", "/nowhere", key=None)
    assert st == 404 and json.loads(body)["error"]["code"] == "not_found"
    st, hd, body = server.request("DELETE", "/v1/models")
    assert st == 405 and hd["allow"] == "GET, HEAD, OPTIONS"


def test_cors_headers_on_every_answer(server):
    st, hd, _ = server.request("GET", "/health", key=None)
    assert st == 200 and hd["access-control-allow-origin"] == CORS_ORIGIN and hd["vary"] == "Origin"
    st, hd, _ = server.request("POST", "/v1/chat/completions", b"{", key=None)
    assert st == 401 and hd["access-control-allow-origin"] == CORS_ORIGIN
    head = assert_json_error(raw_all(server, head_of(LIMIT + 1)), 431)
    assert b"access-control-allow-origin: " + CORS_ORIGIN.encode() in head.lower()
