# shellcheck shell=bash
# The plumbing of the GPU-session scripts (scripts/gpu_check.sh, bench/gpu_gemm.sh, gpu_softmax.sh,
# gpu_conv.sh, gpu_bn.sh): sourced by them, never run. It cds to the repository root and sets:
#   root, build, arch, jobs, results, commit, gpu, slug, day, sanitizer, budget
# and defines unused_name, start_results, step, filter_matches, bg_start, bg_finish, record, build_targets,
# check_gpu, sanitizers_enabled, sanitize_kernels, bench_cluster_tiles, seed_ctest_costs and finish; and
# the lists of wmma_pipelined's cluster tiles and their tests (cluster_memcheck, cluster_race,
# cluster_tiles, own_tile).
#
# Those scripts are made for a lent GPU machine driven one bash command at a time: at most 600 s per
# command, a fresh machine (no build directory) for nearly every command, and only the files under $OUT
# come back. Hence: every script builds what it needs first, every step runs under a timeout taken from
# one time budget per script, and the results file goes to $OUT there.
#
# Environment (all optional):
#   HALFLING_BUILD    build directory (default build-gpu)
#   CUDA_ARCH         CMAKE_CUDA_ARCHITECTURES (default 90: H100/H200)
#   HALFLING_JOBS     parallel build jobs (default 16)
#   HALFLING_RESULTS  where results files go; default $OUT (the folder the device tool copies back), else
#                     bench/results/. Note: OUT is a folder here, not a file as in bench/compare_train.sh.
#   HALFLING_COMMIT   the commit to record (.git is usually not copied to the device machine)
#   HALFLING_BUDGET   seconds one script may take in all, build included (default 540: under the 600 s
#                     per command). A step gets min(its own timeout, what is left); a step with no time
#                     left is recorded as not run.
#                     Lower it when the session has less than 600 s of GPU time left.
#   HALFLING_BUILD_TIMEOUT  seconds for the build step at most (default 420)
#   HALFLING_SANITIZE 0: skip the compute-sanitizer steps of bench/gpu_*.sh (default 1)
#   HALFLING_PREBUILT 1: use the build carried in HALFLING_BUILD as it is (see build_targets)
# A caller may set default_budget before sourcing (gpu_check.sh bench: several scripts in a row).
# The caller uses `set -uo pipefail` without -e: a failing step is recorded and the next one runs.

# shellcheck disable=SC2034  # the variables below are used by the scripts that source this file

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2

# nvcc and compute-sanitizer are often installed outside the PATH; without nvcc the configure step fails
# (HALFLING_CUDA=ON) instead of quietly making a CPU-only build.
[[ -d /usr/local/cuda/bin ]] && export PATH=/usr/local/cuda/bin:$PATH

build=${HALFLING_BUILD:-build-gpu}
[[ $build == /* ]] || build=$root/$build
export HALFLING_BUILD=$build  # bench/compare_train.sh reads it too
# A carried build: the library folders scripts/gpu_unpack.sh found (cuBLAS, cuDNN) for every step.
if [[ ${HALFLING_PREBUILT:-0} == 1 && -f $build/prebuilt_env.sh ]]; then
  # shellcheck disable=SC1091
  source "$build/prebuilt_env.sh"
fi
export PYTHONUNBUFFERED=1     # else a Python step killed by its timeout loses its buffered output
arch=${CUDA_ARCH:-90}
jobs=${HALFLING_JOBS:-16}
results=${HALFLING_RESULTS:-${OUT:-$root/bench/results}}
mkdir -p "$results" || { echo "$0: cannot create the results folder '$results'" >&2; exit 2; }
results=$(cd "$results" && pwd)
commit=${HALFLING_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [[ -z ${HALFLING_COMMIT:-} && $commit != unknown ]] &&
  [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  commit+=" (with uncommitted changes)"
fi
sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
# nvidia-smi can hang on a broken driver: every call has a timeout.
# Its messages ("No devices were found") go to stdout: only a successful answer counts.
gpu=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null) || gpu=''
gpu=${gpu%%$'\n'*}
gpu=${gpu:-no GPU}
slug=$(echo "$gpu" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '_' | sed 's/^_*//; s/_*$//')
day=$(date -u +%F)
budget=${HALFLING_BUDGET:-${default_budget:-540}}
deadline=$((SECONDS + budget))
reserve=15  # seconds kept back for the kill grace (timeout -k 10) and the summary
invocation="${0#"$root"/}${*:+ $*}"
out=/dev/null  # until start_results
summary=()
status=0
current_step=
scratch=$(mktemp -d)  # the running step's pid and exit status
trap 'rm -rf "$scratch"' EXIT

say() { echo "$*" | tee -a "$out"; }

# shellcheck source=scripts/unused_name.sh
source "$root/scripts/unused_name.sh"

# start_results PREFIX TITLE: begin $results/PREFIX_<gpu>_<date>.txt with what ran, where and when; if
# the file exists (an earlier run of the day), $results/PREFIX_<gpu>_<date>_2.txt (_3, ...) instead,
# and the header says which. $out is the file from here on: every step, the summary and "written:".
start_results() {
  local wanted=$results/$1_${slug}_${day}.txt
  out=$(unused_name "$wanted")
  {
    echo "# $2"
    echo "# command: $invocation"
    local info
    info=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
      --format=csv,noheader 2>/dev/null) || info="none visible (nvidia-smi failed: ${info:-no output})"
    echo "# gpu: $info"
    echo "# nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [^,]*' || echo 'not found')"
    echo "# date: $(date -u +%FT%TZ)   commit: $commit"
    echo "# build: $build   CUDA_ARCH=$arch   HALFLING_JOBS=$jobs   time budget: $budget s"
    echo "# environment: $(env | grep -E '^(HALFLING_[A-Z_]*|CUDA_ARCH|BATCH|OMP_NUM_THREADS)=' | sort | tr '\n' ' ')"
    echo "# results: $out"
    [[ $out == "$wanted" ]] || echo "# (${wanted##*/} is an earlier run's: this run writes ${out##*/})"
  } | tee "$out"
}

# record NAME STATE [DETAIL]: one line of the summary. "ok" and "skipped" keep the exit status 0;
# any other state (FAILED, TIMEOUT, NOT RUN) makes the script fail.
record() {
  local name=$1 state=$2 detail=${3:-}
  summary+=("$(printf '%-8s %s%s' "$state" "$name" "${detail:+ ($detail)}")")
  case $state in ok | skipped) ;; *) status=1 ;; esac
  say "## $name: $state${detail:+ ($detail)}"
}

# step_seconds [WANT]: the seconds a step may run: what the budget has left (less the reserve), or WANT
# if that is less.
step_seconds() {
  local secs=$((deadline - SECONDS - reserve))
  [[ -n ${1:-} ]] && (($1 < secs)) && secs=$1
  echo "$secs"
}

# record_exit NAME RC TOOK SECS [WHY]: record a step that exited with RC after TOOK seconds under a
# timeout of SECS: ok, TIMEOUT (timeout's 124, or a KILL at the limit) or FAILED (WHY, if given, says what
# the exit status means).
record_exit() {
  local name=$1 rc=$2 took=$3 secs=$4 why=${5:-}
  if ((rc == 0)); then
    record "$name" ok "$took s"
  elif ((rc == 124 || (rc == 137 && took >= secs))); then
    record "$name" TIMEOUT "killed after $secs s"
  else
    record "$name" FAILED "exit $rc after $took s${why:+: $why}"
  fi
}

# step NAME [timeout SECS] CMD...: log the command and its output to the results file, run it under a
# timeout (SECS, or less if the budget has less left; no SECS: what is left), record its status.
# A shell function as CMD runs without a timeout (they only read logs): keep them quick.
# A --gtest_filter that matches no test of the program fails the step instead of passing vacuously.
# filter_matches NAME CMD...: when CMD runs a test program of the build with --gtest_filter=F, say how
# many tests F matches; none: record NAME as FAILED and return 1 (a filter that matches nothing passes
# under any sanitizer, silently).
filter_matches() {
  local name=$1 arg prog='' filter=''
  shift
  for arg in "$@"; do
    case $arg in
      --gtest_filter=*) filter=${arg#--gtest_filter=} ;;
      "$build"/tests/test_*) prog=$arg ;;
    esac
  done
  [[ -n $prog && -n $filter && -x $prog ]] || return 0
  local n
  n=$(timeout 60 "$prog" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -c '^  ')
  say "# $n tests match the filter"
  if ((n == 0)); then
    record "$name" FAILED "the filter matches no test of ${prog##*/}"
    return 1
  fi
}

step() {
  local name=$1 want=''
  shift
  if [[ ${1:-} == timeout ]]; then
    want=$2
    shift 2
  fi
  say ""
  say "## $name"
  local shown
  shown=$(printf '%q ' "$@")
  say "\$ ${shown% }"
  if [[ $1 == */* && ! -x $1 ]]; then  # most likely an earlier build step failed
    record "$name" FAILED "missing: $1"
    return 1
  fi
  local secs
  secs=$(step_seconds "$want")
  if ((secs < 10)) && [[ $(type -t "$1") != function ]]; then
    record "$name" "NOT RUN" "the $budget s time budget is spent"
    return 1
  fi
  filter_matches "$name" "$@" || return 1
  local t0=$SECONDS rc
  current_step=$name
  if [[ $(type -t "$1") == function ]]; then
    "$@" 2>&1 </dev/null | tee -a "$out"
    rc=${PIPESTATUS[0]}
  else
    # timeout runs the command in a process group of its own and signals all of it (ctest's tests,
    # compute-sanitizer's target); KILL 10 s after TERM if TERM is not enough. In the background, with
    # its pid noted, so that a signal to this script can stop it at once (on_signal).
    rm -f "$scratch/pid" "$scratch/rc"
    {
      timeout -k 10 "$secs" "$@" </dev/null 2>&1 &
      echo $! >"$scratch/pid"
      wait $!
      echo $? >"$scratch/rc"
    } | tee -a "$out" &
    wait $!
    rc=$(cat "$scratch/rc" 2>/dev/null)
    rc=${rc:-1}
  fi
  current_step=
  # gemm_bench and conv_bench print every row, then exit 3 if a row's output failed its check (its line
  # says WRONG): the step fails, and the next one runs.
  local why=''
  [[ $rc == 3 && ${1##*/} =~ ^(gemm|conv)_bench$ ]] && why="a row's output is WRONG (see the rows above)"
  record_exit "$name" "$rc" $((SECONDS - t0)) "$secs" "$why"
  return "$rc"
}

# A command that runs beside the foreground steps (gpu_check.sh short: the sanitizers beside ctest), with
# its output in a file of its own that bg_finish appends to the results file.
#   bg_start NAME SECS CMD...   start it, under a timeout of at most SECS (and what the budget has left)
#   bg_finish NAME              wait for it, append its output, record its status as step NAME
# A signal to the script stops the ones still running and records them as INTERRUPTED (on_signal).
bg_started=()  # their names, in the order they started
bg_start() {
  local name=$1 want=$2
  shift 2
  local secs
  secs=$(step_seconds "$want")
  if ((secs < 10)); then  # timeout 0 would mean no limit at all
    record "$name" "NOT RUN" "the $budget s time budget is spent"
    return 1
  fi
  filter_matches "$name" "$@" || return 1
  printf '%s\n' "$(printf '%q ' "$@")(timeout $secs s, beside the foreground steps)" >"$scratch/$name.log"
  (
    t0=$SECONDS
    timeout -k 10 "$secs" "$@" </dev/null >>"$scratch/$name.log" 2>&1 &
    echo $! >"$scratch/$name.timeout"
    wait $!
    echo "$? $((SECONDS - t0)) $secs" >"$scratch/$name.rc"
  ) &
  echo $! >"$scratch/$name.pid"
  bg_started+=("$name")
}
# shellcheck disable=SC2317  # called in a loop, and by on_signal
bg_finish() {
  local name=$1 state=${2:-} rc took secs
  [[ -f $scratch/$name.pid ]] || return 0  # never started: bg_start recorded why
  wait "$(cat "$scratch/$name.pid")" 2>/dev/null
  rm -f "$scratch/$name.pid"
  say ""
  say "## $name"
  say "\$ $(head -1 "$scratch/$name.log")"
  tail -n +2 "$scratch/$name.log" | tee -a "$out"
  if [[ -n $state ]]; then
    record "$name" "$state"
    return
  fi
  read -r rc took secs <"$scratch/$name.rc" 2>/dev/null || { rc=1 took=0 secs=0; }
  record_exit "$name" "$rc" "$took" "$secs"
}

# seed_ctest_costs: give a build that has not run its tests here (a carried one: gpu_pack.sh leaves its
# Testing/ behind) ctest's cost file from a GPU run, scripts/gpu_ctest_costs.txt: the tests that took a
# second or more in the H100's `short` of 2026-11-27 (seventh session), with their seconds. ctest -j then
# starts the longest first. Without it, it started them in the listed order: the longest test (143.7 s)
# finished last, and the step took 197 s of its 260 for 1087 s of tests on 8 jobs; with 160 tests more
# since, it might pass the limit. (Regenerate the file from a new run's log by the same rule.)
seed_ctest_costs() {
  local costs=$build/Testing/Temporary/CTestCostData.txt
  [[ -s $costs ]] && return 0
  mkdir -p "${costs%/*}" && cp "$root/scripts/gpu_ctest_costs.txt" "$costs"
}

# build_targets [TARGET...]: configure (a no-op when configured) and build TARGETs (none: everything),
# as the steps "configure" and "build". CUDA is required, not AUTO: a missing nvcc is an error.
# HALFLING_PREBUILT=1: the build was made on another machine and carried here (scripts/gpu_pack.sh and
# gpu_unpack.sh, for a GPU machine whose image lacks the build's libraries): nothing is configured or
# built, the step "build" only checks that the build directory is there.
build_targets() {
  if [[ ${HALFLING_PREBUILT:-0} == 1 ]]; then
    if [[ -f $build/CMakeCache.txt ]]; then
      local packed packed_commit
      packed=$(grep -m1 '^# packed' "$build/PREBUILT" 2>/dev/null || echo "$build")
      # What gpu_unpack.sh could not do (a data set, a library): each step that needs it fails on its own,
      # and this line says why first.
      if [[ -s $build/UNPACK_WARNINGS ]]; then
        say "$(cat "$build/UNPACK_WARNINGS")"
        record unpack FAILED "$(head -1 "$build/UNPACK_WARNINGS")"
      fi
      # A pack of another commit would label old programs' results with this one: refuse it.
      packed_commit=$(sed -n 's/.*commit \([0-9a-f]*\).*/\1/p' <<<"$packed")
      if [[ -n ${HALFLING_COMMIT:-} && -n $packed_commit && $HALFLING_COMMIT != "$packed_commit"* &&
        $packed_commit != "$HALFLING_COMMIT"* ]]; then
        record build FAILED "the carried build is of commit $packed_commit, not HALFLING_COMMIT=$HALFLING_COMMIT" \
          "(scripts/gpu_pack.sh on the commit to test)"
        return 1
      fi
      record build skipped "prebuilt: $packed"
      return 0
    fi
    record build FAILED "HALFLING_PREBUILT=1 but no build in $build (run scripts/gpu_unpack.sh first)"
    return 1
  fi
  step configure timeout 120 cmake -S "$root" -B "$build" -DHALFLING_CUDA=ON -DHALFLING_TESTS=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_BUILD_TYPE=Release || {
    record build "NOT RUN" "configure failed"
    return 1
  }
  local targets=()
  (($# > 0)) && targets=(--target "$@")
  step build timeout "${HALFLING_BUILD_TIMEOUT:-420}" cmake --build "$build" -j"$jobs" "${targets[@]}"
}

# check_gpu: fail (step "gpu") unless nvidia-smi lists a GPU: without one the CUDA tests skip and the
# benchmarks print "no CUDA device", all with exit status 0.
check_gpu() {
  step gpu timeout 30 bash -c 'nvidia-smi -L | grep "^GPU "'
}

# sanitizers_enabled NAME...: whether the compute-sanitizer steps NAME... should run; if not, records
# them as skipped (HALFLING_SANITIZE=0) or failed (no compute-sanitizer).
sanitizers_enabled() {
  local name
  if [[ ${HALFLING_SANITIZE:-1} == 0 ]]; then
    for name; do record "$name" skipped "HALFLING_SANITIZE=0"; done
    return 1
  fi
  if [[ ! -x $sanitizer ]]; then
    for name; do record "$name" FAILED "compute-sanitizer not found"; done
    return 1
  fi
  say "# compute-sanitizer: $sanitizer ($(timeout 20 "$sanitizer" --version 2>/dev/null | grep -o 'Version .*' | head -1))"
}

# sanitize_kernels MEMCHECK_FILTER [RACECHECK_FILTER [NAME]]: compute-sanitizer memcheck and racecheck
# on test_kernels with these gtest filters (racecheck: the memcheck one if not given), 150 s each,
# unless sanitizers_enabled says no; as steps memcheck and racecheck, or memcheck-NAME and racecheck-NAME.
sanitize_kernels() {
  local suffix=${3:+-$3}
  sanitizers_enabled "memcheck$suffix" "racecheck$suffix" || return 0
  step "memcheck$suffix" timeout 150 "$sanitizer" --tool memcheck --error-exitcode 1 "$build/tests/test_kernels" \
    --gtest_filter="$1"
  step "racecheck$suffix" timeout 150 "$sanitizer" --tool racecheck --error-exitcode 1 \
    "$build/tests/test_kernels" --gtest_filter="${2:-$1}"
}

# wmma_pipelined's cluster tiles (wmma_pipelined_tiles.h, new on 2026-11-28, Hopper only) are kept apart
# from everything else on a GPU. A cluster tile whose schedule is wrong on the hardware would wait
# forever; its waits trap after 20 s instead (kernels/cuda/mbarrier.cuh), and a trap leaves the
# program's CUDA context unusable, so that every later test or benchmark row of the same program would
# fail too (in test_kernels' file order the softmax tests come after the GEMM tests, packed_kept's and
# packed_online's among them). So:
# - cluster_memcheck, cluster_race: the tests that run the cluster tiles, which the scripts run under each
#   sanitizer in a process of their own and leave out of the others. For memcheck that is every test
#   named CudaGemm.WmmaPipelined*: every test that forces a tile of the table is named so
#   (GpuScripts.TestsThatForceAWmmaPipelinedTileRunApart checks), whether it runs every tile, every lean
#   one or the cluster tiles alone. Until 2026-11-29 the list named three tests, and
#   WmmaPipelinedEveryTileOneBlockRingWraps, which runs every tile too, ran in memcheck's first process
#   with the rest of the kernels' tests. For racecheck (slow): the two small ones. K = 300 in the ring
#   test: 10 steps, twice around the cluster tiles' 5 stages, in whole clusters whose other blocks lie
#   past C.
# - cluster_tiles, own_tile: the table's clustered() tiles and its kOwnTile; ahead_tiles: its tiles that
#   load their fragments ahead (2026-11-29; they cannot hang, and are swept with the others). All three
#   for bench_cluster_tiles and the ncu steps (GpuScripts.ClusterTilesNameTheTablesTiles checks them).
cluster_memcheck='CudaGemm.WmmaPipelined*'
cluster_race='CudaGemm.WmmaPipelinedEveryTileOneBlockRingWraps:CudaGemm.WmmaPipelinedLeanTilesInsideAndOnTheEdges'
cluster_tiles=(19 20)
ahead_tiles=(21 22 23)
own_tile=12

# bench_cluster_tiles RUNS: gemm_bench with each cluster tile in a program of its own, next to the rung's
# own tile, on the squares (--runs RUNS), as steps gemm-bench-tileN; the caller sweeps the other tiles
# (--sweep-tiles unclustered). Sets ran_cluster_tiles to the tiles whose step passed.
bench_cluster_tiles() {
  local tile
  ran_cluster_tiles=()
  for tile in "${cluster_tiles[@]}"; do
    step "gemm-bench-tile$tile" timeout 45 "$build/bench/gemm_bench" --runs "$1" --no-models \
      --variants wmma_pipelined --sweep --sweep-tiles "$own_tile,$tile" && ran_cluster_tiles+=("$tile")
  done
}

# finish: the per-step summary at the end of the results file; returns the exit status (1 if any step
# failed, timed out or was not run).
finish() {
  {
    echo
    echo "## summary: $invocation ($((SECONDS)) s of the $budget s budget)"
    printf '%s\n' "${summary[@]}"
    echo "# overall: $( ((status == 0)) && echo ok || echo FAILED)"
  } | tee -a "$out"
  echo "written: $out" >&2
  return "$status"
}

# Killed from outside (TERM, or Ctrl-C): still end the file with the summary.
on_signal() {
  trap - TERM INT
  local name
  # The background commands first (bg_start): their timeouts pass the signal on to them, and their
  # output, kept in $scratch, goes to the file before the EXIT trap deletes it.
  for name in "${bg_started[@]}"; do
    [[ -f $scratch/$name.pid && -s $scratch/$name.timeout ]] && kill -TERM "$(cat "$scratch/$name.timeout")" 2>/dev/null
  done
  if [[ -n $current_step && -s $scratch/pid ]]; then
    kill -TERM "$(cat "$scratch/pid")" 2>/dev/null
    wait "$(cat "$scratch/pid")" 2>/dev/null  # for the step's output to reach the file
  fi
  record "${current_step:-(between steps)}" INTERRUPTED "signal $1"
  for name in "${bg_started[@]}"; do
    bg_finish "$name" INTERRUPTED  # nothing for one finished already
  done
  finish
  exit "$2"
}
trap 'on_signal TERM 143' TERM
trap 'on_signal INT 130' INT
