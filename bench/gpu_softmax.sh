#!/usr/bin/env bash
# The softmax ladder on a GPU machine, in one command:
#   bench/gpu_softmax.sh
# builds build-gpu (sm_90, -j16), runs the softmax tests (CPU and CUDA), compute-sanitizer memcheck and
# racecheck on the CUDA softmax tests, the benchmark and the PyTorch comparison (if torch imports), and
# writes everything to bench/results/softmax_<gpu>_<date>.txt with the GPU name, the date and the
# commands. Exits non-zero if a build, a test or a sanitizer run fails (the results file says which).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build-gpu}
jobs=${HALFLING_JOBS:-16}
cd "$root"

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpu=${gpu:-unknown GPU}
day=$(date -u +%Y-%m-%d)
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '_' | sed 's/^_*//; s/_*$//')
mkdir -p bench/results
out=bench/results/softmax_${slug}_${day}.txt
status=0

say() { echo "$@" | tee -a "$out"; }
run() {  # run a command, log it and its output, remember a failure
  say ""
  say "\$ $*"
  "$@" 2>&1 | tee -a "$out"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    say "!! exit status $rc"
    status=1
  fi
  return 0
}

: >"$out"
say "# softmax ladder results: $gpu, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)"
say "# made by: bench/gpu_softmax.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 | tee -a "$out"

run cmake -S . -B "$build" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release
run cmake --build "$build" -j"$jobs" --target test_kernels test_framework test_tutorials softmax_bench 08_softmax
filter='SoftmaxCpu*:SoftmaxCuda*:CudaSoftmax*:Gradcheck.LogSoftmaxNllCrossEntropy'
run "$build/tests/test_kernels" --gtest_filter="$filter"
run "$build/tests/test_framework" --gtest_filter='Gradcheck.*:Ops.*:Amp.*'
run "$build/tests/test_tutorials" --gtest_filter='Tutorial08*'

if command -v compute-sanitizer >/dev/null 2>&1; then
  # The sanitizers slow kernels 10-100x: the CUDA tests only, and the heaviest shapes still run.
  for tool in memcheck racecheck; do
    run compute-sanitizer --tool "$tool" --error-exitcode 1 "$build/tests/test_kernels" --gtest_filter='SoftmaxCuda*'
  done
else
  say "!! compute-sanitizer not found: memcheck/racecheck NOT run"
  status=1
fi

run "$build/bench/softmax_bench"
if python3 -c 'import torch' >/dev/null 2>&1; then
  run python3 bench/pytorch/softmax.py
else
  say "(torch does not import here: no PyTorch comparison)"
fi
run "$build/tutorials/08_softmax" --device cuda

say ""
say "# overall: $([ $status -eq 0 ] && echo OK || echo FAILED)"
echo "results written to $out"
exit $status
