#!/usr/bin/env bash
# Build every libFuzzer target in tests/fuzz (clang, ASan + UBSan, CPU-only) and run each for
# SECONDS (default 60) from a fresh copy of its seed corpus tests/fuzz/corpus/<target>/.
#
#   tests/fuzz/run.sh [SECONDS]
#
# Exit status: 0 when every target ran its time without a finding; 1 when any target crashed,
# leaked, hung or ran out of memory (the reproducer's path is printed: replay it with
# `build-fuzz/fuzz/<target> <reproducer>`); 2 for a usage or build problem.
# Environment: HALFLING_FUZZ_BUILD (default <repo>/build-fuzz), HALFLING_FUZZ_JOBS (build jobs, and
# targets fuzzed at once, default 2).
set -euo pipefail

seconds=${1:-60}
if [[ ! $seconds =~ ^[0-9]+$ || $seconds -lt 1 || $# -gt 1 ]]; then
  echo "usage: $(basename "$0") [SECONDS]   (seconds per fuzz target, default 60)" >&2
  exit 2
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${HALFLING_FUZZ_BUILD:-$repo/build-fuzz}
jobs=${HALFLING_FUZZ_JOBS:-2}

for tool in clang clang++ cmake; do
  if ! command -v "$tool" >/dev/null; then
    echo "fuzz: $tool not found; libFuzzer needs clang (Debian: apt-get install clang libclang-rt-dev libomp-dev cmake, or scripts/setup.sh)" >&2
    exit 2
  fi
done

echo "fuzz: configuring $build (clang, ASan + UBSan, -DHALFLING_CUDA=OFF)"
mkdir -p "$build"
if ! cmake -S "$repo" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHALFLING_FUZZ=ON -DHALFLING_CUDA=OFF -DHALFLING_TESTS=OFF \
  -DHALFLING_SANITIZE=address,undefined >"$build/configure.log" 2>&1; then
  tail -n 30 "$build/configure.log" >&2
  echo "fuzz: configure failed (full log: $build/configure.log)" >&2
  exit 2
fi
echo "fuzz: building (-j$jobs)"
if ! cmake --build "$build" -j "$jobs" --target fuzz_all >"$build/build.log" 2>&1; then
  grep -E "error|Error" "$build/build.log" | head -n 30 >&2 || tail -n 30 "$build/build.log" >&2
  echo "fuzz: build failed (full log: $build/build.log)" >&2
  exit 2
fi

shopt -s nullglob
targets=("$build"/fuzz/fuzz_*)
if ((${#targets[@]} == 0)); then
  echo "fuzz: no targets were built in $build/fuzz" >&2
  exit 2
fi

# Each target runs in its own process, so they run side by side, up to $jobs at a time: each still
# gets its full SECONDS, and on 2 cores the five targets take 3 rounds instead of 5. A target's
# messages go to its own report file, printed in target order once all have finished, so that
# the output of two targets never interleaves.
fuzz_one() {
  local bin=$1 name run status execs reproducers r
  name=$(basename "$bin")
  run="$build/runs/$name"
  rm -rf -- "$run"
  mkdir -p "$run/corpus" "$run/artifacts"
  {
    # A copy, so the run's new inputs never land in the committed seed corpus.
    if [[ -d $repo/tests/fuzz/corpus/$name ]]; then
      cp -R "$repo/tests/fuzz/corpus/$name/." "$run/corpus/"
    else
      echo "fuzz: $name has no seed corpus (tests/fuzz/corpus/$name/); starting from nothing"
    fi
    echo "fuzz: $name for ${seconds}s ($(find "$run/corpus" -type f | wc -l) seed files)"
    # -timeout: one input taking 10 s is a hang. -rss_limit_mb / -malloc_limit_mb: the parsers must
    # refuse absurd sizes instead of allocating them. detect_leaks: a leak is a finding too.
    status=0
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
      "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -artifact_prefix="$run/artifacts/" -print_final_stats=1 "$run/corpus" >"$run/log.txt" 2>&1 || status=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$run/log.txt" | grep -o '[0-9]*$' || true)
    reproducers=("$run"/artifacts/*)
    if ((status != 0 || ${#reproducers[@]} > 0)); then
      echo "fuzz: $name FAILED (exit $status) after ${execs:-?} inputs. Log: $run/log.txt"
      grep -E "ERROR: |SUMMARY: |runtime error|==[0-9]+==" "$run/log.txt" | head -n 8 || true
      for r in "${reproducers[@]}"; do
        echo "fuzz:   reproducer: $r   (replay: $bin $r)"
      done
    else
      echo "fuzz: $name ok: ${execs:-?} inputs, corpus now $(find "$run/corpus" -type f | wc -l) files"
      touch "$run/ok"
    fi
  } >"$build/runs/$name.report" 2>&1
}

mkdir -p "$build/runs"
names=()
running=0
for bin in "${targets[@]}"; do
  [[ -x $bin && -f $bin ]] || continue
  names+=("$(basename "$bin")")
  rm -f -- "$build/runs/$(basename "$bin").report"
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  echo "fuzz: starting $(basename "$bin") (${seconds}s)"
  fuzz_one "$bin" &
  running=$((running + 1))
done
wait || true

failed=()
for name in "${names[@]}"; do
  if [[ -f $build/runs/$name.report ]]; then
    cat "$build/runs/$name.report"
  else
    echo "fuzz: $name FAILED: it left no report" >&2
    failed+=("$name")
    continue
  fi
  # Only a target that reached its "ok" line passed: one whose job stopped early (set -e) failed.
  if [[ ! -e $build/runs/$name/ok ]]; then
    grep -q " FAILED" "$build/runs/$name.report" || echo "fuzz: $name FAILED: its run stopped early" >&2
    failed+=("$name")
  fi
done

if ((${#failed[@]} > 0)); then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all ${#names[@]} targets ran ${seconds}s each, $jobs at a time, without a finding"
