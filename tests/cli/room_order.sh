#!/usr/bin/env bash
# The rooms of src/ (one folder each; kernels/ with its cpu/ and cuda/ one
# room: the seam and its backends) form floors: a room's #include "room/..."
# lines name only rooms below it. Fails on a circle between rooms, naming a
# file and include on it (docs/ARCHITECTURE.md, "The rooms, floor by floor").
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import os, re, sys
def room(rel):
    return rel.split("/")[0]
edges = {}
for dp, _, files in os.walk("src"):
    for f in files:
        if not f.endswith((".c", ".h", ".cu", ".cuh")):
            continue
        path = os.path.join(dp, f)
        r = room(os.path.relpath(path, "src"))
        with open(path, errors="replace") as fh:
            for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', fh.read(), re.M):
                if "/" in inc and os.path.exists(os.path.join("src", inc)) and room(inc) != r:
                    edges.setdefault(r, {}).setdefault(room(inc), (path, inc))
def path_to(a, b, seen):
    for d in edges.get(a, {}):
        if d == b:
            return [a, d]
        if d not in seen:
            seen.add(d)
            p = path_to(d, b, seen)
            if p:
                return [a] + p
    return None
bad = False
for r in sorted(edges):
    p = path_to(r, r, set())
    if p:
        bad = True
        hops = ", ".join("%s -> %s (%s includes %s)" % (x, y, *edges[x][y]) for x, y in zip(p, p[1:]))
        print("room_order: circle through %s: %s" % (r, hops))
if bad:
    sys.exit(1)
print("room_order: %d rooms, no circle" % len({*edges, *(d for v in edges.values() for d in v)}))
PY
