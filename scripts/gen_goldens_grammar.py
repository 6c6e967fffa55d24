#!/usr/bin/env python3
# venv: grammar   (scripts/make-goldens.sh runs this with .venv-grammar)
"""Property-test goldens for the grammar module: strings sampled from our
token masks must validate against their schema with an independent
validator (PyPI `jsonschema`, version pinned in requirements-grammar.txt).

For a fixed set of jsonschemabench schemas (the first PER_SUBSET that
compile, per subset, by file name), runs `deepinfer grammar --sample` (seeded
random walks through the mask, di_grammar_random_walk) with the DeepSeek-V3
tokenizer, validates every walk that ended with EOS, and writes
tests/data/golden/grammar/walks.json: schema, seed, token ids, complete, and the
oracle's verdict. tests/grammar/test_walk_goldens.c regenerates the same
walks in C (so CI needs no Python), checks they are token-for-token the
same, and fails on any verdict that is not valid.

Run: $(scripts/venv.sh grammar) scripts/gen_goldens_grammar.py (after a build)
"""
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The tokenizer from testdata/ (`make testdata`); the whole jsonschemabench
# corpus from $JSONSCHEMABENCH (its data/ folder, unpacked anywhere): the
# schemas the walks pick are then committed to tests/data/jsonschemabench.
TOKENIZER = os.path.join(ROOT, "testdata", "tokenizer", "deepseek-v3", "tokenizer.json")
BENCH = os.environ.get("JSONSCHEMABENCH", "")
SUBSETS = ["Github_easy", "Github_medium", "Github_hard", "Glaiveai2K", "Snowplow"]
PER_SUBSET = 8
# Schemas that exercise particular compilations, walked in addition: regex
# automata (an ambiguous pattern; pattern with maxLength), not of an enum /
# of required, and dependencies.
EXTRA = ["Github_medium/o10314.json", "Snowplow/sp_328_Normalized.json", "Glaiveai2K/calculate_area_00d870b6.json",
         "Github_medium/o10078.json", "Glaiveai2K/calculate_area_1b3acb9f.json", "Github_medium/o24621.json",
         "Github_hard/o17944.json", "Github_medium/o12279.json"]
SEEDS = [1, 2, 3]
MAX_TOKENS = 200
OUT = os.path.join(ROOT, "tests", "data", "golden", "grammar", "walks.json")


def sample(exe, schema_path):
    # --strict: only schemas the grammar enforces whole are part of the
    # property (a dropped keyword would let the oracle reject a walk)
    r = subprocess.run([exe, "grammar", "--strict", "--tokenizer", TOKENIZER, "--schema", schema_path,
                        "--sample", str(len(SEEDS)), "--seed", str(SEEDS[0]), "--tokens", str(MAX_TOKENS)],
                       capture_output=True, text=True)
    if r.returncode == 2:
        return None  # does not compile: not part of the property
    r.check_returncode()
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def verdict(schema, text_bytes):
    """(valid, error message) from the independent validator."""
    try:
        instance = json.loads(text_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return False, f"not JSON: {e}"
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    v = cls(schema, format_checker=cls.FORMAT_CHECKER)
    err = jsonschema.exceptions.best_match(v.iter_errors(instance))
    return (err is None), (None if err is None else err.message[:200])


def main():
    if not BENCH or not os.path.isdir(BENCH):
        sys.exit("set JSONSCHEMABENCH to jsonschemabench's data/ folder (subsets " + ", ".join(SUBSETS) + ")")
    exe = os.path.join(ROOT, "build", "deepinfer")
    samples, n_complete, n_invalid = [], 0, 0
    chosen = []
    for sub in SUBSETS:
        d = os.path.join(BENCH, sub)
        taken = 0
        for name in sorted(os.listdir(d)):
            if taken == PER_SUBSET:
                break
            if not name.endswith(".json"):
                continue
            if sample(exe, os.path.join(d, name)) is not None:
                chosen.append(f"{sub}/{name}")
                taken += 1
    chosen += [x for x in EXTRA if x not in chosen]
    for rel in chosen:
        sub, name = rel.split("/")
        path = os.path.join(BENCH, rel)
        walks = sample(exe, path)
        if walks is None:
            sys.exit(f"{rel} does not compile")
        schema = json.load(open(path, encoding="utf-8"))
        kept = os.path.join(ROOT, "tests", "data", "jsonschemabench", rel)  # what the test reads
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        shutil.copyfile(path, kept)
        for w in walks:
            rec = {"schema": f"jsonschemabench/{sub}/{name}", "seed": w["seed"], "complete": w["complete"],
                   "ids": w["ids"]}
            if w["complete"]:
                n_complete += 1
                ok, msg = verdict(schema, bytes.fromhex(w["hex"]))
                rec["valid"] = ok
                if not ok:
                    n_invalid += 1
                    rec["error"] = msg
                    rec["text"] = bytes.fromhex(w["hex"]).decode("utf-8", "replace")
                    print(f"INVALID {rec['schema']} seed {w['seed']}: {msg}\n  {rec['text'][:300]}",
                          file=sys.stderr)
            samples.append(rec)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    doc = {
        "generator": "scripts/gen_goldens_grammar.py",
        "oracle": f"jsonschema {importlib.metadata.version('jsonschema')}",
        "tokenizer": TOKENIZER,
        "max_tokens": MAX_TOKENS,
        "samples": samples,
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{len(samples)} walks over {len(samples) // len(SEEDS)} schemas, {n_complete} complete, "
          f"{n_invalid} invalid -> {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
