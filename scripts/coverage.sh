#!/usr/bin/env bash
# Line and branch coverage of the CPU test suite: which lines of halfling's own code no test executes.
#   scripts/coverage.sh                  # configure + build build-cov (or $HALFLING_COV_BUILD), run ctest,
#                                        # print the per-file report, least covered first
#   scripts/coverage.sh -R Checkpoint    # extra arguments go to ctest (a partial run covers less)
#   scripts/coverage.sh --show FILE      # after a run: FILE's lines that no test executed (FILE as in the report)
# Source-based coverage (clang's -fprofile-instr-generate -fcoverage-mapping, read by llvm-cov). The tests
# run the tutorial and benchmark programs as child processes; each process writes its own profile (%p),
# and all are merged, so what a program did for a test counts. Tests, system headers and generated
# files are left out of the report. What a CPU-only build cannot run (CUDA code, the paths taken only
# with a GPU) shows as not covered. docs/hardening.md says what the first run found.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_COV_BUILD:-$root/build-cov}
jobs=${HALFLING_JOBS:-2}
profile=$build/coverage.profdata
ignore='(^/usr/|/tests/|/_deps/|'"$build"'/)'

# The instrumented files: the library, the programs and the test binaries (a program a test runs counts
# through its own profile; the rest of the suite's code through the test binaries).
objects() {
  local first=1 f
  for f in "$build"/libhalfling.so "$build"/tutorials/* "$build"/bench/* "$build"/tests/test_*; do
    [[ -f $f && -x $f && $f != *.cmake ]] || continue
    if ((first)); then printf '%s\n' "$f"; first=0; else printf -- '-object\n%s\n' "$f"; fi
  done
}

# clang, and the llvm-profdata and llvm-cov of the same LLVM (a profile is read by its own version's
# tools): beside the compiler (Debian's clang++ links to /usr/lib/llvm-N/bin/clang), else on the PATH.
cxx=$(command -v clang++ || true)
[[ -n $cxx ]] || { echo "coverage.sh: needs clang++ (scripts/setup.sh installs clang)" >&2; exit 1; }
llvm_bin=$(dirname "$(readlink -f "$cxx")")
tool() {
  if [[ -x $llvm_bin/$1 ]]; then echo "$llvm_bin/$1"
  elif command -v "$1" >/dev/null; then command -v "$1"
  else
    echo "coverage.sh: needs $1 from the LLVM of $cxx (Debian: apt-get install llvm)" >&2
    return 1
  fi
}
profdata=$(tool llvm-profdata) && llvm_cov=$(tool llvm-cov) || exit 1

if [[ ${1:-} == --show ]]; then
  [[ -n ${2:-} ]] || {
    echo "coverage.sh: --show needs a file, as the report names it (say framework/ops.cpp)" >&2
    exit 1
  }
  [[ -f $profile ]] || { echo "coverage.sh: no profile in $build; run scripts/coverage.sh first" >&2; exit 1; }
  file=$2
  [[ $file == /* ]] || file=$root/$file
  [[ -f $file ]] || { echo "coverage.sh: --show: no such file: $2" >&2; exit 1; }
  mapfile -t objs < <(objects)
  # llvm-cov's listing is "line| count|source"; the lines run 0 times are what no test reached.
  "$llvm_cov" show "${objs[@]}" -instr-profile="$profile" "$file" 2>/dev/null | grep -E '^ +[0-9]+\| +0\|' ||
    echo "coverage.sh: every line of $2 ran"
  exit 0
fi

start=$SECONDS
mkdir -p -- "$build"
# -O1 as the sanitizer builds (the suite at -O0 would take several times as long); coverage mapping
# counts source regions, not instructions, so optimization does not hide a line that ran.
cc=$(command -v clang || true)
compiler=(-DCMAKE_CXX_COMPILER="$cxx")
[[ -z $cc ]] || compiler+=(-DCMAKE_C_COMPILER="$cc")
cmake -S "$root" -B "$build" "${compiler[@]}" -DHALFLING_CUDA=OFF -DHALFLING_TESTS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g0 -DNDEBUG" \
  "-DCMAKE_CXX_FLAGS=-fprofile-instr-generate -fcoverage-mapping" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fprofile-instr-generate" "-DCMAKE_SHARED_LINKER_FLAGS=-fprofile-instr-generate" \
  >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2
  echo "coverage.sh: configuring $build failed" >&2
  exit 1
}
grep -q -e '-fcoverage-mapping' "$build/compile_commands.json" || {
  echo "coverage.sh: $build's compile commands lack -fcoverage-mapping; delete $build and run this again" >&2
  exit 1
}
cmake --build "$build" -j"$jobs"
built=$SECONDS

# Each run starts from no profiles: a stale one from an older build would not match the code.
rm -rf -- "$build/profiles" "$profile"
mkdir -p -- "$build/profiles"
status=0
LLVM_PROFILE_FILE="$build/profiles/%p-%m.profraw" OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} \
  ctest --test-dir "$build" -j"$jobs" --timeout "${HALFLING_TEST_TIMEOUT:-900}" --no-tests=error "$@" \
  >"$build/ctest.log" 2>&1 || status=$?
grep -E '% tests passed' "$build/ctest.log" || true
grep -A 100 'The following tests FAILED' "$build/ctest.log" || true
shopt -s nullglob
raw=("$build"/profiles/*.profraw)
((${#raw[@]} > 0)) || { echo "coverage.sh: the tests wrote no profile (see $build/ctest.log)" >&2; exit 1; }
"$profdata" merge -sparse "${raw[@]}" -o "$profile"
rm -rf -- "$build/profiles"  # about 1 MB per process; a full run starts about 2,600 of them
mapfile -t objs < <(objects)
# llvm-cov warns of "functions [that] have mismatched data": an inline function compiled into several of
# the binaries with different code counts from one of them. The warning goes to llvm-cov.log.
"$llvm_cov" report "${objs[@]}" -instr-profile="$profile" -ignore-filename-regex="$ignore" >"$build/coverage.txt" \
  2>"$build/llvm-cov.log"
# Least covered lines first: the report's columns are regions, functions, lines and branches, each as a
# count, the missed ones and the share; the lines' share is the 10th field.
awk 'NR > 2 && NF >= 13 && $1 != "TOTAL" {
  printf "%s\t%-60s lines %8s (%s missed)  branches %8s\n", $10 + 0, $1, $10, $9, $13 }' "$build/coverage.txt" |
  sort -s -n -k1,1 | cut -f2-
awk '$1 == "TOTAL" { printf "TOTAL: lines %s (%s of %s missed), branches %s\n", $10, $9, $8, $13 }' \
  "$build/coverage.txt"
echo "coverage.sh: build $((built - start)) s, tests and report $((SECONDS - built)) s;" \
  "report in $build/coverage.txt; uncovered lines: scripts/coverage.sh --show FILE"
exit "$status"
