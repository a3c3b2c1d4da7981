#!/usr/bin/env bash
# Packs a CUDA build made on this machine, and the data sets the GPU checks read, for a lent GPU machine
# (scripts/gpu_check.sh's header says how such a session runs).
#
# Why: that machine's image has nvcc, the CUDA libraries and PyTorch, but not the Debian packages the
# build needs (GoogleTest, CLI11, nlohmann-json, stb) and it cannot install any; and its time is the
# scarce resource. So the build is made here, where compiling costs nothing, and carried there; the
# programs need from that machine only the CUDA runtime, cuBLAS and (conv_bench) cuDNN, which
# scripts/gpu_unpack.sh finds. A build made on Debian 12 runs on the newer glibc/libstdc++ there.
#
#   cmake -S . -B build-gpu -DHALFLING_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release
#   scripts/gpu_pack.sh            # builds (-j2, or HALFLING_JOBS), then writes .gpu-carry/ (git-ignored)
# then, on the GPU machine (carry [".gpu-carry"]):
#   bash scripts/gpu_unpack.sh && HALFLING_PREBUILT=1 scripts/gpu_check.sh test
#
# .gpu-carry/ holds build.tar.xz (the build directory without object files and CMake's internals),
# lib/ (libstb.so.0: Debian's stb is a shared library),
# mnist.tar.xz (data/mnist, if present) and cifar10-jpg.tar.gz (the shared JPEG archive, if present:
# $HALFLING_CIFAR10_FROM, else ../shared/datasets/cifar10-jpg.tar.gz). The device tool carries 64 MiB
# at most, the working tree included: the script prints the total and fails above 60 MiB.
# Environment: HALFLING_BUILD (default build-gpu).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${HALFLING_BUILD:-build-gpu}
build=${build%/}
[[ $build != /* ]] || { echo "gpu_pack.sh: HALFLING_BUILD must be a folder inside the repository, relative to it" >&2; exit 2; }
cache=$build/CMakeCache.txt
[[ -f $cache ]] || { echo "gpu_pack.sh: no build in $root/$build (configure and build it first; see the header)" >&2; exit 2; }
# Built with CUDA (HALFLING_CUDA=ON, or AUTO with nvcc found): the library's sources were compiled with
# HALFLING_WITH_CUDA=1 (compile_commands.json lists every compile command).
grep -q 'HALFLING_WITH_CUDA=1' "$build/compile_commands.json" 2>/dev/null ||
  { echo "gpu_pack.sh: $build was not configured with CUDA (configure it with -DHALFLING_CUDA=ON)" >&2; exit 2; }
# A compile-check build (scripts/build.sh where no GPU was visible) has unoptimized device code: its
# tests would pass on the GPU, and every timing would be wrong.
! grep -q '^HALFLING_CUDA_CHECK_ONLY:BOOL=ON$' "$cache" ||
  { echo "gpu_pack.sh: $build is a compile-check build (HALFLING_CUDA_CHECK_ONLY=ON: device code unoptimized); configure it with -DHALFLING_CUDA_CHECK_ONLY=OFF -DCMAKE_CUDA_ARCHITECTURES=90 (see the header)" >&2; exit 2; }
# Build first (a no-op when up to date), so that what travels is the code as it is now.
cmake --build "$build" -j"${HALFLING_JOBS:-2}" >/dev/null ||
  { echo "gpu_pack.sh: the build of $build failed (cmake --build $build shows why)" >&2; exit 1; }
[[ -f $build/libhalfling.so && -x $build/tests/test_kernels ]] ||
  { echo "gpu_pack.sh: $build has no libhalfling.so or tests/test_kernels (configured with -DHALFLING_TESTS=OFF?)" >&2; exit 2; }

dest=$root/.gpu-carry
tmp=$(mktemp -d "$root/.gpu-carry.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

arch=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$cache")
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || commit+=" (with uncommitted changes)"
{
  echo "# packed $(date -u +%FT%TZ) on $(hostname) ($(sed -n "s/^PRETTY_NAME=//p" /etc/os-release 2>/dev/null | tr -d "\""), commit $commit"
  echo "source_dir=$root"
  echo "build=$build"
  echo "cuda_architectures=$arch"
} >"$build/PREBUILT"

# The build without object files, static libraries of the build's own targets and CMake's internals
# (ctest needs CTestTestfile.cmake and the gtest_discover_tests lists, which live outside CMakeFiles).
tar -C "$root" -cf - --exclude='*/CMakeFiles' --exclude='*.o' --exclude='*.a' --exclude='Testing' "$build" |
  xz -T2 -6 >"$tmp/build.tar.xz"
if [[ -d data/mnist ]]; then
  tar -C "$root" -cf - data/mnist | xz -T2 -6 >"$tmp/mnist.tar.xz"
else
  echo "gpu_pack.sh: no data/mnist (datasets/fetch.sh mnist): the MNIST steps will skip or fail there" >&2
fi
cifar=${HALFLING_CIFAR10_FROM:-$root/../shared/datasets/cifar10-jpg.tar.gz}
if [[ -f $cifar ]]; then
  cp "$cifar" "$tmp/cifar10-jpg.tar.gz"
else
  echo "gpu_pack.sh: no CIFAR-10 archive at $cifar: the CIFAR-10 steps will skip there" >&2
fi

# The shared libraries of the build's Debian packages that a CUDA image lacks (Debian builds stb as
# libstb.so.0; the rest is header-only or static, or part of any Linux and of the CUDA toolkit).
mkdir -p "$tmp/lib"
carried_libs=(libstb.so.0)
for lib in "${carried_libs[@]}"; do
  path=$(ldd "$build/libhalfling.so" | awk -v l="$lib" '$1 == l {print $3}')
  [[ -n $path ]] && cp -L "$path" "$tmp/lib/"
done

rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
ls -l "$dest"
total=$(($(du -sb "$dest" | cut -f1) + $(git ls-files -z | xargs -0 cat 2>/dev/null | wc -c)))
echo "carry [\".gpu-carry\"]: $((total / 1048576)) MiB with the working tree (the limit is 64 MiB)"
((total <= 60 * 1048576)) || { echo "gpu_pack.sh: over 60 MiB: carry less (a smaller CUDA_ARCHITECTURES list?)" >&2; exit 1; }
