#!/usr/bin/env bash
# Creates (once) a Python virtual environment for tool scripts and installs its
# pinned requirements into it. Prints the python path.
#
#   scripts/venv.sh            .venv          from scripts/requirements-tools.txt
#   scripts/venv.sh NAME       .venv-NAME     from scripts/requirements-NAME.txt
#
# Named venvs exist because oracles pin different transformers versions: the
# llama goldens need 4.55 (GGUF loading), DeepSeek-V4 needs 5.24. A
# requirements file may name the interpreter that creates its venv in a line
# "# python: python3.12" (DeepInfer and tile-kernels need Python >= 3.12).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -eq 0 ]; then
  VENV=$ROOT/.venv
  REQ=$ROOT/scripts/requirements-tools.txt
else
  case "$1" in
    *[!a-z0-9_-]*|'') echo "venv.sh: bad venv name '$1'" >&2; exit 2 ;;
  esac
  VENV=$ROOT/.venv-$1
  REQ=$ROOT/scripts/requirements-$1.txt
  if [ ! -f "$REQ" ]; then
    echo "venv.sh: no $REQ" >&2
    exit 2
  fi
fi
STAMP=$VENV/.req-sha256
want=$(sha256sum "$REQ" | cut -d' ' -f1)
PYBIN=$(sed -n 's/^# python: *\([A-Za-z0-9._/-]*\).*$/\1/p' "$REQ" | head -1)
if [ ! -x "$VENV/bin/python" ]; then
  "${PYBIN:-python3}" -m venv "$VENV" >&2
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/pip" install --quiet --upgrade pip >&2
  "$VENV/bin/pip" install --quiet -r "$REQ" >&2
  echo "$want" > "$STAMP"
fi
echo "$VENV/bin/python"
