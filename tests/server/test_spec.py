"""Speculative decoding behind the HTTP server: `serve --spec ngram` answers
a greedy request with the same text as the plain server, and /metrics
counts drafted, verified and accepted tokens, per position too."""
import pytest

from conftest import Server

MSG = [{"role": "user", "content": "Repeat exactly: red green blue, red green blue, red green blue, red green blue."}]


@pytest.fixture(scope="module")
def spec_server():
    srv = Server("--spec", "ngram", "--spec-k", "3")
    yield srv
    rc = srv.stop()
    assert rc == 0, "server exited %d:\n%s" % (rc, "".join(srv.log[-80:]))


def test_spec_output_equals_plain_and_metrics_count(spec_server, client):
    kw = dict(model=client.models.list().data[0].id, messages=MSG, max_tokens=24, temperature=0)
    want = client.chat.completions.create(**kw).choices[0].message.content
    got = spec_server.client().chat.completions.create(**kw).choices[0].message.content
    assert got == want
    m = spec_server.metrics()
    assert m["deepinfer_spec_decode_num_draft_tokens_total"] > 0
    assert m["deepinfer_spec_decode_num_verified_tokens_total"] > 0
    assert 0 <= m["deepinfer_spec_decode_acceptance_rate"] <= 1
    assert m['deepinfer_spec_decode_num_verified_tokens_per_pos_total{position="0"}'] > 0
    assert 'deepinfer_spec_decode_num_accepted_tokens_per_pos_total{position="0"}' in m
