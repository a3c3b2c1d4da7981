#!/usr/bin/env bash
# Set up, build, fetch MNIST and run the main lesson. Until the mixed-precision tutorial (05) lands,
# that is tutorial 03: MLP-512 trained in FP32 on MNIST (on the GPU when one is present).
# Extra arguments go to the program, e.g. scripts/demo.sh --epochs 5.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}
"$root/scripts/setup.sh"
"$root/scripts/build.sh" -DHALFLING_TESTS=OFF
"$root/datasets/fetch.sh" mnist
cd "$root"
exec "$build/tutorials/03_mlp_mnist" --device auto "$@"
