#!/usr/bin/env bash
# Regenerates every committed golden: runs each scripts/gen_goldens_*.py with
# the tool venv's python (scripts/venv.sh pins the oracle packages), or with
# a named venv when the script says so in a line `# venv: NAME` (oracles that
# pin another transformers, e.g. deepseek -> .venv-deepseek). Each
# generator writes under tests/data/golden/<name>/ with a manifest naming its
# oracle and versions; commit what changes. `make test` never runs this.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
shopt -s nullglob
gens=("$ROOT"/scripts/gen_goldens_*.py)
if [ ${#gens[@]} -eq 0 ]; then
  echo "make-goldens: no scripts/gen_goldens_*.py" >&2
  exit 1
fi
for g in "${gens[@]}"; do
  name=$(sed -n '1,5s/^# venv: *\([a-z0-9_-]*\).*$/\1/p' "$g" | head -1)
  if [ -n "$name" ]; then PY=$(bash "$ROOT/scripts/venv.sh" "$name"); else PY=$(bash "$ROOT/scripts/venv.sh"); fi
  echo "make-goldens: $(basename "$g") ($PY)" >&2
  (cd "$ROOT" && "$PY" "$g")
done
