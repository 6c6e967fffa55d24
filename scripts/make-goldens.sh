#!/usr/bin/env bash
# Regenerates every committed golden: runs each scripts/gen_goldens_*.py with
# the tool venv's python (scripts/venv.sh pins the oracle packages). Each
# generator writes under tests/data/golden/<name>/ with a manifest naming its
# oracle and versions; commit what changes. `make test` never runs this.
# A generator whose second line is "# venv: NAME" runs in .venv-NAME instead
# (scripts/requirements-NAME.txt), e.g. llama-cpp-python for the llama.cpp peer.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=$(bash "$ROOT/scripts/venv.sh")
shopt -s nullglob
gens=("$ROOT"/scripts/gen_goldens_*.py)
if [ ${#gens[@]} -eq 0 ]; then
  echo "make-goldens: no scripts/gen_goldens_*.py" >&2
  exit 1
fi
for g in "${gens[@]}"; do
  echo "make-goldens: $(basename "$g")" >&2
  venv=$(sed -n '2s/^# venv: \([a-z0-9_-]*\)$/\1/p' "$g")
  if [ -n "$venv" ]; then
    (cd "$ROOT" && "$(bash "$ROOT/scripts/venv.sh" "$venv")" "$g")
  else
    (cd "$ROOT" && "$PY" "$g")
  fi
done
