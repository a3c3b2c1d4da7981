#!/usr/bin/env bash
# Set up, build, fetch the test data, run every test. Ends with one line: "N passed, N failed, N skipped".
# CUDA tests skip themselves (with the reason) when no GPU is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HALFLING_BUILD:-$root/build}

"$root/scripts/setup.sh"
"$root/scripts/build.sh" -DHALFLING_TESTS=ON "$@"
"$root/datasets/fetch.sh" mnist
"$root/datasets/fetch.sh" fashion-mnist

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ctest --test-dir "$build" --output-on-failure -j"${HALFLING_JOBS:-2}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

# ctest's summary: "100% tests passed, 0 tests failed out of 57" and a list of skipped tests.
total=$(grep -Eo "tests failed out of [0-9]+" "$log" | grep -Eo "[0-9]+$" || echo 0)
failed=$(grep -Eo "[0-9]+ tests failed out of" "$log" | grep -Eo "^[0-9]+" || echo 0)
skipped=$(grep -Ec "\(Skipped\)$" "$log" || true)
passed=$((total - failed - skipped))
if [[ $total -eq 0 ]]; then
  echo "test.sh: ctest ran no tests" >&2
  status=1
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
