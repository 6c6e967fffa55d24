#!/usr/bin/env bash
# The grammar room imports in one direction (issue 29): compile (ir, the
# front ends) below match (vocab, matcher) below mask (token_mask*), with
# no circle anywhere in src/grammar. Checked three ways:
#   1. headers: a module is a header and the .c files named after it
#      (token_mask_internal.h: token_mask.c, token_mask_*.c; vocab.h:
#      vocab.c, vocab_tok.c); the modules' #include "grammar/..." lines
#      must form no circle;
#   2. honesty: every function a module's header declares is defined in
#      that module's .c files (else a header could declare a higher
#      module's function and hide a circle from 1.); grammar.h and
#      grammar_tok.h are the room's public contract and exempt;
#   3. symbols, when a build folder is given ($1) and has the objects: the
#      calls between the src/grammar object files (nm) form no circle.
# Exit 1 naming the circle or the misplaced declaration.
set -euo pipefail
BUILD=${1:-}
command -v python3 >/dev/null || { echo "include_order.sh: no python3, skipping"; exit 0; }
exec python3 - "$BUILD" <<'EOF'
import glob, os, re, shutil, subprocess, sys

SRC = "src/grammar"
PUBLIC = {"grammar.h", "grammar_tok.h"}
build = sys.argv[1]
errors = []

files = sorted(os.path.basename(p) for p in glob.glob(f"{SRC}/*.[ch]"))
headers = [f for f in files if f.endswith(".h")]
stems = {f: re.sub(r"_internal$", "", f[:-2]) for f in headers if f not in PUBLIC}


def module(f):
    """A header's module is its stem; a .c file belongs to the longest
    header stem it is named after (exactly, or followed by '_')."""
    if f in PUBLIC:
        return "public"
    if f in stems:
        return stems[f]
    base = f[:-2]
    named = [s for s in set(stems.values()) if base == s or base.startswith(s + "_")]
    return max(named, key=len) if named else base


def find_cycle(graph):
    """One circle of graph (dict: node -> set of nodes), or None."""
    state, stack = {}, []

    def dfs(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state:
                c = dfs(v)
                if c:
                    return c
        stack.pop()
        state[u] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = dfs(n)
            if c:
                return c
    return None


# 1. the modules' include graph
inc = {}
for f in files:
    text = open(f"{SRC}/{f}", encoding="utf-8").read()
    for h in re.findall(r'^\s*#\s*include\s+"grammar/([^"]+)"', text, re.M):
        if f in PUBLIC and h not in PUBLIC:
            errors.append(f"{f} is the public contract but includes the internal grammar/{h}")
        a, b = module(f), module(h)
        if a != b and b != "public":
            inc.setdefault(a, set()).add(b)
c = find_cycle(inc)
if c:
    errors.append("headers import in a circle: " + " -> ".join(c))


# 2. every declaration in its own module
def strip_comments(t):
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), t, flags=re.S)


defined = {}
for f in files:
    if not f.endswith(".c"):
        continue
    for line in strip_comments(open(f"{SRC}/{f}", encoding="utf-8").read()).splitlines():
        m = re.match(r"^(?!static\b|typedef\b|#)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(", line)
        if m and not line.rstrip().endswith(";"):
            defined.setdefault(m.group(1), f)
for h in headers:
    if h in PUBLIC:
        continue
    for line in strip_comments(open(f"{SRC}/{h}", encoding="utf-8").read()).splitlines():
        m = re.match(r"^(?!static\b|typedef\b|#|struct\b|enum\b|union\b)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(", line)
        if not m:
            continue
        name = m.group(1)
        where = defined.get(name)
        if where and module(where) != module(h):
            errors.append(f"{h} (module {module(h)}) declares {name}, defined in {where} (module {module(where)})")

# 3. the object files' calls
objs = []
if build and os.path.isdir(build) and shutil.which("nm"):
    objs = sorted(glob.glob(f"{build}/**/src/grammar/*.c.o", recursive=True))
if objs:
    defs, uses = {}, {}
    for o in objs:
        n = os.path.basename(o)[: -len(".c.o")]
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBR":
                defs[p[2]] = n
            elif len(p) == 2 and p[0] == "U":
                uses.setdefault(n, set()).add(p[1])
    calls = {n: {defs[s] for s in us if s in defs and defs[s] != n} for n, us in uses.items()}
    c = find_cycle(calls)
    if c:
        errors.append("object files call in a circle: " + " -> ".join(c))
else:
    print("include_order.sh: no objects under the build folder (or no nm), symbol check skipped")

for e in errors:
    print("FAIL:", e, file=sys.stderr)
if errors:
    sys.exit(1)
print(f"ok: {len(files)} files, {len(set(module(f) for f in files))} modules, "
      f"{sum(len(v) for v in inc.values())} module imports, {len(objs)} objects, no circle")
EOF
