#!/usr/bin/env bash
# On a lent GPU machine: unpacks what scripts/gpu_pack.sh packed into .gpu-carry/ (see its header),
# so that scripts/gpu_check.sh and bench/gpu_*.sh can run with HALFLING_PREBUILT=1.
#
#   bash scripts/gpu_unpack.sh && HALFLING_PREBUILT=1 scripts/gpu_check.sh test
#
# - the build goes back to its folder in the repository;
# - CMake wrote the build's absolute source path into ctest's files, the programs' run paths and the
#   tests' data paths: where this checkout lies elsewhere, that path is made a symbolic link to it;
# - the data sets go to data/ (MNIST as IDX files, CIFAR-10 as the JPEG folder tree);
# - the shared libraries the programs need and the loader cannot find here (cuBLAS, cuDNN: on such
#   machines they may live in the CUDA toolkit's lib64 or in PyTorch's Python packages) are looked for,
#   and their folders written to <build>/prebuilt_env.sh, which gpu_common.sh sources.
# Exit status non-zero, with the reason, only when the build itself cannot be unpacked. What is missing
# besides (a data set fetch.sh refused, a library no folder here has) is written to
# <build>/UNPACK_WARNINGS and the status is 0: the session's command goes on to gpu_check.sh, which
# records it as a failed step "unpack" and runs everything else (a missing cuDNN costs conv_bench, not
# the whole session).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
carry=${HALFLING_CARRY:-$root/.gpu-carry}  # HALFLING_CARRY: another folder (the tests use an empty one)
[[ -f $carry/build.tar.xz ]] || { echo "gpu_unpack.sh: no $carry/build.tar.xz (carry [\".gpu-carry\"] made by scripts/gpu_pack.sh)" >&2; exit 2; }

xz -dc "$carry/build.tar.xz" | tar -C "$root" -xf -
# The build's folder: the first component of the archive's paths (awk reads the whole listing: a reader
# that stops early would kill tar with SIGPIPE, which pipefail reports).
build=$(xz -dc "$carry/build.tar.xz" | tar -tf - | awk 'NR == 1 {sub("/.*", ""); print}')
meta=$root/$build/PREBUILT
source_dir=$(sed -n 's/^source_dir=//p' "$meta")
echo "build: $build ($(head -1 "$meta"))"
warnings=$root/$build/UNPACK_WARNINGS
rm -f "$warnings"
warn() {
  echo "gpu_unpack.sh: $*" >&2
  echo "gpu_unpack.sh: $*" >>"$warnings"
}

if [[ $source_dir != "$root" ]]; then
  if [[ -e $source_dir || -L $source_dir ]]; then
    [[ $(cd "$source_dir" && pwd -P) == $(pwd -P) ]] ||
      { echo "gpu_unpack.sh: the build's source folder $source_dir exists here and is not this checkout" >&2; exit 1; }
  else
    mkdir -p "$(dirname "$source_dir")"
    ln -s "$root" "$source_dir"
    echo "linked $source_dir -> $root (the build's absolute paths)"
  fi
fi

mkdir -p data
if [[ -f $carry/mnist.tar.xz ]]; then
  xz -dc "$carry/mnist.tar.xz" | tar -C "$root" -xf -
  echo "data/mnist: $(find data/mnist -type f | wc -l) files"
fi
if [[ -f $carry/cifar10-jpg.tar.gz ]]; then
  rm -rf data/cifar10
  # The archive's layout (cifar10/{train,test}/<class>/*.jpg, or one folder more) is what
  # datasets/fetch.sh cifar10 --from reads; fetch.sh is the one place that knows it.
  if HALFLING_DATA=$root/data bash datasets/fetch.sh cifar10 --from "$carry/cifar10-jpg.tar.gz" >/dev/null; then
    echo "data/cifar10: $(find data/cifar10 -name '*.jpg' | wc -l) images"
  else
    warn "datasets/fetch.sh refused the carried CIFAR-10 archive (above): no data/cifar10"
  fi
fi

# "program: library" for every library a program of the build cannot find (ldd says "not found").
unresolved() {
  local f
  for f in "$build"/libhalfling.so "$build"/tests/test_* "$build"/bench/* "$build"/tutorials/*; do
    if [[ -f $f && -x $f ]]; then ldd "$f" 2>/dev/null || true; fi | awk -v f="$f" '/not found/ {print f ": " $1}'
  done | sort -u
}

# The libraries the loader cannot find, looked for where CUDA and PyTorch keep them.
missing=$(unresolved | awk '{print $2}' | sort -u)
dirs=()
[[ -d $carry/lib ]] && dirs+=("$carry/lib")  # what gpu_pack.sh carried (libstb.so.0)
for lib in $missing; do
  [[ -e $carry/lib/$lib ]] && continue
  found=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/local/cuda*/lib /usr/lib /opt \
    -name "$lib" 2>/dev/null | head -1 || true)  # find fails on the folders a machine lacks
  if [[ -z $found ]]; then
    echo "gpu_unpack.sh: $lib not found on this machine" >&2  # the summary below names its programs
    continue
  fi
  dirs+=("$(dirname "$found")")
done
env_file=$root/$build/prebuilt_env.sh
{
  echo "# written by scripts/gpu_unpack.sh"
  if ((${#dirs[@]})); then
    echo "export LD_LIBRARY_PATH=$(printf '%s\n' "${dirs[@]}" | sort -u | paste -sd:)\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  fi
} >"$env_file"
cat "$env_file"
# shellcheck disable=SC1090
source "$env_file"
still=$(unresolved)
if [[ -n $still ]]; then
  warn "libraries still missing, so these programs cannot start: $(echo "$still" | paste -sd ';' | sed 's/;/; /g')"
else
  echo "every program finds its libraries"
fi
