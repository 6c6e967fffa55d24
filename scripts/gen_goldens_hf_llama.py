#!/usr/bin/env python3
"""Tiny random-weight HF checkpoint folders of the llama family, made by
transformers from a fixed seed and saved by its own save_pretrained (config.json,
*.safetensors, sharded with model.safetensors.index.json where asked), with the
transformers goldens they are checked against (tests/model/test_hf_llama.c):

  llama     LlamaForCausalLM     f32   tied embeddings, rope_scaling llama3
  qwen2     Qwen2ForCausalLM     bf16  q/k/v biases
  qwen3     Qwen3ForCausalLM     bf16  q/k head norms; Qwen3's chat template cut down
  qwen3moe  Qwen3MoeForCausalLM  bf16  8 experts top 2 (mlp.experts.N.*), sharded
  mistral   MistralForCausalLM   f16   sliding_window 8; Mistral-7B-Instruct-v0.3's template
  mixtral   MixtralForCausalLM   bf16  block_sparse_moe.experts.N.w1/w2/w3;
                                       Mixtral-8x7B-Instruct-v0.1's template
  phi3      Phi3ForCausalLM      f16   fused qkv_proj / gate_up_proj, LongRoPE
  gemma3    Gemma3ForCausalLM    bf16  (1 + w) norms, local/global layers, GeGLU

Sizes as scripts/gen_tiny_families.py (hidden 64, 2 layers, 4 heads of 16,
vocabulary 320) and its byte-level BPE tokenizer (tokenizer.json +
tokenizer_config.json); Mistral and Mixtral add <s> </s> as their BOS / EOS.
Every parameter is drawn from a seeded normal and rounded to the folder's dtype,
so transformers' float32 forward on those values is the oracle of our exact
kernels on the folder.

Goldens (tests/data/golden/hf/):
  <family>.json   PROMPT_LEN seeded ids: every position's float32 logits; a
                  GREEDY-token continuation (whole prefix recomputed each step)
                  with its top-1/top-2 margins; TEXT encoded by the folder's
                  tokenizer (HF tokenizers) as ids
  chat_mistral.json  conversations rendered by transformers' apply_chat_template
                  (jinja) with the mistral folder's template (v0.3 kind) and
                  the mixtral folder's (v0.1 kind); "error" where jinja raises

Also tests/data/malformed/hf_llama/<case>/: folders that must be refused with a
message naming the tensor / key (tests/model/test_hf_llama.c lists the cases).

Usage: bash scripts/venv.sh              (torch, transformers 4.55, tokenizers)
       nice -n 19 .venv/bin/python scripts/gen_goldens_hf_llama.py [FAMILY...]
"""
import hashlib
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tiny_families as tiny  # noqa: E402  (its tokenizer and sizes)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "data", "hf")
GOLD_DIR = os.path.join(ROOT, "tests", "data", "golden", "hf")
BAD_DIR = os.path.join(ROOT, "tests", "data", "malformed", "hf_llama")
SEED = 3131
PROMPT_LEN = 20
GREEDY = 6
TEXT = "the cat sat on the mat; then he ate it in one bite."

# Mistral-7B-Instruct-v0.3's chat template (its tokenizer_config.json), the
# tool branches kept: the renderer under test must ignore them
MISTRAL_V3_TEMPLATE = (
    '{%- if messages[0]["role"] == "system" %}\n    {%- set system_message = messages[0]["content"] %}\n'
    '    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n'
    '{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n'
    '{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}\n\n'
    '{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}\n'
    '{%- set ns = namespace() %}\n{%- set ns.index = 0 %}\n{%- for message in loop_messages %}\n'
    '    {%- if not (message.role == "tool" or message.role == "tool_results" or '
    '(message.tool_calls is defined and message.tool_calls is not none)) %}\n'
    '        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}\n'
    '            {{- raise_exception("After the optional system message, conversation roles must alternate '
    'user/assistant/user/assistant/...") }}\n        {%- endif %}\n        {%- set ns.index = ns.index + 1 %}\n'
    '    {%- endif %}\n{%- endfor %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n'
    '    {%- if message["role"] == "user" %}\n'
    '        {%- if tools is not none and (message == user_messages[-1]) %}\n'
    '            {{- "[AVAILABLE_TOOLS] [" }}\n            {%- for tool in tools %}\n'
    '                {%- set tool = tool.function %}\n'
    '                {{- \'{"type": "function", "function": {\' }}\n'
    '                {%- for key, val in tool.items() if key != "return" %}\n'
    '                    {%- if val is string %}\n'
    '                        {{- \'"\' + key + \'": "\' + val + \'"\' }}\n'
    '                    {%- else %}\n'
    '                        {{- \'"\' + key + \'": \' + val|tojson }}\n'
    '                    {%- endif %}\n                    {%- if not loop.last %}\n'
    '                        {{- ", " }}\n                    {%- endif %}\n                {%- endfor %}\n'
    '                {{- "}}" }}\n                {%- if not loop.last %}\n                    {{- ", " }}\n'
    '                {%- else %}\n                    {{- "]" }}\n                {%- endif %}\n'
    '            {%- endfor %}\n            {{- "[/AVAILABLE_TOOLS]" }}\n            {%- endif %}\n'
    '        {%- if loop.last and system_message is defined %}\n'
    '            {{- "[INST] " + system_message + "\\n\\n" + message["content"] + "[/INST]" }}\n'
    '        {%- else %}\n            {{- "[INST] " + message["content"] + "[/INST]" }}\n        {%- endif %}\n'
    '    {%- elif message.tool_calls is defined and message.tool_calls is not none %}\n'
    '        {{- "[TOOL_CALLS] [" }}\n        {%- for tool_call in message.tool_calls %}\n'
    '            {%- set out = tool_call.function|tojson %}\n            {{- out[:-1] }}\n'
    '            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}\n'
    '                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}\n'
    '            {%- endif %}\n            {{- \', "id": "\' + tool_call.id + \'"}\' }}\n'
    '            {%- if not loop.last %}\n                {{- ", " }}\n            {%- else %}\n'
    '                {{- "]" + eos_token }}\n            {%- endif %}\n        {%- endfor %}\n'
    '    {%- elif message["role"] == "assistant" %}\n        {{- " " + message["content"]|trim + eos_token}}\n'
    '    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}\n'
    '        {%- if message.content is defined and message.content.content is defined %}\n'
    '            {%- set content = message.content.content %}\n        {%- else %}\n'
    '            {%- set content = message.content %}\n        {%- endif %}\n'
    '        {{- \'[TOOL_RESULTS] {"content": \' + content|string + ", " }}\n'
    '        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}\n'
    '            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}\n'
    '        {%- endif %}\n        {{- \'"call_id": "\' + message.tool_call_id + \'"}[/TOOL_RESULTS]\' }}\n'
    '    {%- else %}\n        {{- raise_exception("Only user and assistant roles are supported, with the exception '
    'of an initial optional system message!") }}\n    {%- endif %}\n{%- endfor %}\n')
# Mixtral-8x7B-Instruct-v0.1's (and Mistral-7B-Instruct-v0.2's) template
MISTRAL_V1_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")

C = dict(tiny.COMMON)
C.pop("attn_implementation")
C["max_position_embeddings"] = 256
FAMILIES = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", "float32",
              dict(C, head_dim=16, tie_word_embeddings=True,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", "bfloat16", dict(C, rope_theta=1000000.0, use_sliding_window=False)),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", "bfloat16", dict(C, head_dim=16, use_sliding_window=False)),
    "qwen3moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", "bfloat16",
                 dict(C, head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False)),
    "mistral": ("MistralForCausalLM", "MistralConfig", "float16", dict(C, head_dim=16, sliding_window=8)),
    "mixtral": ("MixtralForCausalLM", "MixtralConfig", "bfloat16",
                dict(C, num_local_experts=8, num_experts_per_tok=2, intermediate_size=32, sliding_window=None)),
    "phi3": ("Phi3ForCausalLM", "Phi3Config", "float16",
             dict(C, num_key_value_heads=4, pad_token_id=tiny.BOS + 1, sliding_window=None,
                  max_position_embeddings=1024, original_max_position_embeddings=256,
                  rope_scaling={"type": "longrope",
                                "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.35, 1.5, 1.7],
                                "long_factor": [1.0, 1.3, 1.8, 2.5, 3.4, 4.6, 6.0, 8.0]})),
    "gemma3": ("Gemma3ForCausalLM", "Gemma3TextConfig", "bfloat16",
               dict(C, head_dim=16, query_pre_attn_scalar=16, sliding_window=8, sliding_window_pattern=2,
                    rope_local_base_freq=10000.0, final_logit_softcapping=None, attn_logit_softcapping=None,
                    hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, pad_token_id=tiny.BOS + 1)),
}
SHARDED = {"qwen3moe": "100KB"}
TEMPLATES = {"qwen3": tiny.QWEN3_TEMPLATE, "mistral": MISTRAL_V3_TEMPLATE, "mixtral": MISTRAL_V1_TEMPLATE}
BOS_EOS = {"mistral": ("<s>", "</s>"), "mixtral": ("<s>", "</s>")}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def randomize(model, seed, dtype):
    """Every parameter from a seeded normal, rounded to dtype's values."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            z = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() == 1 and "norm" in name:
                v = (0.1 * z) if "gemma" in type(model).__name__.lower() else 1.0 + 0.1 * z  # gemma: 1 + w
            elif p.dim() == 1:
                v = 0.1 * z
            else:
                v = z / np.sqrt(p.shape[-1])
            p.copy_(v.to(dtype).float())


def write_tokenizer(d, family):
    extra = ("<unk>", "<s>", "</s>") if family in ("phi3", "mistral", "mixtral") else ()
    tiny.write_tokenizer(d, TEMPLATES.get(family), extra)
    if family in BOS_EOS:
        path = os.path.join(d, "tokenizer_config.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg["bos_token"], cfg["eos_token"] = BOS_EOS[family]
        with open(path, "w") as f:
            json.dump(cfg, f)


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy().astype(np.float64)


def make(family, index):
    cls_name, cfg_name, dtype_name, kw = FAMILIES[family]
    dtype = getattr(torch, dtype_name)
    cfg = getattr(transformers, cfg_name)(**kw, attn_implementation="eager")
    torch.manual_seed(SEED + index)
    model = getattr(transformers, cls_name)(cfg).eval()
    randomize(model, SEED * 100 + index, dtype)

    rng = np.random.default_rng(SEED + index)
    prompt = [int(t) for t in rng.integers(0, 256, size=PROMPT_LEN)]
    logits = hf_logits(model, prompt)
    seq, margins = list(prompt), []
    for _ in range(GREEDY):
        row = hf_logits(model, seq)[-1]
        top2 = np.argsort(-row, kind="stable")[:2]
        margins.append(round(float(row[top2[0]] - row[top2[1]]), 5))
        seq.append(int(top2[0]))

    d = os.path.join(OUT_DIR, family)
    shutil.rmtree(d, ignore_errors=True)
    model.to(dtype).save_pretrained(d, safe_serialization=True, max_shard_size=SHARDED.get(family, "10GB"))
    for f in ("generation_config.json",):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    write_tokenizer(d, family)
    from tokenizers import Tokenizer
    text_ids = Tokenizer.from_file(os.path.join(d, "tokenizer.json")).encode(TEXT, add_special_tokens=False).ids
    return {
        "manifest": {
            "oracle": f"transformers {transformers.__version__} {cls_name}, float32, eager attention, no KV cache; "
                      f"weights rounded to {dtype_name}, the folder's dtype (saved by save_pretrained)",
            "torch": torch.__version__,
            "seed": SEED,
            "files": {f: sha256(os.path.join(d, f)) for f in sorted(os.listdir(d))},
        },
        "vocab": kw["vocab_size"],
        "dtype": dtype_name,
        "prompt": prompt,
        "logits": [[round(float(x), 5) for x in row] for row in logits],
        "greedy": seq[PROMPT_LEN:],
        "greedy_margin": margins,
        "text": TEXT,
        "text_ids": text_ids,
    }


CHATS = [
    ([{"role": "user", "content": "Hello"}], True),
    ([{"role": "user", "content": "Hello"}], False),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "  Hello! How can I help?\n"},
      {"role": "user", "content": "Tell me a joke."}], True),
    ([{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "a"},
      {"role": "assistant", "content": "b"}, {"role": "user", "content": " c "}], True),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
      {"role": "assistant", "content": "b"}], False),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], True),
    ([{"role": "assistant", "content": "a"}], True),
    ([{"role": "user", "content": "a"}, {"role": "tool", "content": "42"}], True),
]


def chat_goldens():
    from transformers import PreTrainedTokenizerFast
    out = []
    for family, name in (("mistral", "mistral"), ("mixtral", "mistral-v1")):
        d = os.path.join(OUT_DIR, family)
        with open(os.path.join(d, "tokenizer_config.json")) as f:
            tc = json.load(f)
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), bos_token=tc["bos_token"],
                                      eos_token=tc["eos_token"])
        tok.chat_template = tc["chat_template"]
        for msgs, gen in CHATS:
            case = {"folder": f"tests/data/hf/{family}", "template": name, "messages": msgs,
                    "add_generation_prompt": gen}
            try:
                case["text"] = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
            except Exception as e:  # jinja's raise_exception
                case["error"] = str(e)[:120]
            out.append(case)
    return {"manifest": {"oracle": f"transformers {transformers.__version__} apply_chat_template (jinja2)",
                         "templates": {"mistral": "Mistral-7B-Instruct-v0.3",
                                       "mistral-v1": "Mixtral-8x7B-Instruct-v0.1 / Mistral-7B-Instruct-v0.2"}},
            "cases": out}


# ---- malformed folders -----------------------------------------------------

BAD_CFG = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=32, hidden_size=16,
               intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
               max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
               torch_dtype="float32")


def bad_tensors():
    E, F, V, hd = 16, 32, 32, 8
    g = torch.Generator().manual_seed(SEED)
    r = lambda *s: torch.randn(s, generator=g)  # noqa: E731
    p = "model.layers.0."
    t = {"model.embed_tokens.weight": r(V, E), "model.norm.weight": r(E),
         p + "input_layernorm.weight": r(E), p + "post_attention_layernorm.weight": r(E),
         p + "self_attn.q_proj.weight": r(2 * hd, E), p + "self_attn.q_proj.bias": r(2 * hd),
         p + "self_attn.k_proj.weight": r(hd, E), p + "self_attn.k_proj.bias": r(hd),
         p + "self_attn.v_proj.weight": r(hd, E), p + "self_attn.v_proj.bias": r(hd),
         p + "self_attn.o_proj.weight": r(E, 2 * hd),
         p + "mlp.gate_proj.weight": r(F, E), p + "mlp.up_proj.weight": r(F, E), p + "mlp.down_proj.weight": r(E, F)}
    return t


MOE_CFG = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", head_dim=8, num_experts=2,
               num_experts_per_tok=1, moe_intermediate_size=8, norm_topk_prob=True)


def moe_tensors(t):
    """bad_tensors' layer as Qwen3-MoE's: q/k norms, no biases, 2 experts."""
    g = torch.Generator().manual_seed(SEED + 1)
    p = "model.layers.0."
    t = {k: v for k, v in t.items() if not k.endswith("_proj.bias") and ".mlp." not in k}
    t[p + "self_attn.q_norm.weight"] = torch.randn(8, generator=g)
    t[p + "self_attn.k_norm.weight"] = torch.randn(8, generator=g)
    t[p + "mlp.gate.weight"] = torch.randn(2, 16, generator=g)
    for e in range(2):
        for n, shape in (("gate_proj", (8, 16)), ("up_proj", (8, 16)), ("down_proj", (16, 8))):
            t[p + f"mlp.experts.{e}.{n}.weight"] = torch.randn(shape, generator=g)
    return t


def malformed():
    from safetensors.torch import save_file
    p = "model.layers.0."
    cases = {
        "unknown_architecture": ({"architectures": ["FalconForCausalLM"], "model_type": "falcon"}, lambda t: t),
        "missing_tensor": ({}, lambda t: {k: v for k, v in t.items() if k != p + "self_attn.k_proj.bias"}),
        "misshapen_tensor": ({}, lambda t: dict(t, **{p + "mlp.up_proj.weight": t[p + "mlp.up_proj.weight"].T.contiguous()})),
        "unknown_tensor": ({}, lambda t: dict(t, **{p + "mlp.extra.weight": t[p + "mlp.up_proj.weight"].clone()})),
        "layer_out_of_range": ({}, lambda t: dict(t, **{"model.layers.1.input_layernorm.weight": t["model.norm.weight"].clone()})),
        "integer_tensor": ({}, lambda t: dict(t, **{"model.norm.weight": t["model.norm.weight"].to(torch.int32)})),
        "hidden_size_missing": ({"hidden_size": None}, lambda t: t),
        "no_weights": ({}, None),
        "missing_expert": (MOE_CFG, lambda t: {k: v for k, v in moe_tensors(t).items()
                                               if k != p + "mlp.experts.1.down_proj.weight"}),
    }
    shutil.rmtree(BAD_DIR, ignore_errors=True)
    for name, (cfg_edit, edit) in cases.items():
        d = os.path.join(BAD_DIR, name)
        os.makedirs(d)
        cfg = dict(BAD_CFG, **cfg_edit)
        cfg = {k: v for k, v in cfg.items() if v is not None}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        if edit:
            save_file(edit(bad_tensors()), os.path.join(d, "model.safetensors"))


def main():
    names = [a for a in sys.argv[1:] if a in FAMILIES] or list(FAMILIES)
    os.makedirs(OUT_DIR, exist_ok=True)
    os.makedirs(GOLD_DIR, exist_ok=True)
    for name in names:
        gold = make(name, list(FAMILIES).index(name))
        path = os.path.join(GOLD_DIR, f"{name}.json")
        with open(path, "w") as f:
            json.dump(gold, f, separators=(",", ":"))
            f.write("\n")
        print(f"{name}: {path}")
    if "mistral" in names and "mixtral" in names:
        with open(os.path.join(GOLD_DIR, "chat_mistral.json"), "w") as f:
            json.dump(chat_goldens(), f, indent=1, ensure_ascii=False)
            f.write("\n")
    malformed()


if __name__ == "__main__":
    main()
