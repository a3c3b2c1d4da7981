#!/usr/bin/env bash
# Everything the project must verify on a GPU, in stages small enough for a time-limited GPU session
# (each stage well under 10 minutes on an H100/H200 with 16 cores). Run them in order on one machine;
# the build directory carries over between stages:
#
#   scripts/gpu_check.sh build      # configure + build everything for this GPU (sm_90 by default)
#   scripts/gpu_check.sh test       # the whole CTest suite: every CUDA test runs instead of skipping
#   scripts/gpu_check.sh sanitize   # compute-sanitizer memcheck on every CUDA test (small shapes),
#                                   # racecheck on the kernels that use shared memory
#   scripts/gpu_check.sh bench      # bench/gpu_gemm.sh, gpu_softmax.sh, gpu_conv.sh (their own files)
#   scripts/gpu_check.sh train      # the end-to-end runs: MLP-512 and LeNet (tutorial 05, bench/compare_train.sh)
#
# Each stage writes bench/results/gpu_<stage>_<gpu>_<date>.txt with the GPU, the date, the commit and
# every command, and exits non-zero if anything failed (the later commands of the stage still run).
# Environment: HALFLING_BUILD (default build-gpu), CUDA_ARCH (90), HALFLING_JOBS (16), HALFLING_DATA.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
stage=${1:?usage: scripts/gpu_check.sh build|test|sanitize|bench|train}
case $stage in build | test | sanitize | bench | train) ;; *)
  echo "scripts/gpu_check.sh: unknown stage '$stage' (build, test, sanitize, bench, train)" >&2
  exit 2 ;;
esac
export HALFLING_BUILD=${HALFLING_BUILD:-$root/build-gpu}
build=$HALFLING_BUILD
arch=${CUDA_ARCH:-90}
jobs=${HALFLING_JOBS:-16}

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpu=${gpu:-no_gpu}
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '_' | sed 's/^_*//; s/_*$//')
mkdir -p bench/results
out="bench/results/gpu_${stage}_${slug}_$(date -u +%F).txt"
status=0
{
  echo "# scripts/gpu_check.sh $stage"
  echo "# gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)"
  echo "# date: $(date -u +%FT%TZ)   git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee "$out"

run() {  # run a command, log it and its output, remember a failure
  echo "\$ $*" | tee -a "$out"
  "$@" 2>&1 | tee -a "$out"
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] || { echo "!! exit status $rc" | tee -a "$out"; status=1; }
}

# Every CUDA test, by GoogleTest filter, per test executable.
cuda_filter='Cuda*:*Cuda*:*/CudaGemmSweep.*:Tutorial04.EveryCudaRung*'
small_gemm='-*CudaGemmSweep*s1000x1000x1000:*CudaGemmSweep*s1024x4096x768:*CudaGemmSweep*s128x784x512'

case $stage in
  build)
    run cmake -S . -B "$build" -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_BUILD_TYPE=Release
    run cmake --build "$build" -j"$jobs"
    ;;
  test)
    [[ -n $(nvidia-smi -L 2>/dev/null) ]] || { echo "!! no GPU visible (nvidia-smi -L)" | tee -a "$out"; status=1; }
    run ctest --test-dir "$build" -j4 --output-on-failure --timeout 900
    # The counts that matter here: how many CUDA tests ran rather than skipped.
    run bash -c "grep -c 'Skipped' '$build/Testing/Temporary/LastTest.log' || true"
    ;;
  sanitize)
    for t in test_kernels test_framework test_datasets; do
      run timeout 1200 compute-sanitizer --tool memcheck --error-exitcode 1 \
        "$build/tests/$t" --gtest_filter="$cuda_filter$small_gemm"
    done
    # racecheck: every kernel family that uses shared memory (GEMM tiles, softmax/BN/reduction trees,
    # implicit-GEMM conv tiles), on small shapes.
    run timeout 1200 compute-sanitizer --tool racecheck --error-exitcode 1 "$build/tests/test_kernels" \
      --gtest_filter="*CudaGemmSweep*s1x1x1:*CudaGemmSweep*s7x13x5:*CudaGemmSweep*s17x33x65:CudaGemm.AccumulatesInFp32:SoftmaxCuda.*:CudaReduce.*:CudaOptim.*:CudaBatchNorm.*:CudaPool.*:ConvCuda.SmallShapes*:ConvCuda.BetaAccumulates*"
    ;;
  bench)
    run bench/gpu_gemm.sh
    run bench/gpu_softmax.sh
    run bench/gpu_conv.sh
    run "$build/bench/loader_throughput"
    ;;
  train)
    data=${HALFLING_DATA:-$root/data}
    run "$build/tutorials/05_mixed_precision" --device cuda --epochs 5 --data "$data/mnist"
    run "$build/tutorials/07_conv_lenet" --device cuda --precision mixed --epochs 5 --data "$data/mnist"
    run bench/compare_train.sh cuda mlp512,lenet 3
    ;;
esac
echo "# stage $stage: $([[ $status -eq 0 ]] && echo ok || echo FAILED)" | tee -a "$out"
echo "written: $out" >&2
exit $status
