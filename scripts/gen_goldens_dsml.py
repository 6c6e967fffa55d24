#!/usr/bin/env python3
# venv: v41
"""DeepSeek V4 / V4.1 conversation rendering + encoding goldens.

Oracle: PyPI `deepseek-recipe` (DeepSeek, MIT; pinned in
scripts/requirements-v41.txt): DeepseekV4Encoding and DeepseekV41Encoding
.render_conversation (prompt text and special-token ranges) and .encode
with a tokenizer attached. src/text/dsml_render.c must reproduce all three.

Corpus: hand-written conversations plus random ones (fixed seed): system
messages anywhere, multi-turn, thinking on/off, every reasoning effort,
tools with every JSON Schema parameter type, tool_choice auto/none/required,
response formats, assistant tool calls (object, non-object and invalid
arguments) and tool results, reasoning present/empty/absent (the recipe
decides what is kept), prefix continuations, latest_reminder messages and
image placeholders. An assistant turn with tool calls is followed by one
result per call, in order, as clients send them (V4 moves results that
arrive later, after other turns, in a way this corpus does not cover), and
prefix continuations carry text, not tool calls (how V4 opens or closes the
thought of a prefix turn with calls is not covered either).

The tokenizer: tests/data/golden/deepseek_v41/tiny/tokenizer.json (512
byte-level BPE tokens) with DeepSeek's special tokens added (the tiny
checkpoints' own tokenizers lack <｜User｜> etc., which encode() needs);
written to tests/data/golden/dsml/tokenizer.json.

Conversation JSON (the shape src/text/dsml_conv.c reads, close to Chat
Completions): {thinking, reasoning_effort, tool_choice, tools:[{type,
function:{name, description, parameters}}], response_format, messages:[{role,
content, reasoning_content, tool_calls:[{id, type, function:{name,
arguments}}], tool_call_id, prefix, images, tools}]}.

Usage: .venv-v41/bin/python scripts/gen_goldens_dsml.py
"""
import json
import os
import random

import deepseek_recipe as dr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "data", "golden", "dsml")
TINY_TOK = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v41", "tiny", "tokenizer.json")
SEED = 20
N_RANDOM = 140
IMG = "<｜image｜>"

SPECIALS = ["Bos", "Eos", "ThinkingStart", "ThinkingEnd", "System", "User", "Assistant", "LatestReminder",
            "Dsml", "Image", "Ref", "RefEnd", "Box", "BoxEnd", "Point", "PointEnd", "Polygon", "PolygonEnd"]


def build_tokenizer():
    with open(TINY_TOK, encoding="utf-8") as f:
        doc = json.load(f)
    have = {a["content"] for a in doc["added_tokens"]}
    next_id = max([a["id"] for a in doc["added_tokens"]] + list(doc["model"]["vocab"].values())) + 1
    for name in SPECIALS:
        s = getattr(dr.SpecialToken, name).default_str()
        if s in have:
            continue
        doc["added_tokens"].append({"id": next_id, "content": s, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
        next_id += 1
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    return path


# ---- the tool pool: every parameter type ------------------------------------
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "detail": {"type": "boolean"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web \"exactly\".\nTwo lines.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "limit": {"type": "number", "default": 0.5},
            "tags": {"type": "array", "items": {"type": "string"}},
            "filters": {"type": "object", "properties": {"lang": {"type": "string"}, "since": {"type": ["string", "null"]}}},
            "mode": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "big": {"type": "number", "default": 1e20},
            "one": {"type": "number", "default": 1.0}},
            "required": ["query"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "now"}},
    {"type": "function", "function": {"name": "ping_ü", "description": "", "parameters": {"type": "object", "properties": {}}}},
]

ARGS = [
    '{"city": "Paris"}',
    '{"city":"Zürich","days":3,"unit":"celsius","detail":true}',
    '{"query": "a <b> & \\"c\\"", "limit": 0.1, "tags": ["x", "y"], "filters": {"lang": "en", "since": null}}',
    '{"mode": 7, "big": 1e20, "one": 1.0, "neg": -0.0, "exp": 2.5e-8}',
    '{"text": "line1\\nline2\\t\\u0001 ✓"}',
    '{}',
    '[1, 2]',
    'not json',
    '',
    '"just a string"',
    '{"nested": {"a": [1, {"b": false}], "c": "d"}, "e": []}',
]

TEXTS = ["Hi", "What's the weather in Paris?", "", "Line one\nLine two\n", "ünïcödé ✓ 日本語",
         "literal <think> and </think> tags", "literal <｜User｜> token text", "  spaced  ",
         "tool_calls <｜DSML｜tool_calls> text", "\n\nleading newlines", "Sure."]

REASONING = [None, "", "Let me think.", "Multi\nline reasoning ✓"]


def tool_msg_content(rng):
    return rng.choice(["Sunny, 21°C", '{"temp": 21}', "", "error: timeout", "result\nwith lines"])


def pending_calls(msgs):
    """Calls of the last calling assistant turn not answered yet (a client
    answers every call, in order, before anything else)."""
    answered = 0
    for x in reversed(msgs):
        if x["role"] == "tool":
            answered += 1
        elif x.get("tool_calls"):
            return len(x["tool_calls"]) - answered
        else:
            return 0
    return 0


def random_case(rng):
    conv = {"thinking": rng.random() < 0.6}
    if rng.random() < 0.6:
        conv["reasoning_effort"] = rng.choice(["low", "high", "xhigh", "max"])
    if rng.random() < 0.55:
        conv["tools"] = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
        conv["tool_choice"] = rng.choice(["auto", "auto", "none", "required"])
    r = rng.random()
    if r < 0.1:
        conv["response_format"] = {"type": "json_object"}
    elif r < 0.15:
        conv["response_format"] = {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}
    elif r < 0.18:
        conv["response_format"] = {"type": "regex", "regex": "[a-z]+"}
    msgs = []
    n = rng.randint(0, 7)
    for i in range(n):
        role = rng.choice(["system", "user", "user", "assistant", "assistant", "tool", "latest_reminder"])
        # Tool results only where a client sends them: right after an
        # assistant turn with tool calls or another tool result (V4 reorders
        # results that arrive after a later assistant turn; not modelled).
        if role == "tool" and not pending_calls(msgs):
            role = "user"
        if pending_calls(msgs):
            role = "tool"
        m = {"role": role}
        if role == "assistant":
            m["content"] = rng.choice(TEXTS)
            rc = rng.choice(REASONING)
            if rc is not None:
                m["reasoning_content"] = rc
            if rng.random() < 0.45:
                m["tool_calls"] = [{"id": "call_%d_%d" % (i, k), "type": "function",
                                    "function": {"name": rng.choice(["get_weather", "search", "now", "x"]),
                                                 "arguments": rng.choice(ARGS)}}
                                   for k in range(rng.randint(1, 3))]
            if i == n - 1 and rng.random() < 0.35:
                m["prefix"] = True  # a continuation of text: no tool calls
                m.pop("tool_calls", None)
        elif role == "tool":
            m["content"] = tool_msg_content(rng)
            # the id of the next unanswered call of the last calling turn
            caller = next(x for x in reversed(msgs) if x.get("tool_calls"))
            answered = 0
            for x in reversed(msgs):
                if x["role"] != "tool":
                    break
                answered += 1
            calls = caller["tool_calls"]
            m["tool_call_id"] = calls[answered]["id"]
            if rng.random() < 0.15:
                m["content"] += " " + IMG
                m["images"] = 1
        elif role == "user":
            m["content"] = rng.choice(TEXTS)
            if rng.random() < 0.2:
                k = rng.randint(1, 2)
                m["content"] = m["content"] + (" " + IMG) * (k + rng.randint(0, 1))
                m["images"] = k
        elif role == "system":
            m["content"] = rng.choice(TEXTS)
            if rng.random() < 0.15:
                m["tools"] = rng.sample(TOOLS, 1)
        else:
            m["content"] = rng.choice(TEXTS)
        msgs.append(m)
    conv["messages"] = msgs
    return conv


def U(c, **kw):
    return dict(role="user", content=c, **kw)


def A(c, **kw):
    return dict(role="assistant", content=c, **kw)


def S(c, **kw):
    return dict(role="system", content=c, **kw)


def T(c, i):
    return dict(role="tool", content=c, tool_call_id=i)


def TC(i, name, args):
    return {"id": i, "type": "function", "function": {"name": name, "arguments": args}}


HAND = [
    {"thinking": False, "messages": [U("Hi")]},
    {"thinking": True, "messages": [U("Hi")]},
    {"thinking": True, "messages": []},
    {"thinking": False, "messages": [S("Be brief."), U("Hi"), A("Hello!"), U("Why is the sky blue?")]},
    {"thinking": True, "reasoning_effort": "max", "messages": [S("s"), U("q1"), A("a1", reasoning_content="r1"), U("q2")]},
    {"thinking": True, "reasoning_effort": "low", "messages": [U("q1"), A("a1", reasoning_content="r1", prefix=True)]},
    {"thinking": True, "tools": TOOLS, "messages": [
        S("You are helpful."), U("Weather in Paris?"),
        A("", reasoning_content="Need the tool.", tool_calls=[TC("call_1", "get_weather", ARGS[1]), TC("call_2", "search", ARGS[2])]),
        T("Sunny 20C", "call_1"), T("3 results", "call_2"), A("It is sunny.", reasoning_content="Got it."), U("And London?")]},
    {"thinking": False, "tools": TOOLS[:1], "messages": [
        U("q"), A("", tool_calls=[TC("c", "get_weather", ARGS[0])]), T("r", "c"), U("more")]},
    {"thinking": True, "tools": TOOLS[:2], "tool_choice": "required", "messages": [U("Search cats")]},
    {"thinking": False, "tools": TOOLS[:2], "tool_choice": "required", "messages": [U("Search cats")]},
    {"thinking": False, "tools": TOOLS[:2], "tool_choice": "none", "messages": [U("Search cats")]},
    {"thinking": False, "messages": [U("a"), S("S2"), U("b")]},
    {"thinking": True, "messages": [U("q1"), {"role": "latest_reminder", "content": "remember"}]},
    {"thinking": False, "messages": [U("see " + IMG + " and " + IMG, images=1)]},
    {"thinking": False, "messages": [U("q"), dict(role="tool", content="r " + IMG, tool_call_id="1", images=1)]},
    {"thinking": False, "response_format": {"type": "json_object"}, "messages": [U("q")]},
    {"thinking": False, "messages": [S("s", tools=TOOLS[:1]), U("q")]},
]


def to_recipe(conv):
    def tool_defs(lst):
        return [dr.ToolDefinition(t["function"]["name"], t["function"].get("description"),
                                  t["function"].get("parameters")) for t in lst]

    def images(m):
        return [dr.DataUrlImageSource("data:image/png;base64,AAAA") for _ in range(m.get("images", 0))]

    msgs = []
    for m in conv["messages"]:
        r = m["role"]
        if r == "system":
            msgs.append(dr.SystemMessage(m["content"], tools=tool_defs(m["tools"]) if "tools" in m else None))
        elif r == "user":
            msgs.append(dr.UserMessage(m["content"], image_sources=images(m)))
        elif r == "assistant":
            tcs = [dr.ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls", [])]
            msgs.append(dr.AssistantMessage(m["content"], reasoning_content=m.get("reasoning_content"),
                                            tool_calls=tcs or None, prefix=m.get("prefix", False)))
        elif r == "tool":
            msgs.append(dr.ToolMessage(m["content"], tool_call_id=m.get("tool_call_id"), image_sources=images(m)))
        else:
            msgs.append(dr.LatestReminderMessage(m["content"]))
    kw = {}
    rf = conv.get("response_format", {"type": "text"})
    if rf["type"] == "json_object":
        kw["response_format"] = "json_object"
    elif rf["type"] == "json_schema":
        kw["response_schema"] = rf["json_schema"]["schema"]
    elif rf["type"] == "regex":
        kw["response_regex"] = rf["regex"]
    return dr.Conversation(msgs, thinking_mode=conv["thinking"], tools=tool_defs(conv.get("tools", [])),
                           tool_choice=conv.get("tool_choice", "auto"),
                           reasoning_effort=conv.get("reasoning_effort"), **kw)


def render(enc, conv):
    try:
        c = to_recipe(conv)
        r = enc.render_conversation(c)
        ids = enc.encode(c)
    except Exception as e:  # the C side must refuse the same conversations
        return {"error": str(e)}
    p = r.prompt
    ranges = [[len(p[:a].encode()), len(p[:b].encode())] for a, b in r.special_ranges]
    return {"prompt": p, "special_ranges": ranges, "ids": ids}


def main():
    tok = dr.Tokenizer.from_file(build_tokenizer())
    rng = random.Random(SEED)
    convs = HAND + [random_case(rng) for _ in range(N_RANDOM)]
    v4 = dr.DeepseekV4Encoding().with_tokenizer(tok)
    v41 = dr.DeepseekV41Encoding().with_tokenizer(tok)
    cases = [{"conversation": c, "v4": render(v4, c), "v41": render(v41, c)} for c in convs]
    doc = {"oracle": "deepseek-recipe %s DeepseekV4Encoding / DeepseekV41Encoding" % dr.__version__,
           "script": "scripts/gen_goldens_dsml.py", "seed": SEED, "tokenizer": "tokenizer.json", "cases": cases}
    path = os.path.join(OUT_DIR, "render.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    n_err = sum(("error" in c["v4"]) + ("error" in c["v41"]) for c in cases)
    print("wrote", path, len(cases), "cases,", n_err, "errors")


if __name__ == "__main__":
    main()
