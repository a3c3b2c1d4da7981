#!/usr/bin/env bash
# The sm_90 machine code (SASS) of one kernels/cuda file, read without a GPU: what a session without
# one can still learn about a kernel's inner loop (kernels/cuda/gemm/README.md, "Reading the machine
# code", is the worked example). Needs nvcc and a disassembler; no GPU.
#
#   scripts/sass.sh FILE.cu [REGEX]          a summary line per kernel whose mangled name matches REGEX
#   SASS_DUMP=out.sass scripts/sass.sh ...   also writes the whole disassembly there
#   SASS_LOOPS=1 scripts/sass.sh ...         instead, a line per Tensor Core loop (a K loop): its
#                                            instructions per trip and their kinds (scripts/sass_loops.py;
#                                            needs nvdisasm, for its control-flow graph)
#
# The summary counts, per kernel, its instructions and the ones that matter in a Tensor Core loop:
# HMMA (mma.sync), HGMMA (wgmma), LDSM (ldmatrix), LDGSTS (cp.async), BAR (__syncthreads). They are static counts (an
# unrolled loop body counts once per copy, a loop not at all more than once): the dump is what to read.
#
# The disassembler: NVDISASM when set, else cuobjdump from the CUDA toolkit. This project's development
# machine has CUDA 13's nvcc without cuobjdump or nvdisasm; NVDISASM=/path/to/nvdisasm then names one
# from another toolkit, such as Debian's non-free nvidia-cuda-toolkit (`apt-get download
# nvidia-cuda-toolkit`, then `dpkg -x` it anywhere): bookworm's 11.8 or trixie's 12.4. 11.8 decodes sm_90
# code but not the ELF header CUDA 12+ writes (the ABI version and the e_flags layout changed), so the
# script hands an 11.x nvdisasm a copy with the header rewritten in the 11.x form (sm_90, virtual sm_90,
# 64-bit); the code is not touched. 12.4's reads CUDA 13's header as it is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${1:-}
regex=${2:-.}
if [[ -z $src || ! -f $src ]]; then
  echo "usage: scripts/sass.sh FILE.cu [REGEX]   (FILE.cu: a kernels/cuda source file)" >&2
  exit 2
fi
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc ]] || {
  echo "sass.sh: nvcc not found (set NVCC)" >&2
  exit 2
}
cuobjdump=$(dirname "$nvcc")/cuobjdump
if [[ -z ${NVDISASM:-} && -n ${SASS_LOOPS:-} && -x $(dirname "$nvcc")/nvdisasm ]]; then
  NVDISASM=$(dirname "$nvcc")/nvdisasm  # the loops need nvdisasm's control-flow graph
fi
if [[ -n ${NVDISASM:-} ]]; then  # an explicit choice wins
  [[ -x $NVDISASM ]] || {
    echo "sass.sh: NVDISASM=$NVDISASM is not an executable" >&2
    exit 2
  }
elif [[ -n ${SASS_LOOPS:-} ]]; then
  echo "sass.sh: SASS_LOOPS needs nvdisasm (none next to $nvcc); set NVDISASM (see this script's header)" >&2
  exit 2
elif [[ ! -x $cuobjdump ]]; then
  echo "sass.sh: no cuobjdump next to $nvcc; set NVDISASM to an nvdisasm (see this script's header)" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The files CMakeLists.txt builds for sm_90a (instructions of that target alone: wgmma) are listed
# for it; the others for sm_90, as the GPU builds compile them.
target=(-arch=sm_90)
[[ $src != *kernels/cuda/gemm/wgmma*.cu ]] || target=("-gencode=arch=compute_90a,code=sm_90a")
"$nvcc" -std=c++17 -O3 -DNDEBUG -DHALFLING_WITH_CUDA=1 --expt-relaxed-constexpr -I"$root" -isystem /usr/include/stb \
  "${target[@]}" -cubin -o "$tmp/k.cubin" "$src"
if [[ -z ${NVDISASM:-} ]]; then
  "$cuobjdump" -sass "$tmp/k.cubin" >"$tmp/k.sass"
else
  # Only an 11.x nvdisasm needs the old header; 12.4's (Debian trixie's) reads CUDA 13's as it is, and
  # misreads the rewritten one ("Cannot decode architecture").
  if "$NVDISASM" --version 2>/dev/null | grep -q 'release 11\.'; then
    python3 - "$tmp/k.cubin" <<'PY'
import struct, sys
path = sys.argv[1]
elf = bytearray(open(path, "rb").read())
elf[8] = 7  # EI_ABIVERSION of CUDA 11.x cubins
struct.pack_into("<I", elf, 48, 0x005A055A)  # e_flags: sm_90, virtual sm_90, 64-bit addresses, unified textures
open(path, "wb").write(elf)
PY
  fi
  "$NVDISASM" -c "$tmp/k.cubin" >"$tmp/k.sass"
fi
[[ -n ${SASS_DUMP:-} ]] && cp "$tmp/k.sass" "$SASS_DUMP"
if [[ -n ${SASS_LOOPS:-} ]]; then
  "$NVDISASM" -bbcfg -poff -c "$tmp/k.cubin" >"$tmp/k.dot"
  # Not exec: the EXIT trap, which removes $tmp, must still run; the script exits with python3's status.
  status=0
  python3 "$root/scripts/sass_loops.py" "$tmp/k.dot" "$regex" || status=$?
  exit "$status"
fi

# One line per kernel: instructions, HMMA, HGMMA, LDSM, LDGSTS, BAR, then the (mangled) name.
awk -v re="$regex" '
  function flush() { if (name != "" && name ~ re) printf "%6d insts %4d HMMA %4d HGMMA %4d LDSM %4d LDGSTS %3d BAR  %s\n", n, h, w, l, g, b, name }
  /^[[:space:]]*(\.text\.|Function : )/ {
    flush(); name = $0; sub(/^[[:space:]]*(\.text\.|Function : )/, "", name); sub(/:$/, "", name); n = h = w = l = g = b = 0; next
  }
  /^[[:space:]]*\/\*[0-9a-f]+\*\// { n++; if (/ HMMA/) h++; if (/HGMMA/) w++; if (/LDSM/) l++; if (/LDGSTS/) g++; if (/ BAR\./) b++ }
  END { flush() }' "$tmp/k.sass"
