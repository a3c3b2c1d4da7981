#!/usr/bin/env bash
# End-to-end training speed, halfling next to PyTorch eager on the same machine, in one run
# (DESIGN.md §6: every figure a ratio from one run). Writes bench/results/train_<device>_<date>.txt, or,
# when that file exists (a run earlier the same day), the first free name with _2, _3, ... before .txt.
#
#   bench/compare_train.sh cpu  [MODELS] [EPOCHS]   # fp32 only (PyTorch's CPU autocast is bfloat16)
#   bench/compare_train.sh cuda [MODELS] [EPOCHS]   # fp32 and mixed (autocast FP16 + GradScaler)
#
# MODELS: comma-separated, default mlp512,lenet,vgg_small (cpu: mlp512,lenet). EPOCHS: default 3; the
# first is warm-up and each side reports the median of the others. Thread count: OMP_NUM_THREADS
# (default: all cores), the same for both. Needs a build (HALFLING_BUILD, default build/) and
# python3 with numpy and torch (Debian: python3-torch libopenblas0). MAX_STEPS=N stops every epoch of
# both sides after N steps (a quick check of the script, not a measurement). OUT=FILE writes the
# result there instead (with _2, _3, ... as above if FILE exists). PRECISIONS="fp32" (or "mixed") runs
# only those precisions (cuda: both by default), e.g. to give a slow configuration its own MAX_STEPS.
# HALFLING_COMMIT names the commit in the header (default: git rev-parse HEAD). PROFILE=1 passes
# --profile to both programs and appends their logs, with the per-step profiles (framework/profiler.h;
# torch.profiler), to the result: their s/epoch are then slowed by the profiling and are not
# measurements.
# HALFLING_FLAGS="--cuda-graph" (or any bench/train flags) goes to halfling's runs only, and into the
# header: e.g. halfling's step replayed as a CUDA graph against PyTorch eager. A flag that would make the
# two sides train something else (its data, order, model, precision, loss scaling, schedule or steps:
# --batch, --seed, --lr, --loss-scale, ...) is refused there: the script sets those for both sides; so
# is one that prints and exits (--help, --list-variants).
#
# PyTorch on the CPU has two thread pools: its own OpenMP pool (convolutions, elementwise ops) and
# OpenBLAS's (the GEMMs of Linear layers; Debian's OpenBLAS is the pthreads build). Given N threads
# each, the two pools fight over N cores: measured on 2 cores, MLP-512 took 6.7-8.1 s per epoch instead
# of 1.7-1.9 s. So with N > 1 threads PyTorch runs twice, as (torch N, OpenBLAS 1) and (torch 1,
# OpenBLAS N), and the table keeps its faster layout: halfling is compared with PyTorch at its best.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}
device=${1:?usage: bench/compare_train.sh cpu|cuda [MODELS] [EPOCHS]}
case $device in
  cpu) models=${2:-mlp512,lenet}; precisions="fp32" ;;
  cuda) models=${2:-mlp512,lenet,vgg_small}; precisions="fp32 mixed" ;;
  *) echo "bench/compare_train.sh: device must be cpu or cuda, got '$device'" >&2; exit 2 ;;
esac
if [[ -n ${PRECISIONS:-} ]]; then
  for p in $PRECISIONS; do
    [[ " $precisions " == *" $p "* ]] ||
      { echo "bench/compare_train.sh: PRECISIONS: '$p' is not one of '$precisions' on $device" >&2; exit 2; }
  done
  precisions=$PRECISIONS
fi
epochs=${3:-3}
read -r -a halfling_flags <<< "${HALFLING_FLAGS:-}"
for flag in "${halfling_flags[@]}"; do
  case ${flag%%=*} in
    --batch | --seed | --lr | --momentum | --epochs | --model | --precision | --loss-scale | --device | --data | \
      --schedule | --warmup-epochs | --max-steps | --export | --smoke)
      echo "bench/compare_train.sh: HALFLING_FLAGS: ${flag%%=*} would change what halfling trains but not what" \
        "PyTorch trains (the script sets it for both sides)" >&2
      exit 2
      ;;
    --help | -h | --list-variants)
      echo "bench/compare_train.sh: HALFLING_FLAGS: $flag prints and exits: there would be no run to compare" >&2
      exit 2
      ;;
  esac
done
steps=()
[[ -n ${MAX_STEPS:-} ]] && steps=(--max-steps "$MAX_STEPS")
[[ -n ${PROFILE:-} ]] && steps+=(--profile)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc --all)}  # nproc alone obeys OMP_NUM_THREADS
python=${PYTHON:-python3}
$python -c 'import numpy, torch' 2>/dev/null || python=/usr/bin/python3
$python -c 'import numpy, torch' || { echo "bench/compare_train.sh: python3 with numpy and torch is needed" >&2; exit 1; }
prog="$build/bench/train"
[[ -x $prog ]] || { echo "bench/compare_train.sh: $prog is missing; build first (scripts/build.sh)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$root/bench/results"
out=${OUT:-$root/bench/results/train_${device}_$(date +%F).txt}
declare -A dataset=([mlp512]=mnist [lenet]=mnist [vgg_small]=cifar10)

{
  echo "# bench/compare_train.sh $*"
  # HALFLING_COMMIT first: a copy of the tree on a GPU machine may carry a stale .git (the H200 logs of
  # 2026-11-23 say c706f6c for builds of later commits).
  echo "# date: $(date -u +%FT%TZ)   git: ${HALFLING_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS"
  # Other work on the machine changes CPU timings a lot: the load before the run is part of the record.
  echo "# load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
  [[ -n ${PROFILE:-} ]] && echo "# PROFILE=1: both sides profiled (slower); the logs with the profiles follow the table"
  [[ -n ${HALFLING_FLAGS:-} ]] && echo "# HALFLING_FLAGS=$HALFLING_FLAGS: passed to halfling's runs only"
  [[ -n ${MAX_STEPS:-} ]] && echo "# MAX_STEPS=$MAX_STEPS: each epoch stops after $MAX_STEPS steps; s/epoch covers those steps only"
  [[ $device == cuda ]] && echo "# gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
  echo "# pytorch: $($python -c 'import torch; print(torch.__version__)')"
  [[ $device == cuda ]] && echo "# pytorch TF32: off (bench/pytorch/train.py without --tf32): its fp32 convolutions" \
    "and matmuls run in FP32, as halfling's do; cuDNN benchmark on (it times its algorithms in the first epoch)"
  echo "# $epochs epochs each, median of epochs 2..$epochs; batch 128, SGD momentum 0.9, lr 0.05, same data and order"
} > "$work/header"
cat "$work/header"

: > "$work/results.jsonl"
: > "$work/profiles"
IFS=, read -r -a model_list <<< "$models"
for model in "${model_list[@]}"; do
  ds=${dataset[$model]:?unknown model $model}
  "$prog" --model "$model" --epochs "$epochs" --export "$work/$ds" > /dev/null
  for p in $precisions; do
    echo "## halfling $model $p" >&2
    "$prog" --model "$model" --precision "$p" --device "$device" --epochs "$epochs" "${steps[@]}" \
      "${halfling_flags[@]}" --json | tee "$work/log" >&2
    tail -n 1 "$work/log" >> "$work/results.jsonl"
    [[ -n ${PROFILE:-} ]] && { echo "## halfling $model $p"; cat "$work/log"; } >> "$work/profiles"
    layouts=("$OMP_NUM_THREADS:1")  # torch threads : OpenBLAS threads
    [[ $device == cpu && $OMP_NUM_THREADS -gt 1 ]] && layouts+=("1:$OMP_NUM_THREADS")
    for layout in "${layouts[@]}"; do
      echo "## pytorch $model $p (threads: torch ${layout%:*}, OpenBLAS ${layout#*:})" >&2
      OPENBLAS_NUM_THREADS=${layout#*:} $python "$root/bench/pytorch/train.py" --data "$work/$ds" --model "$model" \
        --precision "$p" --device "$device" --epochs "$epochs" --threads "${layout%:*}" "${steps[@]}" --json |
        tee "$work/log" >&2
      [[ -n ${PROFILE:-} ]] && { echo "## pytorch $model $p (threads: torch ${layout%:*}, OpenBLAS ${layout#*:})"; cat "$work/log"; } >> "$work/profiles"
      tail -n 1 "$work/log" | sed "s/}\$/, \"threads\": \"torch ${layout%:*}, OpenBLAS ${layout#*:}\"}/" >> "$work/results.jsonl"
    done
  done
  rm -rf "${work:?}/$ds"
done

# One table: halfling / PyTorch ratios (s/epoch: lower is better for halfling).
$python - "$work/results.jsonl" > "$work/table" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows:  # PyTorch may have run in two thread layouts: keep its faster one
    key = (r["framework"], r["model"], r["precision"])
    if key not in by or r["seconds_per_epoch"] < by[key]["seconds_per_epoch"]:
        by[key] = r
print("| model | precision | halfling s/epoch | PyTorch s/epoch | ratio (halfling/PyTorch) | halfling img/s "
      "| PyTorch img/s | halfling acc | PyTorch acc | halfling peak MiB | PyTorch peak MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
fmt = lambda v, f: "n/a" if v is None else f.format(v)
for (fw, model, prec), h in by.items():
    if fw != "halfling":
        continue
    t = by.get(("pytorch", model, prec), {})
    ratio = h["seconds_per_epoch"] / t["seconds_per_epoch"] if t else None
    print(f"| {model} | {prec} | {h['seconds_per_epoch']:.3f} | {fmt(t.get('seconds_per_epoch'), '{:.3f}')} "
          f"| {fmt(ratio, '{:.2f}x')} | {h['images_per_second']:.0f} | {fmt(t.get('images_per_second'), '{:.0f}')} "
          f"| {100 * h['test_accuracy']:.2f}% | {fmt(t.get('test_accuracy') and 100 * t['test_accuracy'], '{:.2f}%')} "
          f"| {h['peak_mib']:.1f} | {fmt(t.get('peak_mib'), '{:.1f}')} |")
for r in rows:
    if r["framework"] == "pytorch" and "threads" in r:
        kept = " (kept)" if by.get(("pytorch", r["model"], r["precision"])) is r else ""
        print(f"# pytorch {r['model']} {r['precision']}, threads {r['threads']}: {r['seconds_per_epoch']:.3f} s/epoch{kept}")
EOF
# A run earlier the same day keeps its file: this one takes the first free name of OUT, OUT_2, OUT_3, ...
# shellcheck source=scripts/unused_name.sh
source "$(dirname "$0")/../scripts/unused_name.sh"
wanted=$out
out=$(unused_name "$wanted")
[[ $out == "$wanted" ]] || echo "bench/compare_train.sh: $wanted exists (an earlier run): writing $out" >&2
cat "$work/header" "$work/table" "$work/profiles" > "$out"
cat "$work/table"
echo "written: $out" >&2
