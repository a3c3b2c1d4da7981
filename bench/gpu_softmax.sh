#!/usr/bin/env bash
# The softmax ladder on a GPU machine, in one command (within HALFLING_BUDGET, default 540 s, build
# included): build what it needs, run the softmax tests (CPU and CUDA, the framework's gradchecks and
# tutorial 08's tests), compute-sanitizer memcheck and racecheck on the CUDA softmax tests, the benchmark,
# the PyTorch comparison (if torch imports) and tutorial 08 on the GPU.
#
#   bench/gpu_softmax.sh     (scripts/gpu_check.sh bench-softmax runs it with HALFLING_SANITIZE=0)
#
# Writes softmax_<gpu>_<date>.txt into $HALFLING_RESULTS, else $OUT (the folder a device session copies
# back), else bench/results/. A failing step is recorded and the next one runs; the file ends with every
# step's status and the exit status is non-zero if a build, a test, a sanitizer run or a benchmark failed.
# Needs no data set.
# Environment: HALFLING_SANITIZE=0 skips memcheck/racecheck; the rest in scripts/gpu_common.sh
# (CUDA_ARCH=90, HALFLING_BUILD=build-gpu, HALFLING_JOBS=16, HALFLING_COMMIT, HALFLING_BUDGET).
set -uo pipefail
# shellcheck source=scripts/gpu_common.sh
source "$(dirname "$0")/../scripts/gpu_common.sh"
start_results softmax "softmax ladder on $gpu"

build_targets test_kernels test_framework test_tutorials softmax_bench 08_softmax
check_gpu

step softmax-tests timeout 180 "$build/tests/test_kernels" \
  --gtest_filter='SoftmaxCpu*:SoftmaxCuda*:CudaSoftmax*'  # the softmax gradchecks are test_framework's Gradcheck.*
step framework-tests timeout 120 "$build/tests/test_framework" --gtest_filter='Gradcheck.*:Ops.*:Amp.*'
step tutorial-08-test timeout 120 "$build/tests/test_tutorials" --gtest_filter='Tutorial08*'

# The sanitizers slow kernels 10-100x: the CUDA tests only, without EveryRungForwardAgainstReference
# (every rung on shapes up to 70000 x 33: minutes under a sanitizer; the rungs' forward kernels still run
# in ScalarPathForMisalignedBuffers, Fp16OverflowLessonOnTheGpu and the cross-entropy tests).
san='SoftmaxCuda*:CudaSoftmax*-SoftmaxCuda.EveryRungForwardAgainstReference'
sanitize_kernels "$san"

step benchmark timeout 200 "$build/bench/softmax_bench" --sweep
if timeout 60 python3 -c 'import torch' >/dev/null 2>&1; then
  step pytorch timeout 150 python3 bench/pytorch/softmax.py
else
  record pytorch skipped "torch does not import here"
fi
step tutorial-08 timeout 90 "$build/tutorials/08_softmax" --device cuda
finish
exit
