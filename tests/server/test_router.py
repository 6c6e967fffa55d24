"""`deepinfer route` in front of two `deepinfer serve` engines: prefix
affinity sends a repeated prompt to the engine that holds it, round-robin
alternates, an engine killed mid-run loses no request (retried on the
other), and the official openai client works through the router, streaming
included, with the same output as the engine alone."""
import concurrent.futures as cf
import re
import signal
import subprocess
import time

import openai

from conftest import API_KEY, BIN, SLOW, Server

SYSTEM = "You are a careful assistant. " * 12


class Router:
    def __init__(self, engines, *extra):
        args = [BIN, "route", "--port", "0", *extra]
        for e in engines:
            args += ["--engine", e.base]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        m = re.search(r"listening on http://[^:]+:(\d+)", self.proc.stdout.readline())
        assert m, "router did not start"
        self.base = f"http://127.0.0.1:{m.group(1)}"

    def client(self, timeout=120):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=API_KEY, max_retries=0, timeout=timeout * SLOW)

    def metrics(self):
        import urllib.request
        out = {}
        for line in urllib.request.urlopen(self.base + "/metrics").read().decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def per_engine(self, name, engines):
        m = self.metrics()
        return [m[f'deepinfer_router_engine_{name}{{engine="{e.base}"}}'] for e in engines]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30 * SLOW) == 0


def ask(client, user, max_tokens=6, stream=False):
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    if stream:
        parts = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=msgs, stream=True,
                                               max_tokens=max_tokens, temperature=0.7, seed=99)
        return "".join(c.choices[0].delta.content or "" for c in parts if c.choices), None
    r = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=msgs,
                                       max_tokens=max_tokens, temperature=0.7, seed=99)
    return r.choices[0].message.content, r.usage


def stop_all(*procs):
    for p in procs:
        if hasattr(p, "proc") and p.proc.poll() is None:
            p.stop()


def test_affinity_round_robin_and_the_openai_client():
    a, b = Server(), Server()
    try:
        r = Router([a, b])
        try:
            c = r.client()
            first, u1 = ask(c, "Tell me about tides.")
            again, u2 = ask(c, "Tell me about tides.")
            third, u3 = ask(c, "Tell me about tides.")
            n = r.per_engine("requests_total", [a, b])
            assert sorted(n) == [0, 3], n  # all three on the engine that holds the prefix
            assert u1.prompt_tokens_details.cached_tokens == 0
            assert u2.prompt_tokens_details.cached_tokens > 0 and u3.prompt_tokens_details.cached_tokens > 0
            assert first == again == third
            # The same through the engine directly, and streamed through the router.
            direct = a if n[0] else b
            assert ask(direct.client(), "Tell me about tides.")[0] == first
            assert ask(c, "Tell me about tides.", stream=True)[0] == first
            done = c.completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt="Once upon a time",
                                        max_tokens=4, temperature=0)
            assert done.choices[0].finish_reason == "length"
            assert r.metrics()["deepinfer_router_failed_requests_total"] == 0
        finally:
            r.stop()
        rr = Router([a, b], "--policy", "round-robin")
        try:
            before = rr.per_engine("requests_total", [a, b])
            ask(rr.client(), "Tell me about rivers.")
            ask(rr.client(), "Tell me about rivers.")
            after = rr.per_engine("requests_total", [a, b])
            assert [x - y for x, y in zip(after, before)] == [1, 1]
        finally:
            rr.stop()
    finally:
        stop_all(a, b)


def test_a_killed_engine_loses_no_request():
    a, b = Server(), Server()
    r = Router([a, b], "--policy", "round-robin", "--down-ms", "600000")
    try:
        want = ask(a.client(), "Count to ten.", max_tokens=32)[0]
        with cf.ThreadPoolExecutor(6) as ex:
            futs = [ex.submit(ask, r.client(), "Count to ten.", 32) for _ in range(6)]
            deadline = time.time() + 60 * SLOW
            while a.metrics()["deepinfer_num_requests_running"] < 1 and time.time() < deadline:
                time.sleep(0.02)
            a.proc.kill()  # mid-run: requests are running on it
            outs = [f.result()[0] for f in futs]
        assert outs == [want] * 6
        m = r.metrics()
        assert m["deepinfer_router_retries_total"] >= 1, m
        assert m[f'deepinfer_router_engine_up{{engine="{a.base}"}}'] == 0
        assert m[f'deepinfer_router_engine_failures_total{{engine="{a.base}"}}'] >= 1
        assert m["deepinfer_router_failed_requests_total"] == 0, m
        # With both engines gone, a clean 503 (no hang).
        b.proc.kill()
        try:
            r.client().chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            raise AssertionError("expected 503")
        except openai.APIStatusError as e:
            assert e.status_code == 503
    finally:
        r.stop()
        for s in (a, b):
            if s.proc.poll() is None:
                s.proc.kill()
            s.proc.wait()
