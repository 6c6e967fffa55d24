#!/usr/bin/env bash
# Creates (once) the Python virtual environment for tool scripts in .venv and
# installs scripts/requirements-tools.txt into it. Prints the python path.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=$ROOT/.venv
REQ=$ROOT/scripts/requirements-tools.txt
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
