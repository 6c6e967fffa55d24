#!/usr/bin/env bash
# Builds the CUDA kernel test and benchmark for the device machine (run it
# HERE, on the CPU machine): Release, -DDI_CUDA=ON, -DDI_NATIVE=OFF (the
# device machine's x86-64 CPU is unknown: no -march=native in the CPU
# reference kernels the test compares against), into build-device/, then
# copies the two binaries into build-device/carry/ -- the one folder a GPU
# session names in the device tool's `carry` (docs/CUDA.md):
#
#   bash scripts/build-device.sh
#   device run: command "bash scripts/device-check.sh", carry ["build-device/carry"]
#
# The binaries link the CUDA runtime and libstdc++ statically and
# nothing from libdeepinfer's dependencies (--as-needed), so they need only
# glibc (and libgcc_s) there; this script fails if that stops being true, or if the folder
# outgrows what the tool carries. BUILD_DEVICE and JOBS override the folder
# and the parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DEVICE:-build-device}
JOBS=${JOBS:-2}
MAX_CARRY_BYTES=$((48 * 1024 * 1024)) # the tool carries 64 MiB with the working tree; keep room for it

if ! command -v nvcc >/dev/null 2>&1 && [ -z "${CUDACXX:-}" ]; then
    echo "build-device: no nvcc on PATH (and CUDACXX unset): the CUDA toolkit is needed to build for the device" >&2
    exit 1
fi
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DDI_NATIVE=OFF -DDI_CUDA=ON >/dev/null
cmake --build "$B" -j "$JOBS" --target test_cuda bench_cuda

rm -rf "$B/carry"
mkdir -p "$B/carry"
cp "$B/test_cuda" "$B/bench_cuda" "$B/carry/"
git rev-parse --short HEAD >"$B/carry/COMMIT" 2>/dev/null || echo unknown >"$B/carry/COMMIT"
git status --porcelain --untracked-files=no | grep -q . && echo "+dirty" >>"$B/carry/COMMIT"

# Shared libraries the binaries need beyond glibc's own would be missing there.
for bin in "$B/carry/test_cuda" "$B/carry/bench_cuda"; do
    extra=$(ldd "$bin" | awk '{print $1}' | grep -Ev '^(linux-vdso\.so|libc\.so|libgcc_s\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|/lib64/ld-linux)' || true)
    if [ -n "$extra" ]; then
        echo "build-device: $bin needs libraries the device image may lack: $extra" >&2
        exit 1
    fi
    glibc=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
    echo "build-device: $(basename "$bin"): needs glibc only (newest symbol version $glibc)"
done
bytes=$(du -sb "$B/carry" | cut -f1)
if [ "$bytes" -gt "$MAX_CARRY_BYTES" ]; then
    echo "build-device: $B/carry is $bytes bytes, over the $MAX_CARRY_BYTES this script allows" >&2
    exit 1
fi
echo "build-device: $B/carry is $((bytes / 1024)) KiB ($(cat "$B/carry/COMMIT" | tr '\n' ' '))"
