#!/usr/bin/env bash
# The convolution ladder on a GPU machine, in one command: build, run the CUDA conv tests, run the
# small-shape tests under compute-sanitizer (memcheck and racecheck), run the benchmark against cuDNN.
# Everything is written to bench/results/conv_<gpu>_<date>.txt (with the commit and the commands).
#
#   bench/gpu_conv.sh            (environment: HALFLING_BUILD=build dir, default build-gpu;
#                                 CUDA_ARCH=90; HALFLING_JOBS=16; BATCH=128)
#
# Exits non-zero if any step failed; the later steps still run so one file shows everything.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build-gpu}
arch=${CUDA_ARCH:-90}
jobs=${HALFLING_JOBS:-16}
batch=${BATCH:-128}
# The shapes that are quick enough for the sanitizers (not the LeNet/VGG layers).
small='ConvCuda.SmallShapes*:ConvCuda.BetaAccumulates*:ConvCuda.BiasRelu*:ConvCuda.Im2colGemmChunks*'

cmake -S "$root" -B "$build" -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_BUILD_TYPE=Release || exit 1
cmake --build "$build" -j"$jobs" --target test_kernels conv_bench || exit 1

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpu=${gpu:-unknown GPU}
tag=$(echo "$gpu" | tr -c 'A-Za-z0-9\n' '_' | tr -s '_' | sed 's/_$//')
mkdir -p "$root/bench/results"
out="$root/bench/results/conv_${tag}_$(date -u +%F).txt"
sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")

failed=()
step() {  # step NAME COMMAND...: run it, print its status, remember a failure
  local name=$1
  shift
  echo
  echo "## $name"
  echo "\$ $*"
  "$@"
  local rc=$?
  echo "## $name: exit status $rc"
  [[ $rc -eq 0 ]] || failed+=("$name")
}

{
  echo "# conv ladder on $gpu"
  echo "# date: $(date -u +%FT%TZ)"
  echo "# git: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: bench/gpu_conv.sh (build $build, CUDA_ARCH=$arch, BATCH=$batch)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
  step "tests" "$build/tests/test_kernels" --gtest_filter='ConvCuda*'
  step "memcheck" "$sanitizer" --tool memcheck --error-exitcode 1 "$build/tests/test_kernels" --gtest_filter="$small"
  step "racecheck" "$sanitizer" --tool racecheck --error-exitcode 1 "$build/tests/test_kernels" --gtest_filter="$small"
  step "benchmark" "$build/bench/conv_bench" --batch "$batch"
  echo
  if [[ ${#failed[@]} -eq 0 ]]; then echo "# all steps passed"; else echo "# FAILED: ${failed[*]}"; fi
} 2>&1 | tee "$out"
echo "written: $out" >&2
grep -q '^# all steps passed' "$out"
