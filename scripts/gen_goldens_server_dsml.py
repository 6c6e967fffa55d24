#!/usr/bin/env python3
# venv: v41
"""Goldens for the server's DeepSeek Chat Completions path
(src/server/dsml_chat.c): request bodies -> prompt token ids, and recorded
model outputs fed in pieces -> stream deltas and the final message.

Oracle: PyPI `deepseek-recipe` (pinned in scripts/requirements-v41.txt):
ChatCompletionRequest(body).convert(ConversionOptions()) then
DeepseekV4Encoding / DeepseekV41Encoding with the tiny_dsml tokenizer
(tests/data/golden/deepseek_v41/tiny_dsml/tokenizer.json, made by
scripts/gen_tiny_dsml.py) attached: .encode(conversation). A body the recipe
refuses is recorded with its error (the server must answer 400). Outputs go
through ChatCompletionRequest.chunk_generator + StreamProcessor, one text
chunk per piece (pieces: fixed-seed random splits), and the chunks'
deltas and ChatCompletionResponse.accumulate's message are recorded
(tool-call ids are random per call and left out).

The same for the Responses and Messages endpoints
(src/server/routes_protocols.c): ResponsesRequest / MessagesRequest bodies
-> convert -> encode ids (or the refusal), and outputs in pieces through
their chunk generators -> the event sequence, recorded as (type, delta
text) per event (ids, timestamps and the response objects' other fields
left out), and the accumulated answer's items / blocks.

Writes tests/data/golden/dsml/server_chat.json; checked by
tests/server/test_dsml_chat.c.

Usage: .venv-v41/bin/python scripts/gen_goldens_server_dsml.py
"""
import json
import os
import random

import deepseek_recipe as dr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden", "dsml", "server_chat.json")
TOK = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v41", "tiny_dsml", "tokenizer.json")
SEED = 2026
MODELS = {"v4": "DeepSeek-V4-Pro", "v41": "DeepSeek-V4.1-Flash"}

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "days": {"type": "integer"}},
                                                "required": ["city"]}}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
EVERY = {"type": "function", "function": {"name": "every_type", "description": "All parameter types.",
                                          "parameters": {"type": "object", "properties": {
                                              "s": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "number"},
                                              "i": {"type": "integer"}, "b": {"type": "boolean"},
                                              "a": {"type": "array", "items": {"type": "string"}},
                                              "o": {"type": "object", "properties": {"x": {"type": "null"}}}},
                                              "additionalProperties": False}}}
U = {"role": "user", "content": "What is the weather in Paris?"}
CALL_TURN = [U, {"role": "assistant", "content": None, "reasoning_content": "Need the tool.",
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
             {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}]
OFF = {"thinking": {"type": "disabled"}}
# a 1x1 PNG (the recipe does not decode images while rendering)
IMG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJ"
       "RU5ErkJggg==")
IMG_PART = {"type": "image_url", "image_url": {"url": IMG}}
IMG_B64 = IMG.split(",", 1)[1]

# (name, extra body fields); "messages" defaults to [U].
REQUESTS = [
    ("plain", {}),
    ("plain_no_thinking", OFF),
    ("effort_low", {"reasoning_effort": "low"}),
    ("effort_minimal", {"reasoning_effort": "minimal"}),
    ("effort_medium", {"reasoning_effort": "medium"}),
    ("effort_xhigh", {"reasoning_effort": "xhigh"}),
    ("effort_max", {"reasoning_effort": "max"}),
    ("effort_none", {"reasoning_effort": "none"}),
    ("system_twice", {"messages": [{"role": "system", "content": "Be brief."},
                                   {"role": "system", "content": "Answer in French."}, U]}),
    ("text_parts", {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                              {"type": "text", "text": "b"}]}]}),
    ("multi_turn", {"messages": [U, {"role": "assistant", "content": "Sunny.", "reasoning_content": "Guess."},
                                 {"role": "user", "content": "And tomorrow?"}]}),
    ("multi_turn_no_thinking", dict(OFF, messages=[U, {"role": "assistant", "content": "Sunny."},
                                                   {"role": "user", "content": "And tomorrow?"}])),
    ("tools_auto", {"tools": [WEATHER, NOW]}),
    ("tools_every_type", {"tools": [EVERY]}),
    ("tools_none", {"tools": [WEATHER], "tool_choice": "none"}),
    ("tools_required", dict(OFF, tools=[WEATHER, NOW], tool_choice="required")),
    ("tools_named", dict(OFF, tools=[WEATHER, NOW], tool_choice={"type": "function", "function": {"name": "now"}})),
    ("tools_parallel_false", {"tools": [WEATHER], "parallel_tool_calls": False}),
    ("tool_result", {"tools": [WEATHER], "messages": CALL_TURN}),
    ("tool_result_no_thinking", dict(OFF, tools=[WEATHER], messages=CALL_TURN)),
    ("json_object", dict(OFF, response_format={"type": "json_object"},
                         messages=[{"role": "user", "content": "Reply in JSON."}])),
    ("bad_json_object_no_json_word", dict(OFF, response_format={"type": "json_object"})),
    # refused by the recipe: the server answers 400
    ("bad_required_thinking", {"tools": [WEATHER], "tool_choice": "required"}),
    ("bad_tool_name", {"tools": [{"type": "function", "function": {"name": "a b"}}]}),
    ("bad_tool_schema_type", {"tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": 7}}}]}),
    ("bad_tool_schema_props", {"tools": [{"type": "function", "function": {
        "name": "a", "parameters": {"type": "object", "properties": {"x": 5}}}}]}),
    ("bad_tool_schema_required", {"tools": [{"type": "function", "function": {
        "name": "a", "parameters": {"type": "object", "required": "x"}}}]}),
    ("bad_tool_schema_not_object", {"tools": [{"type": "function", "function": {
        "name": "a", "parameters": {"type": "string"}}}]}),
    ("bad_duplicate_tools", {"tools": [NOW, NOW]}),
    ("bad_content_part", {"messages": [{"role": "user", "content": [{"type": "audio", "x": 1}]}]}),
    ("bad_effort", {"reasoning_effort": "huge"}),
    # images: the <｜image｜> placeholder per image_url part (V4: the text
    # "[Unsupported Image]"); the same spelling written as text stays text
    ("image_parts", {"messages": [{"role": "user", "content": [IMG_PART, {"type": "text", "text": "Describe it"}]}]}),
    ("image_between_text", {"tools": [WEATHER], "messages": [{"role": "user", "content": [
        {"type": "text", "text": "A"}, IMG_PART, {"type": "text", "text": "B"}, IMG_PART]}]}),
    ("image_literal_placeholder", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "see <｜image｜> here"}, IMG_PART]}]}),
    ("image_in_tool_result", dict(OFF, tools=[WEATHER], messages=CALL_TURN[:2] + [
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "{\"temp\": 21}"}, IMG_PART]}])),
    ("image_in_assistant",  # V4: text; V4.1: refused
      {"messages": [U, {"role": "assistant", "content": [IMG_PART]}, U]}),
    ("bad_image_url_string", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": IMG}]}]}),
]

CALL_V4 = ("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
           "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
           "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
           "<｜DSML｜invoke name=\"now\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
# (name, request, output written with V4's DSML words)
OUTPUTS = [
    ("answer", "plain", "Let me see.</think>It is sunny in Paris."),
    ("answer_no_thinking", "plain_no_thinking", "It is sunny.\n\nReally."),
    ("reasoning_only", "plain", "Still thinking"),
    ("tool_calls", "tools_auto", "I need the tool.</think>Checking.\n\n" + CALL_V4),
    ("tool_calls_no_text", "tools_auto", "t</think>" + CALL_V4),
    ("tool_calls_required", "tools_required", CALL_V4[len("<｜DSML｜tool_calls>\n"):]),
    ("tools_none_plain", "tools_none", "t</think>No tools: " + CALL_V4[:30]),
    ("unicode", "plain", "ü</think>日本語 ✓"),
]

# Outputs whose chunk boundaries (not their text) src/text/dsml_parse.c does
# not reproduce; the test compares their deltas joined per kind and says so.
KNOWN = {
    "tools_none_plain": "without tool parsing the recipe shows a piece-final '<' at once; dsml_parse holds it "
                        "(and the newlines before it) for the next piece, as a possible '</think>'",
}

RESP_TOOL = {"type": "function", "name": "get_weather", "description": "Weather of a city.",
             "parameters": WEATHER["function"]["parameters"]}
MSG_TOOL = {"name": "get_weather", "description": "Weather of a city.", "input_schema": WEATHER["function"]["parameters"]}
# (endpoint, name, body without "model")
PROTO_REQUESTS = [
    ("responses", "resp_plain", {"input": "What is the weather in Paris?"}),
    ("responses", "resp_instructions", {"input": "Hi", "instructions": "Be brief.", "reasoning": {"effort": "low"}}),
    ("responses", "resp_no_thinking", {"input": "Hi", "reasoning": {"effort": "none"}}),
    ("responses", "resp_items", {"tools": [RESP_TOOL], "input": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                        {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "id": "r1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need it."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "21"}]}),
    ("responses", "resp_named", {"input": "Hi", "reasoning": {"effort": "none"}, "tools": [RESP_TOOL],
                                 "tool_choice": {"type": "function", "name": "get_weather"}}),
    ("responses", "resp_bad_item", {"input": [{"type": "computer_call", "id": "x"}]}),
    ("responses", "resp_bad_part", {"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
    ("messages", "msg_plain", {"max_tokens": 50, "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]}),
    ("messages", "msg_blocks", {"max_tokens": 50, "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
                                "messages": [{"role": "user", "content": [{"type": "text", "text": "x"},
                                                                          {"type": "text", "text": "y"}]}]}),
    ("messages", "msg_thinking_off", {"max_tokens": 50, "thinking": {"type": "disabled"},
                                      "messages": [{"role": "user", "content": "Hi"}]}),
    ("messages", "msg_tools", {"max_tokens": 50, "tools": [MSG_TOOL], "tool_choice": {"type": "any"}, "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Need it.", "signature": "s"},
                                          {"type": "text", "text": "ok"},
                                          {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "21"},
                                     {"type": "text", "text": "more"}]}]}),
    ("messages", "msg_tool_named", {"max_tokens": 50, "thinking": {"type": "disabled"}, "tools": [MSG_TOOL],
                                    "tool_choice": {"type": "tool", "name": "get_weather"},
                                    "messages": [{"role": "user", "content": "Hi"}]}),
    ("messages", "msg_bad_block", {"max_tokens": 50, "messages": [{"role": "user", "content": [{"type": "audio"}]}]}),
    # images: Responses input_image parts, Messages image blocks (base64)
    ("responses", "resp_image_after_text", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What?"}, {"type": "input_image", "image_url": IMG}]}]}),
    ("responses", "resp_image_first", {"input": [{"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": IMG, "detail": "auto"}, {"type": "input_text", "text": "What?"}]}]}),
    ("responses", "resp_image_in_tool_output", {"tools": [RESP_TOOL], "input": [
        {"role": "user", "content": "Look"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "map"}, {"type": "input_image", "image_url": IMG}]}]}),
    ("responses", "resp_image_file_id", {"input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-1"}]}]}),
    ("responses", "resp_image_remote", {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://example.com/a.png"}]}]}),
    ("messages", "msg_image", {"max_tokens": 50, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMG_B64}},
        {"type": "text", "text": "What?"}]}]}),
    ("messages", "msg_image_between_text", {"max_tokens": 50, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "A"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMG_B64}},
        {"type": "text", "text": "B"}]}]}),
    ("messages", "msg_image_in_tool_result", {"max_tokens": 50, "tools": [MSG_TOOL], "messages": [
        {"role": "user", "content": "Look"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "map"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMG_B64}}]}]}]}),
    ("messages", "msg_image_remote", {"max_tokens": 50, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}),
    ("messages", "msg_image_in_assistant", {"max_tokens": 50, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                         "data": IMG_B64}}]},
        {"role": "user", "content": "Again"}]}),
    ("messages", "msg_text_and_image_in_assistant", {"max_tokens": 50, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "See"},
                                          {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                       "data": IMG_B64}},
                                          {"type": "text", "text": "this"}]},
        {"role": "user", "content": "Again"}]}),
]
# (endpoint, name, request, output with V4's DSML words)
PROTO_OUTPUTS = [
    ("responses", "resp_answer", "resp_plain", "Let me see.</think>It is sunny."),
    ("responses", "resp_calls", "resp_items", "I need the tool.</think>Checking.\n\n" + CALL_V4),
    ("messages", "msg_answer", "msg_plain", "Let me see.</think>It is sunny."),
    ("messages", "msg_calls", "msg_tools", "I need the tool.</think>Checking.\n\n" + CALL_V4),
    ("messages", "msg_no_thinking", "msg_thinking_off", "Just text."),
]
PROTO = {"responses": dr.ResponsesRequest, "messages": dr.MessagesRequest}
# Bodies the recipe accepts that the server refuses on purpose (the test
# expects a 400 and says why).
KNOWN_PROTO = {
    "resp_image_file_id": "V4's recipe writes [Unsupported Image] for any image part; the server refuses a file_id "
                          "image on both versions (it reads no files; V4.1's recipe refuses it too)",
    "resp_image_remote": "the recipe takes a remote image URL; the server fetches nothing (400 asking for a data: URL)",
    "msg_image_remote": "the recipe takes a url image source; the server fetches nothing (400 asking for a data: URL)",
    "resp_bad_item": "the recipe drops input items of unknown types; the server refuses them (400 naming the type)",
}


def proto_body(key, endpoint, name):
    body = {"model": MODELS[key]}
    body.update({n: b for e, n, b in PROTO_REQUESTS}[name])
    return body


def proto_encode(key, endpoint, name, tok):
    try:
        req = PROTO[endpoint](proto_body(key, endpoint, name)).convert(dr.ConversionOptions())
    except Exception as e:
        return {"error": str(e)}
    enc = (dr.DeepseekV4Encoding() if key == "v4" else dr.DeepseekV41Encoding()).with_tokenizer(tok)
    return {"ids": enc.encode(req.conversation), "prompt": enc.render_conversation(req.conversation).prompt}


def simple_event(ev):
    """(type, the event's delta text) of one Responses / Messages event."""
    d = ev.get("delta")
    if isinstance(d, dict):
        d = d.get("text", d.get("thinking", d.get("partial_json")))
    out = {"type": ev["type"]}
    if isinstance(d, str):
        out["delta"] = d
    if ev["type"] == "content_block_start":
        out["block"] = ev["content_block"]["type"]
    if ev["type"] == "response.output_item.added":
        out["item"] = ev["item"]["type"]
    return out


def proto_stream(key, endpoint, name, text, cuts):
    body = proto_body(key, endpoint, name)
    body["stream"] = True
    R = PROTO[endpoint]
    req = R(body).convert(dr.ConversionOptions())
    gen = R.chunk_generator(req, "id", MODELS[key])
    sp = dr.StreamProcessor(gen, req.parsing_options)
    out = sp.push(dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(prompt_tokens=1)))
    last = 0
    for c in list(cuts) + [len(text)]:
        if c > last:
            out += sp.push(dr.InferenceChunk.text(text[last:c], 1))
        last = c
    out += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))
    out += sp.finish()
    events = [simple_event(json.loads(o.to_json())) for o in out]
    return {"events": events}


def variant(text, key):
    if key == "v4":
        return text
    return (text.replace("｜DSML｜tool_calls", "｜DSML｜ calls").replace("｜DSML｜invoke", "｜DSML｜ invoke")
            .replace("｜DSML｜parameter", "｜DSML｜ parameter"))


def body_of(key, name):
    extra = dict(dict(REQUESTS)[name])
    body = {"model": MODELS[key], "messages": [U]}
    body.update(extra)
    return body


def encode(key, name, tok):
    try:
        req = dr.ChatCompletionRequest(body_of(key, name)).convert(dr.ConversionOptions())
    except Exception as e:  # the recipe's ConversionError / body errors
        return {"error": str(e)}
    enc = (dr.DeepseekV4Encoding() if key == "v4" else dr.DeepseekV41Encoding()).with_tokenizer(tok)
    return {"ids": enc.encode(req.conversation), "prompt": enc.render_conversation(req.conversation).prompt}


def stream(key, name, text, cuts):
    body = body_of(key, name)
    body["stream"] = True
    req = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions())
    gen = dr.ChatCompletionRequest.chunk_generator(req, "id", MODELS[key])
    sp = dr.StreamProcessor(gen, req.parsing_options)
    out = sp.push(dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(prompt_tokens=1)))
    last = 0
    for c in list(cuts) + [len(text)]:
        if c > last:
            out += sp.push(dr.InferenceChunk.text(text[last:c], 1))
        last = c
    out += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))
    out += sp.finish()
    resp = dr.ChatCompletionResponse("id", MODELS[key], 0, 1, 0)
    deltas = []
    for o in out:
        j = json.loads(o.to_json())
        resp.accumulate(o)
        for ch in j["choices"]:
            d = ch["delta"]
            for tc in d.get("tool_calls") or []:
                tc.pop("id", None)
            deltas.append(d)
    ch = json.loads(resp.to_json())["choices"][0]
    msg = ch["message"]
    for tc in msg.get("tool_calls") or []:
        tc.pop("id", None)
        tc.pop("index", None)
    return {"deltas": deltas, "message": msg, "finish_reason": ch["finish_reason"]}


def main():
    rng = random.Random(SEED)
    tok = dr.Tokenizer.from_file(TOK)
    requests, outputs = [], []
    for key in ("v4", "v41"):
        for name, _ in REQUESTS:
            requests.append(dict(model=key, name=name, body=body_of(key, name), **encode(key, name, tok)))
        for name, req, base in OUTPUTS:
            text = variant(base, key)
            n = len(text.encode("utf-8"))
            for split in range(3):
                # piece boundaries in characters (the recipe takes str pieces)
                k = rng.randint(1, 10) if split else 0
                cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, k))) if k else []
                pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
                case = dict(model=key, name=name, request=req, body=body_of(key, req), pieces=pieces, bytes=n,
                            **stream(key, req, text, cuts))
                if name in KNOWN:
                    case["known_difference"] = KNOWN[name]
                outputs.append(case)
    protos, proto_outputs = [], []
    for key in ("v4", "v41"):
        for endpoint, name, _ in PROTO_REQUESTS:
            case = dict(model=key, endpoint=endpoint, name=name, body=proto_body(key, endpoint, name),
                        **proto_encode(key, endpoint, name, tok))
            if name in KNOWN_PROTO:
                case["known_difference"] = KNOWN_PROTO[name]
            protos.append(case)
        for endpoint, name, req, base in PROTO_OUTPUTS:
            text = variant(base, key)
            for split in range(2):
                k = rng.randint(1, 10) if split else 0
                cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, k))) if k else []
                pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
                proto_outputs.append(dict(model=key, endpoint=endpoint, name=name, request=req,
                                          body=proto_body(key, endpoint, req), pieces=pieces,
                                          **proto_stream(key, endpoint, req, text, cuts)))
    doc = {"oracle": "deepseek-recipe %s ChatCompletionRequest.convert + DeepseekV4(1)Encoding.encode; "
                     "StreamProcessor + ChatCompletionResponse" % dr.__version__,
           "script": "scripts/gen_goldens_server_dsml.py", "seed": SEED, "tokenizer": os.path.relpath(TOK, ROOT),
           "requests": requests, "outputs": outputs, "proto_requests": protos, "proto_outputs": proto_outputs}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("wrote", OUT, len(requests), "requests", len(outputs), "outputs")


if __name__ == "__main__":
    main()
