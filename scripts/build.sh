#!/usr/bin/env bash
# Configure and build halfling into ./build (or $HALFLING_BUILD). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DHALFLING_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}
# nvcc is often installed outside the PATH.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >"$build.configure.log" 2>&1 || {
  cat "$build.configure.log" >&2
  exit 1
}
grep -E "halfling: CUDA backend" "$build.configure.log" || true
cmake --build "$build" -j"${HALFLING_JOBS:-2}"
