#!/usr/bin/env bash
# Build the CPU-only test suite with AddressSanitizer + UndefinedBehaviorSanitizer and run it.
#   scripts/sanitize.sh               # configure + build build-asan (or $HALFLING_ASAN_BUILD), run ctest
#   scripts/sanitize.sh -R Checkpoint # extra arguments go to ctest
#   scripts/sanitize.sh --thread      # ThreadSanitizer instead, in build-tsan (or $HALFLING_TSAN_BUILD)
# Any sanitizer report fails the test that triggered it (-fno-sanitize-recover=all, halt_on_error;
# ThreadSanitizer's exit status 66 after a report). docs/hardening.md says what this covers and what it
# cannot see. The ASan + UBSan run is stage 2 of scripts/test.sh; the ThreadSanitizer run is not (a third
# instrumented build, and its tests took 248 s at -j2 on 2 cores), so run it after changing threaded code.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=asan
if [[ ${1:-} == --thread ]]; then
  mode=tsan
  shift
fi
if [[ $mode == tsan ]]; then
  build=${HALFLING_TSAN_BUILD:-$root/build-tsan}
  sanitizers=thread what="ThreadSanitizer"
else
  build=${HALFLING_ASAN_BUILD:-$root/build-asan}
  sanitizers=address,undefined what="ASan + UBSan"
fi
jobs=${HALFLING_JOBS:-2}
start=$SECONDS

# RelWithDebInfo with -O1 -g1: optimized (so the tests finish) with line tables for the reports' line
# numbers, as ASan's own documentation suggests. The default -O2 -g made this build the longest step of
# CI (936 s of a 37-minute run on 2 cores that another build shared, 2026-11-26; 450 s at -O1 -g1 in the
# fresh-clone CI run after): compiling tests/kernels/test_cuda_kernels.cpp with the sanitizers took 26.9 s
# at -O2 -g and 9.9 s at -O1 -g1, framework/ops.cpp 7.6 s and 4.7 s.
#
# -D_GLIBCXX_ASSERTIONS: libstdc++'s bounds checks (operator[] of vector, array, string, span; front() and
# back() of an empty container; and more). ASan cannot see v[i] for size() <= i < capacity(): that memory
# is the vector's own, allocated and unpoisoned. What they cost (2026-11-29, 2-core AMD EPYC, two runs
# each): the ASan build's CPU kernel tests (test_kernels --gtest_filter='*Cpu*') took 39.2-39.7 s with
# them, 33.1-34.2 s without; the whole suite passed with them (973 tests, 211 s at -j2).
# (_GLIBCXX_SANITIZE_VECTOR, which poisons that slack instead, reported a false overflow in GoogleTest's
# start-up: it needs every piece of code that touches a vector annotated, and the ignorelist below
# leaves GoogleTest's own functions uninstrumented.)
#
# clang when it is installed (scripts/setup.sh installs it for the fuzzers), else the default compiler.
# On the 2-core development machine, 2026-11-27, the whole sanitizer stage took 421 s to build and 261 s
# to test with clang 14, against 666 s and 468 s with g++ 12 in that day's fresh-clone CI run: clang
# compiles these files about a third faster, and its instrumented tests ran faster still.
#
# The compiler is chosen again on every run, but build-asan may have been configured with another one
# (before clang was installed, or by hand). Asked for another compiler, CMake deletes the whole cache
# and configures again WITHOUT the other -D options: a plain, uninstrumented build whose tests would
# pass for sanitizer runs. So a cache made with another compiler, or without these sanitizers, is
# removed first (its CMakeCache.txt and CMakeFiles/: a fresh configure, the objects then rebuilt), and
# the configured build is checked for the sanitizer flags before anything is built.
if command -v clang >/dev/null && command -v clang++ >/dev/null; then
  cc=$(command -v clang) cxx=$(command -v clang++)
else
  cc=$(command -v "${CC:-cc}" || true) cxx=$(command -v "${CXX:-c++}" || true)
fi
[[ -n $cxx ]] || { echo "sanitize.sh: no C++ compiler found (clang++, or ${CXX:-c++})" >&2; exit 1; }
compiler=(-DCMAKE_CXX_COMPILER="$cxx")
[[ -z $cc ]] || compiler+=(-DCMAKE_C_COMPILER="$cc")
# ThreadSanitizer sees a race as two accesses with no happens-before edge between them, and it learns
# those edges from the calls it intercepts. The CPU kernels run in OpenMP regions, whose barriers and
# reductions live in the OpenMP runtime, uninstrumented, so it cannot order them by itself. LLVM's OpenMP
# runtime (clang's -fopenmp) tells it about them through its tool library Archer (libarcher.so, named by
# OMP_TOOL_LIBRARIES); GCC's libgomp has none. So the ThreadSanitizer run needs clang and Archer, and
# refuses to run without them rather than report races that are none.
archer=""
if [[ $mode == tsan ]]; then
  [[ $(basename "$cxx") == clang++* ]] || {
    echo "sanitize.sh: --thread needs clang++ (LLVM's OpenMP runtime and its ThreadSanitizer tool Archer);" \
      "found only $cxx. Install clang and libomp-dev (scripts/setup.sh does)." >&2
    exit 1
  }
  # Archer sits beside the libomp this clang links, in its installation's lib/ (Debian's clang++ is a
  # link to /usr/lib/llvm-N/bin/clang); clang's -print-file-name does not search there.
  archer=$(dirname "$(dirname "$(readlink -f "$cxx")")")/lib/libarcher.so
  [[ -f $archer ]] || {
    echo "sanitize.sh: --thread needs LLVM's libarcher.so beside $cxx's OpenMP runtime ($archer is missing);" \
      "without it ThreadSanitizer cannot see OpenMP's barriers and would report races that are none." \
      "Install libomp-dev for this clang." >&2
    exit 1
  }
  [[ ${OMP_NUM_THREADS:-2} != 1 ]] || {
    echo "sanitize.sh: --thread with OMP_NUM_THREADS=1 would run every OpenMP region on one thread," \
      "where ThreadSanitizer can see no race; leave it unset (2) or set 2 or more." >&2
    exit 1
  }
fi
cache=$build/CMakeCache.txt
cached() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n 1; }
if [[ -f $cache ]]; then
  was_cxx=$(cached CMAKE_CXX_COMPILER)
  was_sanitize=$(cached HALFLING_SANITIZE)
  why=""
  if [[ $was_cxx != "$cxx" ]]; then
    why="it was configured with ${was_cxx:-no recorded compiler}, this run uses $cxx"
  elif [[ $was_sanitize != "$sanitizers" ]]; then
    why="its HALFLING_SANITIZE is '${was_sanitize}', not $sanitizers"
  fi
  if [[ -n $why ]]; then
    echo "sanitize.sh: configuring $build from scratch: $why"
    rm -rf -- "$cache" "$build/CMakeFiles"
  fi
fi
mkdir -p -- "$build"
log=$build/configure.log
cmake -S "$root" -B "$build" "${compiler[@]}" -DHALFLING_CUDA=OFF -DHALFLING_TESTS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG -D_GLIBCXX_ASSERTIONS" \
  -DHALFLING_SANITIZE="$sanitizers" >"$log" 2>&1 || {
  cat "$log" >&2
  echo "sanitize.sh: configuring $build failed (log: $log)" >&2
  exit 1
}
# What CMake made of it: the cache and the compile commands it generated must both carry the sanitizers.
problem=""
if [[ $(cached HALFLING_SANITIZE) != "$sanitizers" ]]; then
  problem="its cache has HALFLING_SANITIZE='$(cached HALFLING_SANITIZE)'"
elif [[ $(cached CMAKE_CXX_COMPILER) != "$cxx" ]]; then
  problem="its cache has the compiler '$(cached CMAKE_CXX_COMPILER)', not $cxx"
elif [[ $(cached HALFLING_CUDA) != OFF ]]; then
  problem="its cache has HALFLING_CUDA='$(cached HALFLING_CUDA)', not OFF"
elif ! grep -q -e "-fsanitize=$sanitizers" "$build/compile_commands.json" 2>/dev/null; then
  problem="its compile commands ($build/compile_commands.json) lack -fsanitize=$sanitizers"
fi
if [[ -n $problem ]]; then
  cat "$log" >&2
  echo "sanitize.sh: ERROR: $build is not the CPU-only $what build asked for: $problem." \
    "Nothing was built or tested; delete $build and run this script again." >&2
  exit 1
fi
cmake --build "$build" -j"$jobs"
built=$SECONDS

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if [[ $mode == tsan ]]; then
  # ignore_noninstrumented_modules: the OpenMP runtime's own accesses, which Archer stands in for (its
  # start-up message asks for this option). A report makes the program exit with 66, failing its test.
  export OMP_TOOL_LIBRARIES=$archer
  export TSAN_OPTIONS=${TSAN_OPTIONS:-ignore_noninstrumented_modules=1:second_deadlock_stack=1}
fi

# Left out, not because they fail:
#   MlpMnist.Fp32CpuReaches97PercentInTwoEpochs  too slow under ASan (3-10x slower) and ThreadSanitizer
#                                                (5-15x): it trains MLP-512 for 2 epochs x 3 seeds (~20 s in a
#                                                normal build, many minutes here); the smoke run of the
#                                                same code (MlpMnist.TutorialSmokeRun) stays in.
#   GpuScripts.*, Python.MutateScript            they test shell and Python scripts (with stand-ins for
#                                                nvcc, ncu and the build); no instrumented code of ours runs.
#   Python.PytorchTrajectory,                    their time is PyTorch's; the halfling side (bench/train's
#   Python.PytorchTrainScript                    --export, CPU training and --dump-weights) runs here in the
#                                                BenchTrain tests.
# The scripts' and PyTorch's tests took 164 of the 977 test-seconds here in the fresh-clone CI run of
# 2026-11-30 (2 cores), about 80 s of the run.
exclude='^(MlpMnist\.Fp32CpuReaches97PercentInTwoEpochs|GpuScripts\..*|Python\.MutateScript'
exclude+='|Python\.PytorchTrajectory|Python\.PytorchTrainScript)$'
status=0
# --timeout: a test that hangs fails after HALFLING_TEST_TIMEOUT seconds (default 900; scripts/test.sh
# says why) instead of holding up the run; the slowest test here took 20 s in CI on 2 cores (2026-11-29).
# Extra arguments come after, so a --timeout among them wins.
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout "${HALFLING_TEST_TIMEOUT:-900}" --no-tests=error \
  -E "$exclude" "$@" || status=$?
echo "sanitize.sh: build $((built - start)) s, tests $((SECONDS - built)) s" \
  "($what, CPU only, $(cached CMAKE_CXX_COMPILER))"
exit "$status"
