#!/usr/bin/env bash
# Creates (once) a Python virtual environment for tool scripts and installs its
# pinned requirements into it. Prints the python path.
#
#   scripts/venv.sh            .venv          from scripts/requirements-tools.txt
#   scripts/venv.sh NAME       .venv-NAME     from scripts/requirements-NAME.txt
#
# Named venvs exist because oracles pin different transformers versions: the
# llama goldens need 4.55 (GGUF loading), DeepSeek-V4 needs 5.24.
#
# A requirements file may carry header lines:
#   # python: 3.12                 create the venv with that Python (default python3);
#                                  looked up as pythonX.Y on PATH, then `pyenv which`,
#                                  then $PYENV_ROOT/versions/X.Y*/bin/python
#   # no-deps: SPEC                after the requirements, pip install --no-deps SPEC
#                                  (a requirement such as name==version)
# (scripts/requirements-v41.txt uses both: DeepInfer needs Python 3.12 and
# tile-kernels must come without its CUDA dependencies.)
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
pyver=$(sed -n 's/^# python: *\([0-9][0-9.]*\) *$/\1/p' "$REQ" | head -n1)
find_python() {
  if [ -z "$pyver" ]; then command -v python3; return; fi
  # a pyenv shim is on PATH for every installed version but fails when that
  # version is not selected: take a candidate only if it runs
  if "python$pyver" -c '' >/dev/null 2>&1; then command -v "python$pyver"; return; fi
  if command -v pyenv >/dev/null 2>&1 && pyenv which "python$pyver" >/dev/null 2>&1; then
    pyenv which "python$pyver"; return
  fi
  local d
  for d in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$pyver"*; do
    if [ -x "$d/bin/python" ]; then echo "$d/bin/python"; return; fi
  done
  echo "venv.sh: $REQ wants Python $pyver, none found (PATH, pyenv)" >&2
  return 1
}
# Two tests may ask for the same venv at once (ctest -j): one builds it.
exec 9>"$VENV.lock"
flock 9
if [ ! -x "$VENV/bin/python" ]; then
  PY=$(find_python)
  "$PY" -m venv "$VENV" >&2
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/pip" install --quiet --upgrade pip >&2
  "$VENV/bin/pip" install --quiet -r "$REQ" >&2
  sed -n 's/^# no-deps: *\(.*[^ ]\) *$/\1/p' "$REQ" | while read -r spec; do
    "$VENV/bin/pip" install --quiet --no-deps "$spec" >&2
  done
  echo "$want" > "$STAMP"
fi
echo "$VENV/bin/python"
