#!/usr/bin/env bash
# The GEMM ladder on a GPU machine, in one command (within HALFLING_BUDGET, default 540 s, build
# included): build what it needs, run every GEMM test and tutorial 04's tests, compute-sanitizer memcheck
# and racecheck on the small cases, the benchmark against cuBLAS and tutorial 04 on the GPU.
#
#   bench/gpu_gemm.sh        (scripts/gpu_check.sh bench-gemm runs it with HALFLING_SANITIZE=0)
#
# Writes gemm_<gpu>_<date>.txt into $HALFLING_RESULTS, else $OUT (the folder a device session copies
# back), else bench/results/. A failing step is recorded and the next one runs; the file ends with every
# step's status and the exit status is non-zero if any step failed. Needs no data set.
# Environment: HALFLING_SANITIZE=0 skips memcheck/racecheck; the rest in scripts/gpu_common.sh
# (CUDA_ARCH=90, HALFLING_BUILD=build-gpu, HALFLING_JOBS=16, HALFLING_COMMIT, HALFLING_BUDGET).
set -uo pipefail
# shellcheck source=scripts/gpu_common.sh
source "$(dirname "$0")/../scripts/gpu_common.sh"
start_results gemm "GEMM ladder on $gpu"

build_targets test_kernels test_tutorials gemm_bench 04_gemm_ladder
check_gpu

# Every GEMM test: the CUDA ladder (sweep, epilogues, alignment, FP32 accumulation, registry) and the CPU GEMM;
# the tests that run wmma_pipelined's cluster tiles in a program of their own, here and under the
# sanitizers, and the cluster tiles' benchmark rows too (scripts/gpu_common.sh, cluster_tiles, says why).
step gemm-tests timeout 240 "$build/tests/test_kernels" --gtest_filter="*Gemm*-$cluster_memcheck:$cluster_race"
step gemm-tests-cluster timeout 120 "$build/tests/test_kernels" --gtest_filter="$cluster_memcheck:$cluster_race"
step tutorial-04-test timeout 120 "$build/tests/test_tutorials" --gtest_filter='Tutorial04*'

# The sanitizers on the small cases only (each kernel launch is ~100x slower under them).
# racecheck without CudaGemm.AccumulatesInFp32 (K = 4096: past 150 s under racecheck on an H200).
small='Shapes/CudaGemmSweep.*/s1x1x1:Shapes/CudaGemmSweep.*/s7x13x5:Shapes/CudaGemmSweep.*/s17x33x65'
small+=':CudaGemm.NaNPassesThroughBiasAndRelu:CudaGemm.MisalignedPointers*'
small+=':CudaGemm.SplitKEpiloguesApplyOnceToTheWholeSum'  # split-K: the sliced kernels and the second pass
sanitize_kernels "$small:CudaGemm.AccumulatesInFp32:CudaGemm.NonDenseLeadingDimensions" "$small"
sanitize_kernels "$cluster_memcheck" "$cluster_race" cluster  # with wmma_pipelined's tuning tiles (--sweep)

# --sweep: also wmma_pipelined with each candidate tile (kernels/cuda/gemm/wmma_pipelined_tiles.h), the
# cluster tiles each in a program of its own.
step benchmark timeout 240 "$build/bench/gemm_bench" --runs 20 --sweep --sweep-tiles unclustered
bench_cluster_tiles 20
step tutorial-04 timeout 120 "$build/tutorials/04_gemm_ladder" --device cuda
finish
exit
