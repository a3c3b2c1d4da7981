#!/usr/bin/env bash
# The batch-norm variants on a GPU machine, in one command (within HALFLING_BUDGET, default 540 s, build
# included): build what it needs, run the batch-norm tests (the CPU reference, the split plan, every
# CUDA variant against the CPU), compute-sanitizer memcheck and racecheck on the CUDA batch-norm tests,
# then the benchmark.
#
#   bench/gpu_bn.sh     (scripts/gpu_check.sh bench-bn runs it with HALFLING_SANITIZE=0)
#
# Writes bn_<gpu>_<date>.txt into $HALFLING_RESULTS, else $OUT (the folder a device session copies
# back), else bench/results/. A failing step is recorded and the next one runs; the file ends with every
# step's status and the exit status is non-zero if a build, a test, a sanitizer run or a benchmark failed.
# Needs no data set.
# Environment: HALFLING_SANITIZE=0 skips memcheck/racecheck; the rest in scripts/gpu_common.sh
# (CUDA_ARCH=90, HALFLING_BUILD=build-gpu, HALFLING_JOBS=16, HALFLING_COMMIT, HALFLING_BUDGET).
set -uo pipefail
# shellcheck source=scripts/gpu_common.sh
source "$(dirname "$0")/../scripts/gpu_common.sh"
start_results bn "batch-norm variants on $gpu"

build_targets test_kernels bn_bench
check_gpu

step bn-tests timeout 180 "$build/tests/test_kernels" --gtest_filter='BatchNormCpu.*:BatchNormSplit.*:CudaBatchNorm.*'
# The split kernels reduce through shared memory (block_reduce): racecheck as well as memcheck.
# Not ChannelsPastOneGridOfThreads under the sanitizers: 33.5M elements and 16.7M blocks per pass.
sanitize_kernels 'CudaBatchNorm.*-CudaBatchNorm.ChannelsPastOneGridOfThreads'
step benchmark timeout 150 "$build/bench/bn_bench"
finish
exit
