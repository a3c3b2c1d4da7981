#!/usr/bin/env bash
# Configure and build halfling into ./build (or $HALFLING_BUILD). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DHALFLING_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}
# nvcc is often installed outside the PATH.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# On a machine with no GPU a CUDA build can only be compiled, never run, so it compiles for the two
# architectures that reach every `__CUDA_ARCH__` branch in the code (all guards read >= 700, >= 800 or
# >= 900: sm_75 takes the branches below 800, sm_90 the others) instead of CMakeLists.txt's three: sm_80
# adds no code path, and leaving it out takes about a third off each CUDA file's compile (93 s -> 63 s
# for kernels/cuda/gemm/wmma_pipelined.cu). Only when nothing chose: an architecture list among the
# arguments or in the build's cache, a CPU-only build, or a visible GPU all leave the default alone.
# To build here for a GPU elsewhere (an A100: 80), pass -DCMAKE_CUDA_ARCHITECTURES=... yourself.
# The same condition compiles device code unoptimized (HALFLING_CUDA_CHECK_ONLY, CMakeLists.txt): every
# file still passes cicc and ptxas for both architectures, so a compile error is still an error, and
# the CUDA half of the build drops from about 630 to about 370 CPU-seconds (measured 2026-11-27, 2 cores,
# CUDA 13). A library built so, run on a GPU, prints a warning and marks its device description.
arch_args=()
chosen=0
for arg in "$@"; do
  [[ $arg != -DCMAKE_CUDA_ARCHITECTURES=* && $arg != -DHALFLING_CUDA=OFF ]] || chosen=1
done
if ((chosen == 0)) && ! grep -q "^CMAKE_CUDA_ARCHITECTURES:" "$build/CMakeCache.txt" 2>/dev/null &&
  command -v nvcc >/dev/null 2>&1 && ! nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  echo "build.sh: no GPU visible: compiling CUDA code for sm_75 and sm_90 only, unoptimized (every code path; no GPU to run it)"
  arch_args=("-DCMAKE_CUDA_ARCHITECTURES=75;90" -DHALFLING_CUDA_CHECK_ONLY=ON)
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "${arch_args[@]}" "$@" >"$build.configure.log" 2>&1 || {
  cat "$build.configure.log" >&2
  exit 1
}
grep -E "halfling: CUDA backend" "$build.configure.log" || true
cmake --build "$build" -j"${HALFLING_JOBS:-2}"
