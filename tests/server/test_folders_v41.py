"""DeepSeek-V4.1 folders DeepInfer 0.1.0's loader accepts, served (issue 28,
section 2): the no-Engram checkpoint (tests/data/golden/deepseek_v41/tiny_ne,
`engram_layer_ids: []`) answers, and a folder whose tokenizer.json is larger
than its logits (tiny_b's weights, 384 logits, with tiny's 512-token
tokenizer) loads and refuses, per request and with a 400, the prompts the
model cannot take (DeepInfer's add_request drops a prompt outside
[0, vocab)); a folder with its vision tower stripped does not start, with
DeepInfer's reason."""
import json
import subprocess
from pathlib import Path

import openai
import pytest

from conftest import BIN, Server

ROOT = Path(__file__).resolve().parents[2]
G = ROOT / "tests/data/golden/deepseek_v41"


def folder(tmp, weights, tokenizer, patch):
    """A folder of links to `weights`' shards, `tokenizer`'s tokenizer.json
    and `weights`' config.json changed by patch(config)."""
    tmp.mkdir()
    for f in weights.iterdir():
        if f.name.startswith("model"):
            (tmp / f.name).symlink_to(f.resolve())
    (tmp / "tokenizer.json").symlink_to((tokenizer / "tokenizer.json").resolve())
    cfg = json.loads((weights / "config.json").read_text())
    patch(cfg)
    (tmp / "config.json").write_text(json.dumps(cfg))
    return tmp


def no_engram(cfg):
    t = cfg["text_config"]
    for k in [k for k in t if k.startswith("engram_")]:
        del t[k]
    t["engram_layer_ids"] = []


@pytest.fixture(scope="module")
def bigtok(tmp_path_factory):
    d = folder(tmp_path_factory.mktemp("v41") / "bigtok", G / "tiny_b", G / "tiny", no_engram)
    srv = Server(model=str(d))
    yield srv
    assert srv.stop() == 0, "".join(srv.log[-40:])


def test_no_engram_checkpoint_serves():
    srv = Server(model=str(G / "tiny_ne"))
    try:
        c = srv.client()
        r = c.completions.create(model=c.models.list().data[0].id, prompt=[0, 17, 42], max_tokens=4, temperature=0)
        assert r.usage.completion_tokens == 4
    finally:
        assert srv.stop() == 0, "".join(srv.log[-40:])


def test_tokenizer_larger_than_logits_serves_ids_within(bigtok):
    c = bigtok.client()
    r = c.completions.create(model=c.models.list().data[0].id, prompt=[0, 17, 383], max_tokens=4, temperature=0)
    assert r.usage.completion_tokens == 4


def test_prompt_id_past_the_logits_is_400(bigtok):
    c = bigtok.client()
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=c.models.list().data[0].id, prompt=[0, 17, 400], max_tokens=2)
    assert "384" in str(e.value)


def test_text_prompt_past_the_logits_is_400_and_server_lives(bigtok):
    c = bigtok.client()
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=c.models.list().data[0].id, prompt=" STRASSE", max_tokens=2)
    assert "outside the model's vocabulary of 384" in str(e.value)
    r = c.completions.create(model=c.models.list().data[0].id, prompt=[0, 5], max_tokens=1, temperature=0)
    assert r.usage.completion_tokens == 1


def test_stripped_vision_tower_is_refused_at_start(tmp_path):
    vl = json.loads((G / "tiny_vl/config.json").read_text())

    def strip(cfg):
        cfg["vision_config"], cfg["image_token_id"] = vl["vision_config"], 4

    d = folder(tmp_path / "stripped", G / "tiny_b", G / "tiny_b", strip)
    p = subprocess.run([BIN, "serve", "-m", str(d), "--port", "0"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "holds no vision tower" in p.stderr
