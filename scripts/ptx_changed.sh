#!/usr/bin/env bash
# Which CUDA kernels generate different code now than at an earlier commit (the last one that ran on a
# GPU): a kernel whose PTX is unchanged keeps its GPU verification; a changed one needs its tests,
# compute-sanitizer and benchmark again (docs/gpu_status.md). Needs nvcc and python3, no GPU.
#
#   scripts/ptx_changed.sh REV [FILE...]     e.g. scripts/ptx_changed.sh d105cb3
#   scripts/ptx_changed.sh d105cb3 kernels/cuda/softmax/warp_row.cu
#
# For every kernels/cuda/**/*.cu (or the FILEs named), the PTX for compute_90 (compute_90a for the files
# built for sm_90a: kernels/cuda/gemm/wgmma*.cu) at REV (a temporary git
# worktree) and in the working tree, compared kernel by kernel (.entry), with the hashes nvcc puts in
# anonymous-namespace names, branch labels and the names derived from a kernel's own normalized. Prints
# one line per file (same / same code under a new signature / changed / new / gone kernels) and the names
# of the changed and gone ones. Exit status 0 either way (a report,
# not a verdict); 2 on a usage or build error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-}
if [[ -z $rev ]]; then
  echo "usage: scripts/ptx_changed.sh REV [FILE...]   (REV: the commit to compare with)" >&2
  exit 2
fi
shift
git -C "$root" rev-parse --verify --quiet "$rev^{commit}" >/dev/null || {
  echo "ptx_changed.sh: '$rev' is not a commit of this repository" >&2
  exit 2
}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc ]] || {
  echo "ptx_changed.sh: nvcc not found (set NVCC)" >&2
  exit 2
}

work=$(mktemp -d)
cleanup() {
  git -C "$root" worktree remove --force "$work/old" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add --detach --quiet "$work/old" "$rev"

files=("$@")
if ((${#files[@]} == 0)); then
  mapfile -t files < <(cd "$root" && { ls kernels/cuda/*.cu kernels/cuda/*/*.cu; git -C "$work/old" ls-files 'kernels/cuda/*.cu'; } | sort -u)
fi

# ptx TREE FILE OUT: the PTX of one file of a tree, or nothing when the tree lacks the file. The files
# CMakeLists.txt builds for sm_90a (HALFLING_SM90A_SOURCES: instructions of that target alone) are
# compiled for compute_90a, the others for compute_90.
ptx() {
  [[ -f $1/$2 ]] || return 0
  local arch=compute_90
  [[ $2 != kernels/cuda/gemm/wgmma*.cu ]] || arch=compute_90a
  "$nvcc" -DHALFLING_WITH_CUDA=1 -I"$1" -isystem=/usr/include/stb -O3 -DNDEBUG -arch=$arch -ptx \
    --expt-relaxed-constexpr -std=c++17 -x cu -o "$3" "$1/$2"
}

mkdir -p "$work/ptx"
for f in "${files[@]}"; do
  n=${f//\//_}
  ptx "$work/old" "$f" "$work/ptx/$n.old" || exit 2
  ptx "$root" "$f" "$work/ptx/$n.new" || exit 2
done

echo "# PTX (compute_90; compute_90a for wgmma*.cu) per kernel: $rev vs the working tree of $(git -C "$root" rev-parse --short HEAD)"
python3 - "$work/ptx" "${files[@]}" <<'PY'
import os, re, sys

def kernels(path):
    """name -> body of every .entry, with nvcc's per-compilation hashes and parameter names normalized."""
    if not os.path.exists(path):
        return None
    text = open(path).read()
    # The anonymous namespace's mangled name, <length>_GLOBAL__N__<hash>_..._cu_<hash>_<id>, differs from
    # one compilation to the next: cut exactly <length> characters (two digits: the names are 40 to 99
    # characters long), so that what follows it (the kernel's own name) is kept.
    text = re.sub(r"(\d\d)(_GLOBAL__N__[A-Za-z0-9_]+)",
                  lambda m: "4ANON" + m.group(2)[int(m.group(1)):], text)
    # A static local of a function in that namespace (a __shared__ array in a device function, e.g.
    # _ZZN<length>_INTERNAL_<hash>_..._cu_<hash>_<id>2hl...E2sh) carries the same hash in another
    # prefix: cut it the same way. Both hashes change with the file's text, even its comments.
    text = re.sub(r"(\d\d)(_INTERNAL_[A-Za-z0-9_]+)",
                  lambda m: "8INTERNAL" + m.group(2)[int(m.group(1)):], text)
    text = re.sub(r"^\s*//.*$", "", text, flags=re.M)
    # Branch labels are numbered by the function's place in the file ($L__BB<function>_<block>): a
    # kernel added before another renumbers the other's labels without changing its code.
    text = re.sub(r"\$L__BB\d+_", "$L__BB_", text)
    out = {}
    for part in re.split(r"\n(?=(?:\.visible |\.weak )?\.(?:entry|func) )", text):
        m = re.match(r"(?:\.visible |\.weak )?\.entry\s+([A-Za-z0-9_$]+)", part)
        if m:
            name = m.group(1)
            body = part[part.find("{"):].rstrip()  # the split leaves the blank line before the next
            # Names derived from the kernel's own: its parameters, its static shared arrays
            # (_ZZ<name>E<array>) and its local-memory depot (numbered like the labels).
            body = re.sub(r"[A-Za-z0-9_$]+_param_(\d+)", r"PARAM_\1", body)
            body = body.replace("_ZZ" + name[2:] + "E", "_ZZ<self>E")
            out[name] = re.sub(r"__local_depot\d+", "__local_depot", body)
    return out

folder, files = sys.argv[1], sys.argv[2:]
for f in files:
    n = f.replace("/", "_")
    old, new = kernels(os.path.join(folder, n + ".old")), kernels(os.path.join(folder, n + ".new"))
    if old is None and new is None:
        print(f"{f}: in neither tree")
        continue
    if old is None:
        print(f"{f}: new file, {len(new)} kernels")
        continue
    if new is None:
        print(f"{f}: removed ({len(old)} kernels)")
        continue
    same = [k for k in new if k in old and old[k] == new[k]]
    changed = [k for k in new if k in old and old[k] != new[k]]
    added = [k for k in new if k not in old]
    gone = [k for k in old if k not in new]
    # A kernel whose signature changed (a template or function parameter added) but whose code did
    # not: the same body under a new name.
    renamed = {k: next((a for a in added if new[a] == old[k]), None) for k in gone}
    renamed = {k: a for k, a in renamed.items() if a is not None}
    gone = [k for k in gone if k not in renamed]
    added = [k for k in added if k not in renamed.values()]
    verdict = "CHANGED" if changed or gone else ("unchanged, and new kernels" if added else "unchanged")
    print(f"{f}: {verdict}: {len(same)} same, {len(renamed)} same code under a new signature, "
          f"{len(changed)} changed, {len(added)} new, {len(gone)} gone")
    for k in changed:
        print(f"    changed: {k}")
    for k in gone:
        print(f"    gone:    {k} (its code is in none of the new kernels)")
PY
