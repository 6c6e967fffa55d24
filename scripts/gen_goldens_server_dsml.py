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
    doc = {"oracle": "deepseek-recipe %s ChatCompletionRequest.convert + DeepseekV4(1)Encoding.encode; "
                     "StreamProcessor + ChatCompletionResponse" % dr.__version__,
           "script": "scripts/gen_goldens_server_dsml.py", "seed": SEED, "tokenizer": os.path.relpath(TOK, ROOT),
           "requests": requests, "outputs": outputs}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("wrote", OUT, len(requests), "requests", len(outputs), "outputs")


if __name__ == "__main__":
    main()
