#!/usr/bin/env bash
# The GEMM ladder on a GPU machine, in one command: build, test, sanitize, benchmark. Everything goes
# to bench/results/gemm_<gpu>_<date>.txt (and the terminal). A failing step is recorded and the
# script goes on to the next one; the summary at the end lists every step's status.
#   bench/gpu_gemm.sh            (env: CUDA_ARCH=90, HALFLING_JOBS=16, HALFLING_BUILD=build-gpu)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
arch=${CUDA_ARCH:-90}
jobs=${HALFLING_JOBS:-16}
build=${HALFLING_BUILD:-build-gpu}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
gpu=${gpu:-unknown-gpu}
mkdir -p bench/results
out="bench/results/gemm_$(echo "$gpu" | tr -c 'A-Za-z0-9\n' '_' | sed 's/__*/_/g; s/_$//')_$(date -u +%F).txt"
summary=()

# step NAME COMMAND...: run it, append its output to the results file, record ok / FAILED (rc).
step() {
  local name=$1
  shift
  echo "## $name: $*" | tee -a "$out"
  local rc=0
  "$@" 2>&1 | tee -a "$out" || rc=${PIPESTATUS[0]}
  if [[ $rc -eq 0 ]]; then summary+=("ok      $name"); else summary+=("FAILED  $name (exit $rc)"); fi
  echo | tee -a "$out"
}

{
  echo "# GEMM ladder on $gpu"
  echo "# date: $(date -u +%FT%TZ)"
  echo "# git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: bench/gpu_gemm.sh (CUDA_ARCH=$arch HALFLING_BUILD=$build)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true
  echo
} | tee "$out"

step configure cmake -S . -B "$build" -DCMAKE_CUDA_ARCHITECTURES="$arch"
step build cmake --build "$build" -j"$jobs" --target test_kernels test_tutorials gemm_bench 04_gemm_ladder

# Every GEMM test: the CUDA ladder (sweep, epilogues, alignment, FP32 accumulation, registry) and the CPU GEMM.
step gemm-tests "$build/tests/test_kernels" --gtest_filter='*Gemm*'
step tutorial-04-test "$build/tests/test_tutorials" --gtest_filter='Tutorial04*'

# The sanitizers on the small cases only (each kernel launch is ~100x slower under them).
small='Shapes/CudaGemmSweep.*/s1x1x1:Shapes/CudaGemmSweep.*/s7x13x5:Shapes/CudaGemmSweep.*/s17x33x65'
small+=':CudaGemm.AccumulatesInFp32:CudaGemm.NaNPassesThroughBiasAndRelu:CudaGemm.MisalignedPointers*'
step memcheck timeout 900 compute-sanitizer --tool memcheck --error-exitcode 1 \
  "$build/tests/test_kernels" --gtest_filter="$small:CudaGemm.NonDenseLeadingDimensions"
step racecheck timeout 900 compute-sanitizer --tool racecheck --error-exitcode 1 \
  "$build/tests/test_kernels" --gtest_filter="$small"

step benchmark "$build/bench/gemm_bench" --runs 20
step tutorial-04 "$build/tutorials/04_gemm_ladder" --device cuda

{
  echo "## summary"
  printf '%s\n' "${summary[@]}"
} | tee -a "$out"
echo "written: $out" >&2
