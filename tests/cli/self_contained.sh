#!/usr/bin/env bash
# The checkout stands alone: no tracked file names a path outside it (the
# `../shared` folder of the team's workspace, absolute workspace paths), and
# no tracked symlink leads out of it. Test data that is not committed comes
# from scripts/fetch-testdata.sh into testdata/; this test fails when a path
# outside the checkout comes back into a test, script, CMake file or doc.
# bench/results/ keeps the command lines of past measurements as recorded,
# so only the `../shared` rule applies there.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*" >&2; exit 1; }
self=tests/cli/self_contained.sh
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files)
else
  files=$(find . -path ./build -prune -o -path ./testdata -prune -o -path ./models -prune -o -path './.venv*' -prune \
          -o -type f -print | sed 's|^\./||')
fi
bad=$(printf '%s\n' "$files" | grep -vxF "$self" | tr '\n' '\0' |
      xargs -0 grep -IlE '\.\./shared([/" ]|$)' 2>/dev/null || true)
[ -z "$bad" ] || fail "files name ../shared: $(echo $bad)"
bad=$(printf '%s\n' "$files" | grep -vxF "$self" | grep -v '^bench/results/' | tr '\n' '\0' |
      xargs -0 grep -IlE '(^|[^A-Za-z0-9_.])/work/' 2>/dev/null || true)
[ -z "$bad" ] || fail "files name /work/ paths: $(echo $bad)"
root=$(pwd -P)
for f in $files; do
  [ -L "$f" ] || continue
  t=$(realpath -m "$f")
  case "$t" in "$root"/*) ;; *) fail "symlink $f -> $(readlink "$f") leaves the checkout" ;; esac
done
echo "self_contained: $(printf '%s\n' "$files" | wc -l) files checked"
