#!/usr/bin/env bash
# ctest entry for the server's pytest suite: $1 is the deepinfer binary;
# cwd is the repository root. The suite starts and stops its own servers
# on free loopback ports (tests/server/conftest.py).
set -euo pipefail
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
  echo "run_pytest.sh: $MODEL missing (run 'make model')" >&2
  exit 1
fi
PY=$(bash scripts/venv.sh test)
export DI_SERVE_BIN=$BIN DI_SERVE_MODEL=$MODEL
# -p no:cacheprovider: no .pytest_cache in the source tree.
exec "$PY" -m pytest -p no:cacheprovider -q -ra tests/server "${@:2}"
