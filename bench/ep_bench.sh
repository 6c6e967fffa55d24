#!/usr/bin/env bash
# Expert-parallel figures in one run (bench/results/ep.md): all-to-all bytes
# per row per layer against the routing's minimum, step time at 1 / 2 / 4
# ranks on the same global workload (32 sequences, prompts of 1-13 tokens,
# up to 30 decode steps; 1 thread per rank), and moe_lb before / after an
# EPLB rebalance with natural and forced-skew routing.
#   bash bench/ep_bench.sh [BUILD_DIR] [MODEL_DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
MODEL=${2:-$ROOT/tests/data/golden/deepseek_v4/tiny_fp8}
RUN="$ROOT/scripts/mpirun.sh"
FWD="$BUILD/mpi_ep_forward"
REPS=${REPS:-3}
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), model $(basename "$MODEL")"
for np in 1 2 4; do
  for t in 1 2; do
    [ "$np" -gt 1 ] && [ "$t" = 2 ] && continue
    best=
    for r in $(seq "$REPS"); do
      line=$("$RUN" "$np" "$FWD" "$MODEL" --seqs 32 --decode 30 --threads "$t" --bench 2>/dev/null | head -1)
      ms=$(sed -n 's/.*step \([0-9.]*\) ms.*/\1/p' <<<"$line")
      best=$(python3 -c "import sys; a=[float(x) for x in sys.argv[1:] if x]; print(min(a))" "$best" "$ms")
    done
    echo "step np=$np threads/rank=$t: best of $REPS ${best} ms/step"
  done
done
for np in 2 4; do
  "$RUN" "$np" "$FWD" "$MODEL" --seqs 32 --decode 30 2>/dev/null | grep "per row" | sed "s/^/np=$np /"
  "$RUN" "$np" "$FWD" "$MODEL" --seqs 32 --decode 30 --bench 2>/dev/null | grep "inside MPI" | sed "s/^/np=$np /"
done
for skew in 0 2; do
  for np in 2 4; do
    line=$("$RUN" "$np" "$FWD" "$MODEL" --seqs 32 --decode 30 --interval 40 --skew "$skew" --extra "$np" 2>/dev/null | head -1)
    echo "eplb np=$np skew=$skew extra=$np: $(grep -o 'moe_lb measured.*window [0-9.]* -> [0-9.]*' <<<"$line")"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
