#!/usr/bin/env bash
# Set up, build, fetch MNIST and run the main lesson: tutorial 05, MLP-512 on MNIST trained in fp32,
# fp16, mixed without and mixed with loss scaling (on the GPU when one is present, else the CPU),
# ending with the comparison table. Extra arguments go to the program, e.g. scripts/demo.sh --epochs 2.
#
# It builds the one program it runs, in the build scripts/test.sh uses (build/, or $HALFLING_BUILD),
# and leaves that build's options as they are: turning the tests off there would leave their old
# binaries behind for a later ctest to run against the rebuilt library.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}
"$root/scripts/setup.sh"
"$root/scripts/build.sh" --target 05_mixed_precision
"$root/datasets/fetch.sh" mnist
cd "$root"
exec "$build/tutorials/05_mixed_precision" --device auto "$@"
