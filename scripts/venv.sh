#!/usr/bin/env bash
# Creates (once) a Python virtual environment and installs a requirements
# file into it; prints the python path.
#   scripts/venv.sh        .venv      <- scripts/requirements-tools.txt
#                          (golden generators, benchmarks: heavy)
#   scripts/venv.sh test   .venv-test <- scripts/requirements-test.txt
#                          (the server's pytest suite: small)
# Reinstalls when the requirements file changes (sha256 stamp).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-tools}" in
  tools) VENV=$ROOT/.venv; REQ=$ROOT/scripts/requirements-tools.txt ;;
  test)  VENV=$ROOT/.venv-test; REQ=$ROOT/scripts/requirements-test.txt ;;
  *) echo "venv.sh: unknown set '$1' (tools or test)" >&2; exit 2 ;;
esac
STAMP=$VENV/.req-sha256
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" >&2
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/pip" install --quiet --upgrade pip >&2
  "$VENV/bin/pip" install --quiet -r "$REQ" >&2
  echo "$want" > "$STAMP"
fi
echo "$VENV/bin/python"
