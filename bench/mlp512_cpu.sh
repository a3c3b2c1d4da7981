#!/usr/bin/env bash
# MLP-512 on MNIST, FP32, CPU: test accuracy and seconds per epoch over several seeds, written to
# bench/results/mlp512_cpu_<date>.txt together with the machine and the command.
#   bench/mlp512_cpu.sh [EPOCHS] [SEEDS]      (defaults: 2 epochs, seeds 0..4)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}
epochs=${1:-2}
seeds=${2:-5}
threads=${OMP_NUM_THREADS:-2}
out="$root/bench/results/mlp512_cpu_$(date +%F).txt"
prog="$build/tutorials/03_mlp_mnist"
[[ -x $prog ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
{
  echo "# MLP-512 (784-512-512-10) on MNIST, FP32, CPU, batch 128, SGD lr 0.05 momentum 0.9"
  echo "# date: $(date -u +%FT%TZ)"
  echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores," \
       "$(grep -o -m1 -E 'avx512f|avx2' /proc/cpuinfo | head -1), OMP_NUM_THREADS=$threads"
  echo "# git: ${HALFLING_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "# command: OMP_NUM_THREADS=$threads bench/mlp512_cpu.sh $epochs $seeds"
  echo "#   which runs, per seed: build/tutorials/03_mlp_mnist --device cpu --epochs $epochs --seed S"
  for ((s = 0; s < seeds; ++s)); do
    echo "## seed $s"
    OMP_NUM_THREADS=$threads "$prog" --device cpu --epochs "$epochs" --seed "$s" | grep -E "^(epoch|final)"
  done
} | tee "$out"
echo "written: $out" >&2
