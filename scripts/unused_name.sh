# shellcheck shell=bash
# unused_name FILE: FILE if no such file exists, else the first free name with _2, _3, ... before its
# extension (gemm_x_2026-11-29.txt -> gemm_x_2026-11-29_2.txt), so that a script run twice on one day
# keeps both result files. Sourced by scripts/gpu_common.sh, bench/compare_train.sh and bench/seeds.sh.
unused_name() {
  local name=$1 stem=$1 ext='' n=2
  if [[ ${1##*/} == ?*.* ]]; then
    stem=${1%.*}
    ext=.${1##*.}
  fi
  while [[ -e $name ]]; do name=${stem}_$((n++))$ext; done
  echo "$name"
}
