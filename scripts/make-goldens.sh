#!/usr/bin/env bash
# Regenerates every committed golden: runs each scripts/gen_goldens_*.py with
# the tool venv's python, or the venv it names (scripts/venv.sh pins the oracle packages). Each
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
  echo "make-goldens: $(basename "$g")" >&2
  # a generator may name its venv ("# venv: NAME" near the top): oracles pin
  # different packages (scripts/requirements-NAME.txt)
  venv=$(sed -n '1,5s/^# venv: \([a-z0-9_-]*\).*/\1/p' "$g" | head -1)
  PY=$(bash "$ROOT/scripts/venv.sh" $venv)
  (cd "$ROOT" && "$PY" "$g")
done
