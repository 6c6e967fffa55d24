#!/usr/bin/env python3
# venv: v41
"""DeepSeek V4 / V4.1 output parsing goldens: model text -> reasoning_content,
content, tool_calls, finish_reason.

Oracle: PyPI `deepseek-recipe` (pinned in scripts/requirements-v41.txt):
ChatCompletionRequest.chunk_generator + StreamProcessor (the request's own
ParsingOptions) fed the text, then ChatCompletionResponse.accumulate over the
chunks. For every output the script also feeds random splits (fixed seed)
and checks that the recipe's accumulated message does not depend on them
(tool-call ids are random per call and left out). src/text/dsml_parse.c
must produce the same message from any split, down to one byte at a time.

Writes tests/data/golden/dsml/parse.json.

Usage: .venv-v41/bin/python scripts/gen_goldens_dsml_parse.py
"""
import json
import os
import random

import deepseek_recipe as dr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden", "dsml", "parse.json")
SEED = 20
N_SPLITS = 8
MODELS = {"v4": "DeepSeek-V4-Pro", "v41": "DeepSeek-V4.1-Flash"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]

# Outputs written with V4's DSML words; the V4.1 variants swap them.
OUTPUTS = [
    "Plain answer.",
    "\n\nLeading newlines</think>Answer after reasoning.",
    "Reasoning only, no end",
    "r</think>",
    "r</think>\n\nanswer with\nnewlines\n",
    "Think.</think>Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">a \"quoted\" \\ ü\nline</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"now\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "t</think>x <｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"false\">not json</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">unterminated",
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"obj\" string=\"false\">{\"a\": [1, 2], \"b\": null}</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>trailing text",
    "t</think>a < b and <not a tag> and </think> again",
    "t</think>almost <｜DSML｜tool_ but not",
    "t</think><｜DSML｜tool_calls>\ngarbage\n</｜DSML｜tool_calls>",
    "t</think>",
    "",
    # malformed and odd: the recipe's behaviour, whatever it is
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜parameter name=\"city\" string=\"true\">outside</｜DSML｜parameter>\n</｜DSML｜tool_calls>",
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\">no kind</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n<｜DSML｜parameter name=\"x\" string=\"true\">v</｜DSML｜parameter>\n"
    "<｜DSML｜invoke name=\"b\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">has </think> and <b> inside</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "t</think>one\n\n<｜DSML｜tool_calls>\n</｜DSML｜tool_calls>\n\nafter\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "reasoning with <｜DSML｜tool_calls> inside</think>answer",
    "t</think>ünïcödé ✓ 日本語\n\n\n",
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"n\" string=\"false\">12</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"s\" string=\"true\"></｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    "t</think><｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n</｜DSML｜invoke>",
    "t</think>\n\n\n",
    "\n\n</think>\n\n",
    "t</think>a\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"x\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
]


# Outputs whose recipe behaviour src/text/dsml_parse.c does not reproduce
# (the test skips them and says so).
KNOWN = {
    OUTPUTS[16]: "parameter tag without string=: the recipe's key/value text is not modelled",
}


def variant(text, key):
    if key == "v4":
        return text
    return (text.replace("｜DSML｜tool_calls", "｜DSML｜ calls").replace("｜DSML｜invoke", "｜DSML｜ invoke")
            .replace("｜DSML｜parameter", "｜DSML｜ parameter").replace("｜DSML｜tool_", "｜DSML｜ "))


def run(key, thinking, text, cuts):
    body = {"model": MODELS[key], "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS,
            "thinking": {"type": "enabled" if thinking else "disabled"}}
    req = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions())
    gen = dr.ChatCompletionRequest.chunk_generator(req, "id", MODELS[key])
    sp = dr.StreamProcessor(gen, req.parsing_options)
    resp = dr.ChatCompletionResponse("id", MODELS[key], 0, 1, 0)
    out = sp.push(dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(prompt_tokens=1)))
    last = 0
    for c in list(cuts) + [len(text)]:
        if c > last:
            out += sp.push(dr.InferenceChunk.text(text[last:c], 1))
        last = c
    out += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))
    out += sp.finish()
    for o in out:
        resp.accumulate(o)
    ch = json.loads(resp.to_json())["choices"][0]
    m = ch["message"]
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in m.get("tool_calls") or []]
    return {"content": m.get("content"), "reasoning_content": m.get("reasoning_content"), "tool_calls": calls,
            "finish_reason": ch["finish_reason"]}


def main():
    rng = random.Random(SEED)
    cases = []
    for key in ("v4", "v41"):
        for thinking in (True, False):
            for base in OUTPUTS:
                text = variant(base, key)
                want = run(key, thinking, text, [])
                for _ in range(N_SPLITS):
                    if len(text) < 2:
                        break
                    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12))))
                    got = run(key, thinking, text, cuts)
                    assert got == want, (key, thinking, text, cuts, got, want)
                case = {"model": key, "thinking": thinking, "output": text, "message": want}
                if base in KNOWN:
                    case["known_difference"] = KNOWN[base]
                cases.append(case)
    doc = {"oracle": "deepseek-recipe %s StreamProcessor + ChatCompletionResponse" % dr.__version__,
           "script": "scripts/gen_goldens_dsml_parse.py", "seed": SEED, "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("wrote", OUT, len(cases), "cases")


if __name__ == "__main__":
    main()
