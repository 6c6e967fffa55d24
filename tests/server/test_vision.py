"""Images through the official `openai` client: chat content parts with
image_url data: URLs on the tiny DeepSeek-V4.1 vision checkpoint (tiny_vl).
The answer equals `deepinfer run --image` on the same image and text (one
process, no cache), also after another image with the same text was served
(the image bytes are in the prefix-cache key); remote URLs, bad base64, a
corrupt image and images on a text-only model are 400s."""
import base64
import subprocess
from pathlib import Path

import openai
import pytest

from conftest import BIN, Server

ROOT = Path(__file__).resolve().parents[2]
VL = ROOT / "tests/data/golden/deepseek_v41/tiny_vl"
IMAGES = ROOT / "tests/data/golden/vision/images"
TEXT = "Describe it"


def data_url(name, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode((IMAGES / name).read_bytes()).decode()


def chat(client, url, text=TEXT, n=8):
    return client.chat.completions.create(
        model=client.models.list().data[0].id, max_tokens=n, temperature=0, seed=1,
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                               {"type": "text", "text": text}]}])


def cli(name, text=TEXT, n=8):
    out = subprocess.run([BIN, "run", "-m", str(VL), "--image", str(IMAGES / name), "-p", "\n" + text, "-n", str(n),
                          "--temp", "0", "--seed", "1"], capture_output=True, text=True, timeout=300, check=True)
    return out.stdout.rstrip("\n")


@pytest.fixture(scope="module")
def vl():
    srv = Server("--max-body-bytes", str(2 << 20), model=str(VL))
    yield srv
    assert srv.stop() == 0, "".join(srv.log[-40:])


def test_image_chat_matches_cli_and_counts_image_tokens(vl):
    c = vl.client()
    r = chat(c, data_url("rgb_40x30.png"))
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8
    # rgb_40x30 is 10 image positions (gen_goldens_vision.py); the text is a few tokens
    plain = c.chat.completions.create(model=c.models.list().data[0].id, max_tokens=1, temperature=0,
                                      messages=[{"role": "user", "content": "\n" + TEXT}])
    assert r.usage.prompt_tokens == plain.usage.prompt_tokens + 10 - 0
    assert r.choices[0].message.content == cli("rgb_40x30.png")


def test_same_text_other_image_is_not_a_prefix_hit(vl):
    c = vl.client()
    chat(c, data_url("rgb_40x30.png"))
    other = chat(c, data_url("interlaced_31x23.png"))  # also 10 image positions: the same ids
    assert other.choices[0].message.content == cli("interlaced_31x23.png")
    again = chat(c, data_url("interlaced_31x23.png"))
    assert again.choices[0].message.content == other.choices[0].message.content


def test_jpeg_and_webp_data_urls(vl):
    c = vl.client()
    assert chat(c, data_url("jpeg_80x60_q90.jpg", "image/jpeg")).usage.completion_tokens == 8
    assert chat(c, data_url("webp_lossy_66x44.webp", "image/webp")).usage.completion_tokens == 8


def test_remote_url_refused(vl):
    with pytest.raises(openai.BadRequestError) as e:
        chat(vl.client(), "https://example.com/cat.png")
    assert "data: URL" in str(e.value)


@pytest.mark.parametrize("url", ["data:image/png;base64,@@@@", "data:image/png,rawbytes", "data:image/png;base64,",
                                 "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 40).decode()])
def test_bad_data_urls_are_400(vl, url):
    with pytest.raises(openai.BadRequestError):
        chat(vl.client(), url)


def test_truncated_image_is_400_and_server_lives(vl):
    blob = (IMAGES / "rgb_300x200.png").read_bytes()[:500]
    with pytest.raises(openai.BadRequestError) as e:
        chat(vl.client(), "data:image/png;base64," + base64.b64encode(blob).decode())
    assert "image" in str(e.value)
    assert chat(vl.client(), data_url("rgb_40x30.png")).usage.completion_tokens == 8


def test_text_only_model_refuses_images(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, data_url("rgb_40x30.png"))
    assert "no images" in str(e.value)


# ---- images on DeepSeek's protocol path (dsml_chat.c) ----------------------

VL_DSML = ROOT / "tests/data/golden/deepseek_v41/tiny_vl_dsml"
FORECAST = {"type": "function", "function": {"name": "forecast", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer", "minimum": 1,
                                                                                   "maximum": 9}},
    "required": ["city"], "additionalProperties": False}}}
OFF = {"thinking": {"type": "disabled"}}


@pytest.fixture(scope="module")
def vl_dsml():
    """The vision checkpoint with the protocol's tokens (scripts/gen_tiny_dsml.py):
    its chats take the DSML path (tools, reasoning) and images together."""
    srv = Server("-c", "2048", "--max-body-bytes", str(2 << 20), model=str(VL_DSML))
    yield srv
    assert srv.stop() == 0, "".join(srv.log[-40:])


def dsml_chat(c, content, n=8, **kw):
    return c.chat.completions.create(model="tiny_vl_dsml", max_tokens=n, temperature=0, seed=1,
                                     messages=[{"role": "user", "content": content}], **kw)


def test_images_on_the_protocol_path(vl_dsml):
    c = vl_dsml.client()
    img = {"type": "image_url", "image_url": {"url": data_url("rgb_40x30.png")}}
    r = dsml_chat(c, [img, {"type": "text", "text": TEXT}], extra_body=OFF, tools=[FORECAST])
    assert r.usage.completion_tokens == 8 and r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    # the recipe's rendering: <｜image｜> then "\n\n" + text; the placeholder
    # becomes the image's 10 positions (as on the template path above)
    plain = dsml_chat(c, "\n\n" + TEXT, n=1, extra_body=OFF, tools=[FORECAST])
    assert r.usage.prompt_tokens == plain.usage.prompt_tokens + 10 - 0
    # the pixels reach the model: the same image answers the same, another
    # image of the same size (the same ids) another way
    again = dsml_chat(c, [img, {"type": "text", "text": TEXT}], extra_body=OFF, tools=[FORECAST])
    assert again.choices[0].message == r.choices[0].message
    other = dsml_chat(c, [{"type": "image_url", "image_url": {"url": data_url("interlaced_31x23.png")}},
                          {"type": "text", "text": TEXT}], extra_body=OFF, tools=[FORECAST])
    assert other.usage.prompt_tokens == r.usage.prompt_tokens
    assert other.choices[0].message != r.choices[0].message
    # thinking on: the output is parsed as reasoning (no </think> from random weights)
    t = dsml_chat(c, [img, {"type": "text", "text": TEXT}])
    assert t.usage.prompt_tokens > 10 and "reasoning_content" in t.choices[0].message.model_extra


def test_image_with_a_required_tool(vl_dsml):
    """Vision and the tool-call grammar in one request: random weights see
    the image and must still call the tool with valid arguments."""
    jsonschema = pytest.importorskip("jsonschema")
    import json
    c = vl_dsml.client()
    r = dsml_chat(c, [{"type": "text", "text": "Where is this?"},
                      {"type": "image_url", "image_url": {"url": data_url("rgb_56x56.png")}}], n=200,
                  tools=[FORECAST], tool_choice="required", parallel_tool_calls=False, extra_body=OFF)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    (call,) = ch.message.tool_calls
    assert call.function.name == "forecast"
    jsonschema.validate(json.loads(call.function.arguments), FORECAST["function"]["parameters"])


def test_protocol_path_image_errors(vl_dsml):
    c = vl_dsml.client()
    with pytest.raises(openai.BadRequestError) as e:  # remote URLs are never fetched
        dsml_chat(c, [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}])
    assert "data: URL" in str(e.value)
    with pytest.raises(openai.BadRequestError):  # the recipe refuses images in assistant turns
        c.chat.completions.create(model="tiny_vl_dsml", max_tokens=2, messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": data_url("rgb_1x1.png")}}]},
            {"role": "user", "content": "and?"}])
    with pytest.raises(openai.BadRequestError):
        dsml_chat(c, [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@@"}}])


def test_images_in_responses_and_messages(vl_dsml):
    """Responses input_image parts and Messages image blocks (base64) take
    the same path as a chat's image_url part: the same prompt (token count)
    and the same greedy answer; another image of the same size answers
    another way, so the pixels arrive."""
    import anthropic
    c = vl_dsml.client()
    b64 = data_url("rgb_40x30.png").split(",", 1)[1]

    def via_chat(url):
        r = dsml_chat(c, [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": TEXT}],
                      extra_body=OFF)
        return r.usage.prompt_tokens, r.choices[0].message.content

    def via_responses(url):
        r = c.responses.create(model="tiny_vl_dsml", max_output_tokens=8, temperature=0,
                               reasoning={"effort": "none"},
                               input=[{"role": "user", "content": [{"type": "input_image", "image_url": url},
                                                                   {"type": "input_text", "text": TEXT}]}])
        return r.usage.input_tokens, r.output_text

    chat_rgb = via_chat(data_url("rgb_40x30.png"))
    assert via_responses(data_url("rgb_40x30.png")) == chat_rgb
    other = via_responses(data_url("interlaced_31x23.png"))
    assert other[0] == chat_rgb[0] and other == via_chat(data_url("interlaced_31x23.png")) and other != chat_rgb
    a = anthropic.Anthropic(base_url=vl_dsml.base, api_key=c.api_key, max_retries=0, timeout=c.timeout)
    m = a.messages.create(model="tiny_vl_dsml", max_tokens=8, extra_body={"temperature": 0},
                          thinking={"type": "disabled"},
                          messages=[{"role": "user", "content": [
                              {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
                              {"type": "text", "text": TEXT}]}])
    text = "".join(b.text for b in m.content if b.type == "text")
    assert (m.usage.input_tokens, text) == chat_rgb
    # remote images are never fetched, in either shape
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="tiny_vl_dsml", max_output_tokens=2, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/a.png"}]}])
    assert "data: URL" in str(e.value)
    with pytest.raises(anthropic.BadRequestError):
        a.messages.create(model="tiny_vl_dsml", max_tokens=2, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}])
