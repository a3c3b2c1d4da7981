#!/usr/bin/env bash
# MLP-512 on MNIST, FP32, CPU: test accuracy and seconds per epoch over several seeds, written to
# OUT (default bench/results/mlp512_cpu_<date>.txt) together with the machine and the command.
#   bench/mlp512_cpu.sh [EPOCHS] [SEEDS]      (defaults: 2 epochs, seeds 0..4)
# The results are written to a temporary file and moved to OUT only when every run succeeded, so a
# failed run never truncates or half-writes a results file (a committed one included).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}
epochs=${1:-2}
seeds=${2:-5}
threads=${OMP_NUM_THREADS:-2}
out=${OUT:-$root/bench/results/mlp512_cpu_$(date +%F).txt}
prog="$build/tutorials/03_mlp_mnist"
[[ -x $prog ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
work=$(mktemp -d)
# On any failure (set -e, pipefail) the script stops, and OUT is left as it was.
finish() {
  local status=$?
  rm -rf -- "$work"
  ((status == 0)) || echo "bench/mlp512_cpu.sh: failed (exit $status); $out was left as it was" >&2
}
trap finish EXIT
# The widest vector extension the CPU has. Not the first of the two on its flags line: avx2 comes before
# avx512f there, so a search for either finds avx2 on an AVX-512 machine.
simd=none
if grep -qw avx512f /proc/cpuinfo; then
  simd=avx512f
elif grep -qw avx2 /proc/cpuinfo; then
  simd=avx2
fi
{
  echo "# MLP-512 (784-512-512-10) on MNIST, FP32, CPU, batch 128, SGD lr 0.05 momentum 0.9"
  echo "# date: $(date -u +%FT%TZ)"
  # nproc --all: nproc alone answers OMP_NUM_THREADS when it is set, not the machine's cores.
  echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores," \
       "$simd, OMP_NUM_THREADS=$threads"
  echo "# git: ${HALFLING_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "# command: OMP_NUM_THREADS=$threads bench/mlp512_cpu.sh $epochs $seeds"
  echo "#   which runs, per seed: build/tutorials/03_mlp_mnist --device cpu --epochs $epochs --seed S"
  for ((s = 0; s < seeds; ++s)); do
    echo "## seed $s"
    OMP_NUM_THREADS=$threads "$prog" --device cpu --epochs "$epochs" --seed "$s" | grep -E "^(epoch|final)"
  done
} | tee "$work/results.txt"
mv -f -- "$work/results.txt" "$out"
echo "written: $out" >&2
