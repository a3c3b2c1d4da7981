#!/usr/bin/env bash
# Configure and build halfling into ./build (or $HALFLING_BUILD). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DHALFLING_CUDA=OFF; `--target NAME` (any number of them)
# builds only those targets, e.g. scripts/build.sh --target 05_mixed_precision. The configure
# output is kept in <build>/configure.log (and shown when configuring fails).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}
# nvcc is often installed outside the PATH.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# Split the arguments: --target NAME / --target=NAME go to the build step, the rest to configure.
configure_args=()
targets=()
while (($# > 0)); do
  case $1 in
    --target)
      [[ $# -ge 2 ]] || { echo "build.sh: --target needs a target name" >&2; exit 2; }
      targets+=("$2")
      shift 2
      ;;
    --target=*) targets+=("${1#--target=}"); shift ;;
    *) configure_args+=("$1"); shift ;;
  esac
done

# On a machine with no GPU a CUDA build can only be compiled, never run, so it compiles for the two
# architectures that reach every `__CUDA_ARCH__` branch in the code (all guards read >= 700, >= 800 or
# >= 900: sm_75 takes the branches below 800, sm_90 the others) instead of CMakeLists.txt's three: sm_80
# adds no code path, and leaving it out takes about a third off each CUDA file's compile (93 s -> 63 s
# for kernels/cuda/gemm/wmma_pipelined.cu). Only when nothing chose: an architecture list among the
# arguments or in the build's cache, a CPU-only build (asked for here or cached), or a visible GPU all
# leave the default alone. To build here for a GPU elsewhere (an A100: 80), pass
# -DCMAKE_CUDA_ARCHITECTURES=... yourself.
# The same condition compiles device code unoptimized (HALFLING_CUDA_CHECK_ONLY, CMakeLists.txt): every
# file still passes cicc and ptxas for both architectures, so a compile error is still an error, and
# the CUDA half of the build drops from about 630 to about 370 CPU-seconds (measured 2026-11-27, 2 cores,
# CUDA 13). A library built so, run on a GPU, prints a warning and marks its device description.
#
# A definition is recognised in each of cmake's spellings: -DNAME=V, -DNAME:TYPE=V and -D NAME=V.
chosen=0
cuda_arg=""  # the last HALFLING_CUDA value among the arguments
prev=""
for arg in "${configure_args[@]}"; do
  def=""
  if [[ $prev == -D ]]; then
    def=$arg
  elif [[ $arg == -D?* ]]; then
    def=${arg#-D}
  fi
  prev=$arg
  [[ -n $def ]] || continue
  if [[ $def =~ ^CMAKE_CUDA_ARCHITECTURES(:[A-Za-z]+)?= ]]; then
    chosen=1
  elif [[ $def =~ ^HALFLING_CUDA(:[A-Za-z]+)?=(.*)$ ]]; then
    cuda_arg=${BASH_REMATCH[2]}
  fi
done
cache=$build/CMakeCache.txt
# CMakeLists.txt turns CUDA off only for the exact value OFF.
if [[ $cuda_arg == OFF ]] || { [[ -z $cuda_arg ]] && grep -q "^HALFLING_CUDA:[A-Z]*=OFF$" "$cache" 2>/dev/null; }; then
  chosen=1
fi
arch_args=()
if ((chosen == 0)) && ! grep -q "^CMAKE_CUDA_ARCHITECTURES:" "$cache" 2>/dev/null &&
  command -v nvcc >/dev/null 2>&1 && ! nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  echo "build.sh: no GPU visible: compiling CUDA code for sm_75 and sm_90 only, unoptimized (every code path; no GPU to run it)"
  arch_args=("-DCMAKE_CUDA_ARCHITECTURES=75;90" -DHALFLING_CUDA_CHECK_ONLY=ON)
fi

# The build folder, parents included, so that its configure log has somewhere to go.
mkdir -p -- "$build" || { echo "build.sh: cannot create the build folder $build (HALFLING_BUILD)" >&2; exit 1; }
log=$build/configure.log
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "${arch_args[@]}" "${configure_args[@]}" >"$log" 2>&1 || {
  cat "$log" >&2
  echo "build.sh: configuring $build failed (log: $log)" >&2
  exit 1
}
grep -E "halfling: CUDA backend" "$log" || true
target_args=()
((${#targets[@]} == 0)) || target_args=(--target "${targets[@]}")
cmake --build "$build" -j"${HALFLING_JOBS:-2}" "${target_args[@]}"
