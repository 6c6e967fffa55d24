#!/usr/bin/env bash
# The one script a GPU session runs on the device machine (docs/CUDA.md):
# names the GPU and driver, runs the carried CUDA kernel tests (must pass:
# DI_CUDA_REQUIRE=1) and the GEMV/GEMM/attention micro-benchmark, and
# leaves under $OUT: gpu.txt, test_cuda.log, bench_cuda.md (the table),
# bench_cuda.log and summary.md. Build the binaries first, on the CPU
# machine: bash scripts/build-device.sh; then carry build-device/carry. If
# they do not start there, scripts/build-cuda-standalone.sh builds them on
# the spot from the carried working tree.
#
# Budget: the test takes seconds, the benchmark under two minutes; each
# step has a timeout so the whole script ends in well under ten minutes.
# Exit status: 0 when the tests passed (and the benchmark ran), 1 when a
# test or the benchmark failed, 2 when there is no GPU or no binaries.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${DI_DEVICE_BIN:-build-device/carry}
OUT=${OUT:-/tmp/device-check-out}
TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-180}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-300}
mkdir -p "$OUT"
say() { echo "device-check: $*" | tee -a "$OUT/summary.md"; }
: >"$OUT/summary.md"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$OUT/gpu.txt" 2>&1; then
    say "FAILED: no NVIDIA GPU here (nvidia-smi $(command -v nvidia-smi >/dev/null && echo 'lists none' || echo 'not found')); run this on the device machine"
    exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv >>"$OUT/gpu.txt" 2>&1
say "GPU: $(tr '\n' ' ' <"$OUT/gpu.txt")"
for b in test_cuda bench_cuda; do
    if [ ! -x "$BIN/$b" ]; then
        say "FAILED: $BIN/$b is missing: run scripts/build-device.sh on the CPU machine and carry build-device/carry"
        exit 2
    fi
done
say "binaries from commit $(cat "$BIN/COMMIT" 2>/dev/null | tr '\n' ' ')"

# Binaries built on another image may not start here (a newer glibc, say):
# then build them here from the sources with nvcc and gcc alone (about a
# minute on 16 cores) and use those.
probe=$("$BIN/bench_cuda" --probe-loads 2>&1)
rc=$?
if [ $rc -eq 126 ] || [ $rc -eq 127 ] || echo "$probe" | grep -q 'GLIBC\|loading shared librar'; then
    say "carried binaries do not start here (exit $rc: $(echo "$probe" | head -1)); building them here"
    if ! timeout 300 bash scripts/build-cuda-standalone.sh /tmp/di-cuda-standalone >"$OUT/standalone-build.log" 2>&1; then
        tail -20 "$OUT/standalone-build.log"
        say "FAILED: the standalone build failed too (standalone-build.log)"
        exit 2
    fi
    BIN=/tmp/di-cuda-standalone
    say "using binaries built here from the working tree"
fi

status=0
timeout "$TEST_TIMEOUT_S" env DI_CUDA_REQUIRE=1 "$BIN/test_cuda" >"$OUT/test_cuda.log" 2>&1
rc=$?
cat "$OUT/test_cuda.log"
case $rc in
0) say "test_cuda: passed ($(tail -1 "$OUT/test_cuda.log"))" ;;
124) say "test_cuda: TIMED OUT after ${TEST_TIMEOUT_S}s"; status=1 ;;
126 | 127) say "test_cuda: could not start (exit $rc): the binary does not run on this image (see test_cuda.log)"; status=1 ;;
*) say "test_cuda: FAILED (exit $rc; failures in test_cuda.log)"; status=1 ;;
esac

timeout "$BENCH_TIMEOUT_S" "$BIN/bench_cuda" --out "$OUT/bench_cuda.md" >"$OUT/bench_cuda.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
    say "bench_cuda: done (table in bench_cuda.md)"
    cat "$OUT/bench_cuda.md" | tee -a "$OUT/summary.md"
else
    tail -20 "$OUT/bench_cuda.log"
    say "bench_cuda: FAILED (exit $rc$([ $rc -eq 124 ] && echo ", timed out after ${BENCH_TIMEOUT_S}s"))"
    status=1
fi
exit $status
