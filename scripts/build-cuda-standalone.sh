#!/usr/bin/env bash
# Fallback for the device machine: builds test_cuda and bench_cuda from the
# sources with nvcc and gcc alone (no CMake configure, so none of
# libdeepinfer's libraries -- jansson, libmicrohttpd, ... -- are needed:
# the CUDA test and benchmark use only src/base, src/tensor and
# src/kernels). scripts/device-check.sh runs it when the binaries carried
# from scripts/build-device.sh do not start there (another glibc, say).
#
#   bash scripts/build-cuda-standalone.sh OUTDIR    -> OUTDIR/test_cuda, OUTDIR/bench_cuda
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: build-cuda-standalone.sh OUTDIR}
mkdir -p "$out/obj"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CC=${CC:-gcc}
JOBS=${JOBS:-$(nproc)}
inc="-Iinclude -Isrc -Itests"
cflags="-std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter $inc"
cuflags="-std=c++17 -O3 -arch=sm_90 -fmad=false -Xcompiler -ffp-contract=off -D_GNU_SOURCE $inc"

# The C sources the two programs can pull in, as one static archive (the
# linker takes only the objects they reference).
srcs=$(ls src/base/alloc.c src/base/status.c src/base/threadpool.c src/tensor/*.c src/kernels/cpu/*.c \
        src/kernels/backend.c src/kernels/cuda/backend_cuda.c)
printf '%s\n' $srcs | xargs -P "$JOBS" -I{} sh -c '"$0" $1 -c "$2" -o "$3/obj/$(echo "$2" | tr / _).o"' "$CC" "$cflags" {} "$out"
ls src/kernels/cuda/*.cu | xargs -P "$JOBS" -I{} sh -c '"$0" $1 -c "$2" -o "$3/obj/$(echo "$2" | tr / _).o"' "$NVCC" "$cuflags" {} "$out"
rm -f "$out/libdi_cuda_standalone.a"
ar rcs "$out/libdi_cuda_standalone.a" "$out"/obj/src_*.o
cudart=$(dirname "$NVCC")/../lib64/libcudart_static.a
for prog in tests/kernels/test_cuda.c bench/cuda/bench_cuda.c; do
    name=$(basename "$prog" .c)
    "$CC" $cflags -c "$prog" -o "$out/obj/$name.o"
    g++ "$out/obj/$name.o" "$out/libdi_cuda_standalone.a" "$cudart" -lm -lpthread -ldl -lrt -o "$out/$name"
done
echo "build-cuda-standalone: $out/test_cuda $out/bench_cuda"
