#!/usr/bin/env bash
# Set up, build, fetch the test data and run every test:
#   1. the test suite (ctest), CUDA tests skipping themselves (with the reason) without a GPU;
#   2. the CPU suite again under AddressSanitizer + UndefinedBehaviorSanitizer (scripts/sanitize.sh);
#   3. a bounded libFuzzer run of every parser (tests/fuzz/run.sh, 60 s per target).
# Ends with one line: "N passed, N failed, N skipped" over all three (each fuzz target counts as one).
# HALFLING_SANITIZE_TESTS=0 or HALFLING_FUZZ_SECONDS=0 leave stage 2 or 3 out (e.g. for a quick local run).
# HALFLING_TEST_TIMEOUT (seconds, default 900) bounds each test of stages 1 and 2: a test that hangs
# fails with "***Timeout" and the run goes on to its summary. The slowest test took 37 s in the
# fresh-clone CI run of 2026-11-28 (2 cores) and 259 s on a loaded GPU machine
# (bench/results/gpu_test_nvidia_h200_2026-11-23.txt); 900 s is three times the latter.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}
fuzz_seconds=${HALFLING_FUZZ_SECONDS:-60}
sanitize=${HALFLING_SANITIZE_TESTS:-1}
test_timeout=${HALFLING_TEST_TIMEOUT:-900}
if [[ ! $test_timeout =~ ^[1-9][0-9]*$ ]]; then
  echo "test.sh: HALFLING_TEST_TIMEOUT must be a number of seconds (got '$test_timeout')" >&2
  exit 2
fi
export HALFLING_TEST_TIMEOUT=$test_timeout  # scripts/sanitize.sh reads it too

# How long each stage took, printed at the end: CI should stay well under 30 minutes on 2 cores.
timings=()
stage_start=$SECONDS
lap() {
  timings+=("$1 $((SECONDS - stage_start)) s")
  stage_start=$SECONDS
}

"$root/scripts/setup.sh"
lap setup
"$root/scripts/build.sh" -DHALFLING_TESTS=ON "$@"
lap build
"$root/datasets/fetch.sh" mnist
"$root/datasets/fetch.sh" fashion-mnist
# CIFAR-10 cannot be downloaded offline; the JPEG copy next to the checkout (../shared/datasets, as on
# the project's machines; HALFLING_CIFAR10_FROM names another) is unpacked once. Without either, or
# when that copy is unusable (a wrong checksum, a truncated archive: a warning, not a failure), the
# CIFAR-10 tests skip themselves and say why.
cifar_from=${HALFLING_CIFAR10_FROM:-$root/../shared/datasets/cifar10-jpg.tar.gz}
cifar_dir=${HALFLING_DATA:-$root/data}/cifar10
if [[ -e $cifar_from && ! -d $cifar_dir/train && ! -f $cifar_dir/data_batch_1.bin ]]; then
  if ! "$root/datasets/fetch.sh" cifar10 --from "$cifar_from"; then
    # An empty data/cifar10 would make the CIFAR-10 tests fail on it instead of skipping.
    rmdir -- "$cifar_dir" 2>/dev/null || true
    echo "test.sh: WARNING: could not use $cifar_from (above); going on without CIFAR-10, whose tests will skip" >&2
  fi
fi
lap data

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
passed=0 failed=0 skipped=0 status=0

# Add a ctest log's counts to the totals ("100% tests passed, 0 tests failed out of 57", plus one
# "(Skipped)" line per skipped test). A log with no summary counts as one failure. Tests that ran past
# the timeout are failures already; they are also named here, so a hang is easy to find.
tally_ctest() {
  local total fail skip hung
  total=$(grep -Eo "tests failed out of [0-9]+" "$1" | grep -Eo "[0-9]+$" || true)
  if [[ -z $total || $total -eq 0 ]]; then
    echo "test.sh: $2 ran no tests" >&2
    failed=$((failed + 1))
    return
  fi
  fail=$(grep -Eo "[0-9]+ tests failed out of" "$1" | grep -Eo "^[0-9]+")
  skip=$(grep -Ec "\(Skipped\)$" "$1" || true)
  hung=$(grep -E "^[[:space:]]*[0-9]+ - .* \(Timeout\)$" "$1" | sed -E 's/^[[:space:]]*[0-9]+ - (.*) \(Timeout\)$/\1/' || true)
  if [[ -n $hung ]]; then
    echo "test.sh: in $2, these tests ran past the ${test_timeout} s timeout (HALFLING_TEST_TIMEOUT) and were stopped: ${hung//$'\n'/ }" >&2
  fi
  passed=$((passed + total - fail - skip))
  failed=$((failed + fail))
  skipped=$((skipped + skip))
}

echo "== test suite"
set +e
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ctest --test-dir "$build" --output-on-failure -j"${HALFLING_JOBS:-2}" \
  --timeout "$test_timeout" --no-tests=error 2>&1 | tee "$logs/ctest.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
set -e
tally_ctest "$logs/ctest.log" "the test suite"
lap "test suite"

if [[ $sanitize != 0 ]]; then
  echo "== the CPU test suite under ASan + UBSan"
  set +e
  "$root/scripts/sanitize.sh" 2>&1 | tee "$logs/asan.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  set -e
  tally_ctest "$logs/asan.log" "the sanitizer suite"
  lap "sanitizer suite (build and tests)"
fi

if [[ $fuzz_seconds != 0 ]]; then
  echo "== fuzzing every parser for ${fuzz_seconds}s"
  set +e
  "$root/tests/fuzz/run.sh" "$fuzz_seconds" 2>&1 | tee "$logs/fuzz.log"
  fuzz_status=${PIPESTATUS[0]}
  set -e
  ok=$(grep -Ec "^fuzz: fuzz_[a-z0-9_]+ ok:" "$logs/fuzz.log" || true)
  bad=$(grep -Ec "^fuzz: fuzz_[a-z0-9_]+ FAILED" "$logs/fuzz.log" || true)
  # A build or usage problem (exit 2) fails without naming a target: count it once.
  if [[ $fuzz_status -ne 0 && $bad -eq 0 ]]; then bad=1; fi
  [[ $fuzz_status -eq 0 ]] || status=1
  passed=$((passed + ok))
  failed=$((failed + bad))
  lap "fuzzing (build and runs)"
fi

[[ $failed -eq 0 ]] || status=1
summary=$(printf '%s, ' "${timings[@]}")
echo "test.sh: ${summary%, }; $SECONDS s in all"
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
