#!/usr/bin/env bash
# The convolution ladder on a GPU machine, in one command (within HALFLING_BUDGET, default 540 s, build
# included): build what it needs, run the CUDA conv tests, the small-shape tests under compute-sanitizer
# (memcheck and racecheck), and the benchmark against cuDNN (its column is missing if the build found no
# cuDNN; conv_bench says why).
#
#   bench/gpu_conv.sh        (scripts/gpu_check.sh bench-conv runs it with HALFLING_SANITIZE=0)
#
# Writes conv_<gpu>_<date>.txt into $HALFLING_RESULTS, else $OUT (the folder a device session copies
# back), else bench/results/: the configure and build output, every command and its output, and at the
# end every step's status. Exits non-zero if any step failed; the later steps still run so one file shows
# everything. Needs no data set.
# Environment: BATCH=128 (conv_bench --batch); HALFLING_SANITIZE=0 skips memcheck/racecheck; the rest in
# scripts/gpu_common.sh (CUDA_ARCH=90, HALFLING_BUILD=build-gpu, HALFLING_JOBS=16, HALFLING_COMMIT,
# HALFLING_BUDGET).
set -uo pipefail
# shellcheck source=scripts/gpu_common.sh
source "$(dirname "$0")/../scripts/gpu_common.sh"
batch=${BATCH:-128}
start_results conv "conv ladder on $gpu (BATCH=$batch)"

build_targets test_kernels conv_bench
check_gpu

# The CUDA conv tests: the ladder's own (ConvCuda*, with the registry) and the conv layer's passes
# against a float64 reference (CudaConv).
step tests timeout 240 "$build/tests/test_kernels" --gtest_filter='ConvCuda*:CudaConv.*'

# The shapes that are quick enough for the sanitizers (not the LeNet/VGG layers).
small='ConvCuda.SmallShapes*:ConvCuda.BetaAccumulates*:ConvCuda.BiasRelu*:ConvCuda.Im2colGemmChunks*'
small+=':ConvCuda.NhwcRungOnTheShapesItComputesItself'  # rung 4's cp.async ring on its own shapes
sanitize_kernels "$small"

step benchmark timeout 240 "$build/bench/conv_bench" --batch "$batch"
finish
exit
