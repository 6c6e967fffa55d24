#!/usr/bin/env bash
# The project's launcher: mpirun pinned to this machine's shared memory and
# loopback (every byte stays here), oversubscription allowed (tests run more
# ranks than cores), idle ranks yield the CPU instead of spinning.
#
#   scripts/mpirun.sh NP deepinfer batch --ep -m MODEL --in in.jsonl --out out.jsonl
#
# On several hosts call mpirun yourself (see README: Expert parallelism).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: scripts/mpirun.sh NP COMMAND [ARGS...]" >&2
  exit 2
fi
NP=$1
shift
MPIRUN=${MPIRUN:-$(command -v mpirun || true)}
if [ -z "$MPIRUN" ]; then
  echo "scripts/mpirun.sh: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)" >&2
  exit 127
fi
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
export OMPI_MCA_mpi_yield_when_idle=1
exec "$MPIRUN" --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  --oversubscribe "${extra[@]}" -np "$NP" "$@"
