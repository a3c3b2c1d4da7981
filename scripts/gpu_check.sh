#!/usr/bin/env bash
# Everything the project must verify on a GPU, in stages that each fit one command of a time-limited GPU
# session (600 s per command; the machine, and with it the build directory, is usually gone by the next
# command). So every stage configures and builds what it needs first (a no-op when already built), and
# stays within HALFLING_BUDGET seconds (default 540) including that build: every step has a timeout,
# and a step that hangs or finds no time left is recorded as failed, with the summary still written.
#
#   scripts/gpu_check.sh preflight      # versions of the tools and libraries, the data present, and
#                                       # whether a one-kernel CUDA program runs, also under
#                                       # compute-sanitizer (some sandboxes refuse it); a minute or less
#   scripts/gpu_check.sh build          # configure + build everything (shows how long a full build takes)
#   scripts/gpu_check.sh test           # build, then the CTest suite but for a few long CPU-only tests
#                                       # (cpu_only below; CI runs them); fails if any CUDA test skipped
#                                       # for lack of a GPU
#   scripts/gpu_check.sh sanitize [memcheck|racecheck]
#                                       # compute-sanitizer memcheck on the CUDA tests (small shapes) and
#                                       # racecheck on the kernels that use shared memory; one of the two
#                                       # if named (if the pair does not fit one command)
#   scripts/gpu_check.sh bench-gemm     # = bench/gpu_gemm.sh    } with HALFLING_SANITIZE=0 by default:
#   scripts/gpu_check.sh bench-conv     # = bench/gpu_conv.sh    } the sanitize stage covers their
#   scripts/gpu_check.sh bench-softmax  # = bench/gpu_softmax.sh } sanitizer steps; each writes its own file
#   scripts/gpu_check.sh bench-bn       # = bench/gpu_bn.sh      } (bench-bn: a minute or two)
#   scripts/gpu_check.sh bench          # all four bench-* in one go: MORE than 10 minutes, so not for a
#                                       # 600 s command (HALFLING_BUDGET defaults to 1800 here)
#   scripts/gpu_check.sh train          # tutorials 05 and 07 on MNIST, bench/compare_train.sh (halfling
#                                       # vs PyTorch, MLP-512 and LeNet), bench/seeds.sh (MLP-512 mixed
#                                       # and fp32 over 5 seeds, cosine and constant rate),
#                                       # bench/loader_throughput
#   scripts/gpu_check.sh short          # everything a session with ONE command of device time can
#                                       # verify (15 minutes of device time in all since 2026-11-26):
#                                       # the test stage's suite while compute-sanitizer runs beside it
#                                       # (memcheck on every CUDA test but the heaviest, `heavy`
#                                       # below; racecheck on the kernels added or changed since
#                                       # the last GPU run, small shapes), then, on a quiet
#                                       # GPU, conv_bench (and rungs 4 and 4b again with the tiled
#                                       # layout change), gemm_bench --sweep (wmma_pipelined's cluster
#                                       # tiles, and their tests under the sanitizers, each in a
#                                       # program of its own: gpu_common.sh says why), MLP-512's GPU seeds under
#                                       # tutorial 05's cosine schedule and tutorial 05 itself,
#                                       # softmax_bench --sweep (every register_row launch plan, never
#                                       # timed before 2026-11-26) + PyTorch's softmax, bn_bench,
#                                       # reduce_bench; then tutorial 07 (LeNet, 5 epochs), LeNet's step
#                                       # profile, tutorial 09 (VGG-small, 30 epochs: CIFAR-10) and
#                                       # the weight gradients' split counts (conv-splits);
#                                       # last, with the budget's rest, Nsight Compute on the new
#                                       # kernels whose times decide something (ncu_new_kernels);
#                                       # about 5 minutes (292 s on an H200, 2026-11-26; 327 s on an
#                                       # H100, 2026-11-27)
#   scripts/gpu_check.sh ablate         # issue #10: the fused epilogues (--no-fuse) and the multi-tensor
#                                       # optimizer (--no-multi-tensor) switched off, and the step as a
#                                       # CUDA graph (--cuda-graph), MLP-512, LeNet and VGG-small mixed,
#                                       # next to the defaults in two interleaved rounds, then a profile
#                                       # of each default step; about a minute (54 s on an H100)
#   scripts/gpu_check.sh ncu            # issues #4, #6, #7: Nsight Compute's counters (speed of light,
#                                       # stall reasons, bank conflicts, occupancy) for one launch of each
#                                       # kernel still short of its target, and of the reference it is
#                                       # measured against where that is one kernel (cuBLAS); ~3 minutes.
#                                       # ncu and short also write ncu_source_<stage>_<gpu>_<date>.tar.gz:
#                                       # each profile's source page, instruction by instruction
#                                       # (ncu_export below; scripts/ncu_source.py reads it anywhere)
#   scripts/gpu_check.sh profile        # where a training step's time goes, halfling (bench/train
#                                       # --profile) next to PyTorch (torch.profiler): LeNet and VGG-small
#                                       # mixed, 100 steps per epoch (VGG-small needs CIFAR-10); then
#                                       # the rungs the defaults replaced, end to end, next to them
#                                       # (HALFLING_CONV=implicit_gemm_wmma, HALFLING_BN=per_channel)
#
# A session has 15 minutes of device time in all (since 2026-11-26), starts and idle time included:
# one `short` command (about 5 minutes on an H200) and a follow-up of a few minutes at most (`ablate`). With more
# time, one stage per command (each command builds again on a fresh machine): 1) preflight 2) test
# 3) sanitize 4) bench-conv 5) bench-gemm 6) profile 7) train 8) bench-softmax 9) bench-bn. When a
# session has less than 600 s left, pass a smaller HALFLING_BUDGET (e.g. HALFLING_BUDGET=300).
# Data, when building there: carry ["data/mnist"] (~54 MB; the tutorial tests, the train stage and the
# loader benchmark need it); the steps that use CIFAR-10 skip themselves without it. A machine whose image
# lacks the build's Debian libraries (and cannot install any; so far, every one): build and pack here with
# scripts/gpu_pack.sh, carry [".gpu-carry"] (the build, MNIST as .xz and the CIFAR-10 JPEG archive: 38 MiB
# with the working tree on 2026-11-26), and run
# `bash scripts/gpu_unpack.sh && HALFLING_PREBUILT=1 scripts/gpu_check.sh STAGE` there.
# The commit: .git is usually not copied to the device, so pass it, e.g.
#   HALFLING_COMMIT=$(git rev-parse --short HEAD) scripts/gpu_check.sh test
#
# Each stage writes gpu_<stage>_<gpu>_<date>.txt (bench-*: their own gemm_/conv_/softmax_/bn_ files; train
# also train_cuda_<gpu>_<date>.txt from compare_train.sh) into $HALFLING_RESULTS, else $OUT (the folder
# the device tool copies back), else bench/results/. The file holds the GPU, the date, the commit, every
# command and its output, and ends with every step's status; the exit status is non-zero if any step
# failed (the later steps of the stage still run).
# Environment: see scripts/gpu_common.sh (HALFLING_BUILD, CUDA_ARCH, HALFLING_JOBS, HALFLING_RESULTS,
# HALFLING_COMMIT, HALFLING_BUDGET, HALFLING_BUILD_TIMEOUT); also HALFLING_DATA (default data/),
# HALFLING_CTEST_JOBS (8), HALFLING_NCU (the ncu to run; default: found by ncu_setup).
set -uo pipefail
usage="usage: scripts/gpu_check.sh preflight|build|test|sanitize [memcheck|racecheck]|bench-gemm|bench-conv|bench-softmax|bench-bn|bench|train|ablate|ncu|profile|short"
[[ $# -ge 1 ]] || { echo "$usage" >&2; exit 2; }
stage=$1
case $stage in
  preflight | build | test | train | ablate | ncu | profile | short) ;;
  sanitize)
    case ${2:-} in "" | memcheck | racecheck) ;; *) echo "$usage" >&2; exit 2 ;; esac ;;
  bench-gemm | bench-softmax | bench-conv | bench-bn)
    # One command each; its sanitizer steps are the sanitize stage's business unless asked for.
    export HALFLING_SANITIZE=${HALFLING_SANITIZE:-0}
    exec "$(cd "$(dirname "$0")/.." && pwd)/bench/gpu_${stage#bench-}.sh" ;;
  bench) default_budget=1800 ;;
  *)
    echo "scripts/gpu_check.sh: unknown stage '$stage'" >&2
    echo "$usage" >&2
    exit 2 ;;
esac

# shellcheck source=scripts/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"
label=$stage${2:+-$2}
start_results "gpu_$label" "scripts/gpu_check.sh $stage${2:+ $2}"

# The GoogleTest filters of the CUDA tests, per test program. Names verified against the sources: the
# kernel tests have "Cuda" in their suite names; the others are listed one by one.
kernels_cuda='*Cuda*'
framework_cuda='*DeviceMismatch*:AmpNoSyncCuda.*:Optim.StateFollowsTheModelToTheGpu:CudaGraph.*'
framework_cuda+=':Anomaly.BadLabelsOnTheGpu*:Tensor.FloatToIntCastTruncatesSaturatesAndMapsNanToZero'
framework_cuda+=':Tensor.CopyBetweenOverlappingViewsActsAsIfTheSourceWereReadFirst'
datasets_cuda='DataLoader.DeliversToCuda:DataLoader.GpuPathsMatchTheHostPath:Dataset.ToCudaCopiesEverything'
datasets_cuda+=':GatherRows.CudaMatchesCpu'
# Not under the sanitizers (each kernel launch is 10-100x slower there): the big GEMM sweep shapes and
# the heaviest conv/softmax tests (their kernels run on small shapes in the other tests), and
# AllocationFailureNamesTheSize, whose cudaMalloc(2^52) fails on purpose and which memcheck reports.
heavy='*CudaGemmSweep*/s128x784x512:*CudaGemmSweep*/s1000x1000x1000:*CudaGemmSweep*/s1024x4096x768'
heavy+=':ConvCuda.LeNetLayers:ConvCuda.VggSmallLayers:CudaConv.EveryVariantAllPassesAgainstFloat64Reference'
heavy+=':SoftmaxCuda.EveryRungForwardAgainstReference:CudaBatchNorm.ChannelsPastOneGridOfThreads'
heavy+=':CudaGemm.SplitKLongReductionsMatchFloat64'  # every rung at K up to 100352; SplitKEpilogues* covers the split kernels
heavy+=':CudaGemm.WgmmaEveryTileTheSweepTimes'  # 4 tiles x 4 layouts x 2 dtypes; ...InsideAndOnTheEdges covers them
heavy+=':CudaGemm.WgmmaTmaEveryTileTheSweepTimes'  # the same for wgmma_tma
heavy+=':CudaGemm.WgmmaTmaSplitKEveryTileOnLongReductions'  # ...SplitKSecondPassOverBatchesOfSlices covers it
# The row slabs (kernels::gemm past 2^19 rows, 2026-11-29, not yet run on a GPU): every rung on
# 524325 rows, then the automatic choice on 8388481, 67 million outputs, each checked against a float64
# reference. Under memcheck apart, in a process of its own ($memcheck_rows): the first of short's, where
# it would have been, took 230 s of its 240 in the H100's last short (seventh_b), 209 s without the
# WmmaPipelined tests that memcheck-cluster now runs.
memcheck_rows='CudaGemm.RowsPastOneGridOfRowTiles'
heavy+=":$memcheck_rows"
# racecheck: every kernel family that uses shared memory (GEMM tiles, softmax/BN/reduction trees,
# implicit-GEMM conv tiles), on small shapes; a superset of bench/gpu_*.sh's racecheck filters.
# Not CudaGemm.AccumulatesInFp32 (K = 4096 on every rung): on an H200 it ran past 150 s under racecheck
# without finishing (2026-11-23), while the small sweep shapes race-check the same tile code in seconds.
race='Shapes/CudaGemmSweep.*/s1x1x1:Shapes/CudaGemmSweep.*/s7x13x5:Shapes/CudaGemmSweep.*/s17x33x65'
race+=':CudaGemm.NaNPassesThroughBiasAndRelu:CudaGemm.MisalignedPointers*:CudaGemm.SplitKEpilogues*'
race+=':SoftmaxCuda.*:CudaSoftmax.*:CudaReduce.*:CudaOptim.*:CudaBatchNorm.*:CudaPool.*'
race+=':ConvCuda.SmallShapes*:ConvCuda.BetaAccumulates*:ConvCuda.BiasRelu*:ConvCuda.Im2colGemmChunks*'
race+=':ConvCuda.NhwcRungOnTheShapesItComputesItself'  # implicit_gemm_nhwc's cp.async ring
race+=':ConvCuda.NhwcWgradRungOnTheShapesItComputesItself'  # implicit_gemm_nhwc_wgrad's

# short: racecheck on the kernels added or changed since the last GPU run (docs/gpu_status.md's table)
# only, on small shapes, in two lists run side by side (on the H200, 2026-11-26, the two lists of that
# run took 226 s and 181 s beside the suite, of their 240). The lists began as those of the H100 runs of
# 2026-11-27, which verified every kernel in them, and stay as a regression check; the kernels changed
# or added on 2026-11-28 (below) have not run on a GPU yet. A kernel changed since goes in. Since
# 2026-11-26: rung 4b of the convolution (implicit_gemm_nhwc_wgrad, new then, the default since its
# H100 run; its own shapes, and every variant's small shapes, where it hands most calls on), the
# optimizer's launches (one per tensor on request), wmma_pipelined's sweep tiles #6-#11 (since
# 2026-11-28 in cluster_race, gpu_common.sh, with the rest of the table), wmma_smem's 64-deep K step,
# and the softmax rung packed_row (new, opt-in; its block reductions share memory): the first list. The
# lean-copy sweep tiles #12-#14 (in cluster_race too since 2026-11-28), wmma_smem's batched copy and
# mma_sync's lean copy in the blocks and steps where they run (copy_plan.h): the second, beside the
# convolution variants' small shapes, since the first holds rung 4b's own shapes, the heavier half; and
# the GEMM rung wgmma (new since 2026-11-27, Hopper only), whose ring is filled by cp.async and
# ordinary stores and read by the Tensor Cores through the async proxy, and the GEMM rung wgmma_tma (new
# since 2026-11-27, Hopper only), whose ring the TMA unit fills and whose mbarriers hand it between
# warpgroups (what racecheck can follow of that; the epilogue's staging tile, written over the ring, it
# does). (The softmax rung packed_warp, new since too, uses no shared memory: memcheck covers it, with
# every SoftmaxCuda test.)
race_new='ConvCuda.NhwcWgradRungOnTheShapesItComputesItself:CudaOptim.OneLaunchPerTensorGivesTheSameBits'
race_new+=':SoftmaxCuda.PackedRowGivesRegisterRowsBits'
race_new+=':CudaGemm.WmmaSmemEveryKStepOneBlock'
# reduce_sum's channel path (block_reduce shares memory; verified on the H100 in the seventh session of
# 2026-11-27, kept as a regression check).
race_new+=':CudaReduce.SumOverAnyDimensions:CudaReduce.ChannelPathGivesTheSameBitsEveryRun'
# The softmax rung packed_online (its block merge shares memory; verified on the H100 in the seventh
# session of 2026-11-27, its fold changed on 2026-11-28 for a NaN it dropped, not yet run on a GPU): the
# test of threads whose share of the row holds no finite value or whose maximum rises pack by pack, on
# rows of 4096 and 65536, and the NaN row.
race_new+=':SoftmaxCuda.PackedOnlineThreadsWithoutAFiniteValue'
# Rung 3's and 3b's kernels (implicit_gemm_wmma.cu; changed on 2026-11-28, without a GPU: Divisor
# quotients, tap offsets in the loop, predicated loads): both rungs on every pass, strided included.
race_new+=':ConvCuda.TapTableIsBitIdenticalToRung3'
# The tiled layout change of rungs 4 and 4b (nchw_to_nhwc_tiled_kernel; new on 2026-11-28, opt-in): a
# transpose through shared memory, on rung 4's own shapes.
race_new+=':ConvCuda.TiledLayoutChangeGivesTheSameBits'
# The softmax rung packed_kept (new on 2026-11-28, opt-in: each thread's kept exponentials in shared
# memory, the block's merge of its threads' pairs): the rows of threads without a finite value.
race_new+=':SoftmaxCuda.PackedKeptThreadsWithoutAFiniteValue'
# optim.cu's adam_kernel with the count of applied steps on the device (its coefficients computed in
# double since 2026-11-29, eighth session): thread 0 of each block writes the two bias corrections to
# shared memory before a barrier, a path OneLaunchPerTensorGivesTheSameBits (host-counted) does not take.
race_new+=':CudaOptim.DeviceSkipFlagFirstStepFlagsAndStepCount'
# wmma_pipelined's cluster tiles #19-#20 (new on 2026-11-28, Hopper only: each block's ring filled by its
# own cp.async and by its peers' st.async, handed over through mbarriers) are in cluster_race (gpu_common.sh).
race_second='ConvCuda.BetaAccumulatesIntoTheOutput'
race_second+=':CudaGemm.WmmaSmemBatchedCopyInsideAndOnTheEdges:CudaGemm.MmaSyncLeanCopyInsideAndOnTheEdges'
race_second+=':CudaGemm.WgmmaEveryTileInsideAndOnTheEdges'  # the wgmma rung (new since 2026-11-26), every tile
race_second+=':CudaGemm.WgmmaTmaEveryTileInsideAndOnTheEdges'  # the wgmma_tma rung (new since 2026-11-26)
race_second+=':CudaGemm.WgmmaTmaSplitKSecondPassOverBatchesOfSlices'  # and its split-K form
# short's memcheck runs these kernel tests in a second process, beside the rest (below).
memcheck_second='ConvCuda.*:CudaConv.*:SoftmaxCuda.*:CudaSoftmax.*'
# ... except the convolution tests of the kernels changed or added on 2026-11-28 (rung 3's, the tiled
# layout change), which get a third process: the second took 210 s of its 240 in the seventh session.
memcheck_third='ConvCuda.TapTableIsBitIdenticalToRung3:ConvCuda.TiledLayoutChange*'
# ... and the softmax rung packed_kept's (new on 2026-11-28). (memcheck_second's SoftmaxCuda.* has them,
# so that the first process leaves them out; the second leaves out what is in memcheck_third.)
memcheck_third+=':SoftmaxCuda.PackedKeptAtItsCapacityBoundaries:SoftmaxCuda.PackedKeptThreadsWithoutAFiniteValue'

# The test stage leaves out CPU-only tests that take minutes (tutorials run with --device cpu, the CPU
# accuracy bar): CI runs them on every commit, and on the H200 machine (16 cores shared with the CUDA
# tests) they set the stage's length: 304 s, of which MlpMnist.Fp32CpuReaches97PercentInTwoEpochs alone
# took 259 s (gpu_test_nvidia_h200_2026-11-23.txt). Exact test names, checked against the test programs
# by GpuScripts.FiltersNameTestsThatExist; HALFLING_GPU_TEST_ALL=1 runs them too.
cpu_only='MlpMnist.Fp32CpuReaches97PercentInTwoEpochs:MlpMnist.TutorialSmokeRun'
cpu_only+=':Tutorial05.LenetSmokeRunPrintsTheSameTable:Tutorial05.SmokeRunPrintsTheComparisonTable'
cpu_only+=':Tutorial06.SmokeRun:Tutorial06Flags.MixedHistogramRunAndBadFlags'
cpu_only+=':Tutorial07.LenetSmokeRunInMixedPrecision:Tutorial07.VggSmallSmokeStepsInMixedPrecision'
cpu_only+=':Tutorial09.SmokeRunInMixedPrecision:Tutorial09.Fp32KeepsEverythingFp32WithoutMastersAndSavesAModelCard'
cpu_only+=':Tutorial10Handoff.Tutorial07LenetSaveThen10OnADrawnDigit'

# preflight: which headers the build needs are where CMake looks.
# shellcheck disable=SC2317  # called through step
headers() {
  local h d found missing=0
  for h in gtest/gtest.h CLI/CLI.hpp nlohmann/json.hpp zlib.h; do
    found=
    for d in /usr/include /usr/local/include; do [[ -f $d/$h ]] && found=$d/$h && break; done
    echo "${found:-MISSING: $h}"
    [[ -n $found ]] || missing=1
  done
  # Optional: conv_bench's cuDNN column (bench/CMakeLists.txt; CUDNN_ROOT is a search hint).
  echo "cudnn.h (optional): $(find /usr/include /usr/local /opt -name cudnn.h 2>/dev/null | head -3 | tr '\n' ' ')"
  return "$missing"
}

# preflight: the machine and the data (information only).
# shellcheck disable=SC2317  # called through step
machine() {
  echo "cores: $(nproc)   memory: $(free -g | awk '/^Mem/ {print $2 " GiB"}')"
  df -h "$root" | tail -1
  local d
  for d in mnist cifar10; do
    if [[ -d ${HALFLING_DATA:-$root/data}/$d ]]; then
      echo "data/$d: $(du -sh "${HALFLING_DATA:-$root/data}/$d" | cut -f1)"
    else
      echo "data/$d: absent"
    fi
  done
}

# preflight: a one-kernel program, to see that nvcc's output runs here and compute-sanitizer can watch it
# (under some sandboxes it answers "Device not supported"), before a whole stage depends on either.
# shellcheck disable=SC2317  # called through step
probe_source() {
  cat >"$scratch/probe.cu" <<'EOF'
#include <cstdio>
__global__ void fill(int* p) { p[threadIdx.x] = static_cast<int>(threadIdx.x); }
int main() {
  int* d = nullptr;
  cudaError_t e = cudaMalloc(&d, 32 * sizeof(int));
  if (e == cudaSuccess) {
    fill<<<1, 32>>>(d);
    e = cudaDeviceSynchronize();
    cudaFree(d);
  }
  std::printf("probe kernel: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
EOF
  echo "wrote $scratch/probe.cu"
}

# test: the ctest summary line, and every test that skipped for lack of a GPU (HL_REQUIRE_CUDA's "no CUDA
# device: ...", test_ops.cpp's "needs a GPU: ...", the registry tests' "built without CUDA").
# shellcheck disable=SC2317  # called through step
cuda_skips() {
  local log=$build/Testing/Temporary/LastTest.log line skipped
  line=$(grep -E '[0-9]+% tests passed' "$out" | tail -1)
  echo "ctest: ${line:-no summary line (ctest did not finish)}"
  [[ -f $log ]] || { echo "no $log: ctest did not run"; return 1; }
  skipped=$(awk '/^[0-9]+\/[0-9]+ Test: / {name = $3}
                 /no CUDA device|needs a GPU|built without CUDA/ {print name}' "$log" | sort -u)
  if [[ -n $skipped ]]; then
    echo "$(wc -l <<<"$skipped") CUDA tests skipped for lack of a GPU:"
    echo "$skipped"
    return 1
  fi
  echo "no CUDA test skipped for lack of a GPU"
}

# short: every op case of Python.PytorchParity, and its optimizers, on the GPU with the default variants,
# checked against the machine's PyTorch (its python3 has torch; about 2 s in all). The file stays in the
# results, to be checked again at home with the project's PyTorch (docs/gpu_status.md, item 12).
# shellcheck disable=SC2317  # called through step
parity_cuda() {
  local file
  file=$(unused_name "$results/parity_cases_cuda_${slug}_${day}.safetensors")
  "$build/tests/python/parity_cases" "$((RANDOM * 32768 + RANDOM))" "$file" cuda || return
  timeout 120 python3 "$root/tests/python/pytorch_parity.py" --file "$file"
}

# ncu and short: Nsight Compute's counters for one launch of a kernel, picked by its name.
#   ncu_setup     find ncu (ncu_bin: $HALFLING_NCU if set, else the PATH's, else the newest under /opt/nvidia
#                 or the CUDA toolkit) and name the sections to collect (ncu_sections); 1 if there is none
#   ncu_kernel NAME REGEX COUNT PROGRAM ARGS...
#                 profile the first COUNT launches of kernels whose function name matches REGEX (the
#                 names are the __global__ functions in kernels/cuda/; GpuScripts.NcuProfilesKernelsThatExist
#                 checks them) while PROGRAM runs, as step ncu-NAME; then ncu_export NAME
#   ncu_export NAME
#                 the report of step ncu-NAME as CSV, instruction by instruction (the source page: each
#                 SASS instruction's executions, warp stall samples by reason, shared-memory wavefronts
#                 against the ideal, excess L2 sectors) and every metric collected (the raw page), into
#                 $results/ncu_source_<stage>_<gpu>_<date>.tar.gz (one file, remade after each kernel, so
#                 that a run stopped early keeps what it had), as step ncu-export-NAME
# Nsight Compute replays the launch once per pass of counters; the clocks are left alone (--clock-control
# none, as the device notes ask) and the caches are flushed between passes (its default), so a softmax
# shape that fits in L2 starts cold here where softmax_bench times it warm. What to read: the speed-of-
# light percentages, the warp-state rule that names the dominant stall, the shared-memory bank-conflict
# table, occupancy. --print-details all prints each section's body too (the default, its header only,
# left out the memory tables and the source counters' tables, such as where the 33% "excessive sectors"
# of the cp.async GEMMs at 4096^3 come from: gpu_ncu_nvidia_h100_80gb_hbm3_2026-11-27.txt). Nsight
# Compute 2024.1 takes the option, and the H100's ncu named it in that run's output.
# Why the exports (2026-11-29): the details page names a kernel's dominant stall and its five worst
# source lines, not which instruction of a K loop the warps wait at, nor which shared-memory
# instruction makes the 35% excess wavefronts of wmma_pipelined's tile #12 (the H100's counters of
# 2026-11-27: 105.4 million wavefronts, 37.2 million above the ideal; docs/gpu_status.md). The source
# page has both, for every instruction, from the same replay; scripts/ncu_source.py reads it on any
# machine, without a GPU and without Nsight Compute, so that sessions without a GPU can work from it.
# The .ncu-rep reports stay behind: an older Nsight Compute (Debian's 2024.1) may not open a newer
# one's report, and CSV reads anywhere.
ncu_missing="no ncu on the PATH, under /opt/nvidia or in the CUDA toolkit"  # what both stages say without it
ncu_reports=$scratch/ncu-reports  # the reports, until ncu_export has printed them as CSV
ncu_source_archive=  # this run's archive of source pages, named at the first export (unused_name)
ncu_setup() {
  ncu_bin=${HALFLING_NCU:-$(command -v ncu ||
    find /opt/nvidia /usr/local/cuda*/ -name ncu -type f -perm -u+x 2>/dev/null | sort | tail -n 1)}
  [[ -n $ncu_bin ]] || return 1
  ncu_sections=()
  local section
  for section in SpeedOfLight ComputeWorkloadAnalysis MemoryWorkloadAnalysis_Tables WarpStateStats \
    SchedulerStats Occupancy LaunchStats InstructionStats SourceCounters; do
    ncu_sections+=(--section "$section")
  done
}
ncu_kernel() {
  local name=$1 regex=$2 count=$3
  shift 3
  mkdir -p "$ncu_reports"
  rm -f "$ncu_reports/$name.ncu-rep"
  # --page details: with --export alone, ncu prints no results to the console.
  step "ncu-$name" timeout 150 "$ncu_bin" --clock-control none --print-summary none --print-details all \
    --page details --export "$ncu_reports/$name" --force-overwrite "${ncu_sections[@]}" -k "regex:$regex" \
    -c "$count" "$@"
  ncu_export "$name"
}
ncu_export() {
  local name=$1 rep=$ncu_reports/$1.ncu-rep
  if [[ ! -s $rep ]]; then
    record "ncu-export-$name" skipped "no report: step ncu-$name profiled nothing"
    return 0
  fi
  # A rerun on the same day writes an archive of its own, as its results file is one of its own.
  [[ -n $ncu_source_archive ]] || ncu_source_archive=$(unused_name "$results/ncu_source_${label}_${slug}_${day}.tar.gz")
  local csv=$ncu_reports/csv archive=$ncu_source_archive n secs
  secs=$(step_seconds 120)
  if ((secs < 5)); then
    record "ncu-export-$name" "NOT RUN" "the $budget s time budget is spent"
    return 1
  fi
  mkdir -p "$csv"
  # Two imports, each with what the budget has left when it starts (and KILL 5 s after TERM), so that
  # a hung import cannot take the run past its deadline.
  if ! timeout -k 5 "$secs" "$ncu_bin" --import "$rep" --page source --csv --print-source sass \
    >"$csv/$name.sass.csv" ||
    ! { secs=$(step_seconds 120) && ((secs >= 5)) &&
      timeout -k 5 "$secs" "$ncu_bin" --import "$rep" --page raw --csv >"$csv/$name.raw.csv"; }; then
    rm -f "$csv/$name".*.csv
    record "ncu-export-$name" FAILED "ncu --import $rep could not print its source or raw page"
    return 1
  fi
  rm -f "$rep"  # the CSV files hold what is read from it
  n=$(grep -c '^"0x' "$csv/$name.sass.csv")
  # Written beside, then renamed: a run stopped here keeps the previous archive whole. An archive the
  # device tool would not return (16 MiB per file at most) is made again without this step's pages:
  # the previous one, with the same other pages, was under the limit.
  local size failed="could not write $archive"
  ncu_archive "$csv" "$archive" || { record "ncu-export-$name" FAILED "$failed"; return 1; }
  size=$(stat -c %s "$archive" 2>/dev/null || echo 0)
  if ((size > 15 * 1024 * 1024)); then
    rm -f "$csv/$name".*.csv
    ncu_archive "$csv" "$archive" || { record "ncu-export-$name" FAILED "$failed"; return 1; }
    record "ncu-export-$name" FAILED "left out: with its pages $archive would pass the 15 MiB the device tool returns"
    return 1
  fi
  record "ncu-export-$name" ok "$n SASS instructions, in ${archive##*/} ($((size / 1024)) KiB)"
}
# ncu_archive DIR ARCHIVE: DIR's CSV pages as ARCHIVE (.tar.gz, through ARCHIVE.part and a rename), or no
# ARCHIVE when DIR holds none.
ncu_archive() {
  if [[ -z $(compgen -G "$1/*.csv") ]]; then
    rm -f "$2"
    return 0
  fi
  (cd "$1" && tar -czf "$2.part" -- *.csv) && mv -f "$2.part" "$2" && return 0
  rm -f "$2.part"
  return 1
}
# The kernels written on 2026-11-28 without a GPU whose times decide something (docs/gpu_status.md, "The
# next GPU session"): packed_kept at 128x65536 (issue #6), rung 3's changed forward and data-gradient
# kernels on VGG-small's 256->256 layer (issue #7; its weight gradient is the ncu stage's
# conv-256-wgrad-rung3), and wmma_pipelined's cluster tiles at 4096^3 (issue #4), those of cluster_tiles
# named in the arguments (short: those whose gemm_bench step passed; one that traps would cost its 20 s
# wait, or more, under each of ncu's replays; the others are recorded as skipped), after the others for
# that reason, with the rung's own tile before them and tile #13 after (below); and the tiles of
# 2026-11-29 that load their fragments ahead (ahead_tiles), the first next to #12, the others after;
# last, packed_online at 128x65536, to read packed_kept against. short runs them at its end, with the
# time its budget has left, so that a kernel that misses its bar comes back with the counters that say
# why, without another command; the ncu stage runs them too.
# About 6 s each on the H100.
ncu_new_kernels() {
  ncu_kernel softmax-128x65536-packed_kept 'packed_kept_kernel' 1 "$build/bench/softmax_bench" --samples 3 \
    --shapes 128x65536 --variants packed_kept
  local conv=("$build/bench/conv_bench" --batch 128 --runs 1 --layers vgg --only '256->256' --no-cudnn
    --variants implicit_gemm_wmma)
  ncu_kernel conv-256-fwd-rung3 'conv_implicit_gemm_kernel' 1 "${conv[@]}" --passes forward
  ncu_kernel conv-256-bwd-data-rung3 'conv_implicit_gemm_kernel' 1 "${conv[@]}" --passes backward_data
  local gemm=("$build/bench/gemm_bench" --sizes 4096 --no-models --warmup 0 --runs 1 --variants wmma_pipelined)
  # The rung's own tile (#12) on this GPU, what the cluster tiles' counters are read against (the H100's
  # of 2026-11-27 are in gpu_ncu_nvidia_h100_80gb_hbm3_2026-11-27.txt; this GPU may be another).
  ncu_kernel gemm-4096-wmma_pipelined-own 'gemm_wmma_pipelined_kernel' 1 "${gemm[@]}" --tile "$own_tile"
  # #12 with its fragments loaded ahead (#21, wmma_pipelined.cu's point 5): the warp stall reasons and
  # eligible warps next to #12's, which its change of order is meant to move.
  local first=${ahead_tiles[0]} tile
  ncu_kernel "gemm-4096-wmma_pipelined-ahead$first" 'gemm_wmma_pipelined_kernel' 1 "${gemm[@]}" --tile "$first"
  for tile in "${cluster_tiles[@]}"; do
    if [[ " $* " == *" $tile "* ]]; then
      ncu_kernel "gemm-4096-wmma_pipelined-cluster$tile" 'gemm_wmma_pipelined_cluster_kernel' 1 "${gemm[@]}" \
        --tile "$tile"
    else
      record "ncu-gemm-4096-wmma_pipelined-cluster$tile" skipped "its step gemm-bench-tile$tile did not pass"
    fi
  done
  # Tile #13 (#12 with a 64-deep K step: its copies of A cover whole 128-byte rows where #12's cover
  # 64-byte ones), the test of the L2 reading (docs/gpu_status.md, "Leads"): the 2026-11-27 counters
  # put 33% excess sectors on every 32-deep cp.async kernel, as many as A's own, and none on wgmma's
  # 64-deep one; #13 was only 2-6% faster than #12. If #13's L2 throughput is well below #12's at
  # about the same speed, L2 is not what holds #12, and the cluster tiles' lower L2 traffic will not
  # move it much either.
  ncu_kernel gemm-4096-wmma_pipelined-k64 'gemm_wmma_pipelined_kernel' 1 "${gemm[@]}" --tile 13
  # The other tiles with fragments ahead (#22: #13's; #23: #17's 64 x 64 warps, one block per SM).
  for tile in "${ahead_tiles[@]:1}"; do
    ncu_kernel "gemm-4096-wmma_pipelined-ahead$tile" 'gemm_wmma_pipelined_kernel' 1 "${gemm[@]}" \
      --tile "$tile"
  done
  # packed_online at 128x65536, the rung packed_kept would replace there, from the same GPU: the two
  # source pages side by side (scripts/ncu_source.py) say where packed_kept's exponentials-once saved
  # time, or did not. Last: its counters of 2026-11-27 are in gpu_ncu_packed_online_v2_*.
  ncu_kernel softmax-128x65536-packed_online 'packed_online_forward_kernel' 1 "$build/bench/softmax_bench" \
    --samples 3 --shapes 128x65536 --variants packed_online
}

case $stage in
  preflight)
    step nvidia-smi timeout 30 nvidia-smi
    step nvcc timeout 30 nvcc --version
    step cmake timeout 30 cmake --version
    step compute-sanitizer timeout 30 "$sanitizer" --version
    step stb timeout 30 pkg-config --modversion stb
    step torch timeout 90 python3 -c 'import numpy, torch
print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU available:", torch.cuda.is_available(),
      "numpy", numpy.__version__)'
    step headers headers
    step machine machine
    step probe-source probe_source
    step probe-build timeout 120 nvcc -arch="sm_${arch%%;*}" -o "$scratch/probe" "$scratch/probe.cu"
    step probe-run timeout 30 "$scratch/probe"
    step probe-memcheck timeout 90 "$sanitizer" --tool memcheck --error-exitcode 1 "$scratch/probe"
    ;;
  build)
    build_targets
    ;;
  test)
    build_targets  # everything: the tests run the tutorials and bench programs too
    check_gpu
    rm -f "$build/Testing/Temporary/LastTest.log"  # so that a stale log cannot answer for this run
    # -j8 on 16 cores: many tests use OpenMP themselves. A hung test is killed after 300 s.
    exclude=()
    [[ ${HALFLING_GPU_TEST_ALL:-0} == 1 ]] || exclude=(-E "^(${cpu_only//:/|})\$")
    seed_ctest_costs
    step ctest ctest --test-dir "$build" -j"${HALFLING_CTEST_JOBS:-8}" --timeout 300 --output-on-failure \
      --no-tests=error "${exclude[@]}"
    step cuda-skips cuda_skips
    ;;
  sanitize)
    build_targets test_kernels test_framework test_datasets
    check_gpu
    if [[ ! -x $sanitizer ]]; then
      record compute-sanitizer FAILED "not found: $sanitizer"
    else
      if [[ ${2:-memcheck} == memcheck ]]; then
        # The small programs first, so that the big one's timeout cannot cost their results.
        step memcheck-framework timeout 90 "$sanitizer" --tool memcheck --error-exitcode 1 \
          "$build/tests/test_framework" --gtest_filter="$framework_cuda"
        step memcheck-datasets timeout 90 "$sanitizer" --tool memcheck --error-exitcode 1 \
          "$build/tests/test_datasets" --gtest_filter="$datasets_cuda"
        step memcheck-kernels timeout 300 "$sanitizer" --tool memcheck --error-exitcode 1 \
          "$build/tests/test_kernels" \
          --gtest_filter="$kernels_cuda-$heavy:CudaRuntime.AllocationFailureNamesTheSize:$cluster_memcheck"
        step memcheck-cluster timeout 150 "$sanitizer" --tool memcheck --error-exitcode 1 \
          "$build/tests/test_kernels" --gtest_filter="$cluster_memcheck"
        step memcheck-rows timeout 240 "$sanitizer" --tool memcheck --error-exitcode 1 \
          "$build/tests/test_kernels" --gtest_filter="$memcheck_rows"
      fi
      if [[ ${2:-racecheck} == racecheck ]]; then
        step racecheck-kernels timeout 300 "$sanitizer" --tool racecheck --error-exitcode 1 \
          "$build/tests/test_kernels" --gtest_filter="$race-$heavy"
        step racecheck-cluster timeout 150 "$sanitizer" --tool racecheck --error-exitcode 1 \
          "$build/tests/test_kernels" --gtest_filter="$cluster_race"
      fi
    fi
    ;;
  bench)
    for s in gemm conv softmax bn; do
      # Each script gets what is left of this budget (at most the usual 540 s) and ends its own file.
      child=$((deadline - SECONDS - reserve - 20))
      ((child > 540)) && child=540
      step "bench-$s" timeout $((child + 20)) env HALFLING_BUDGET="$child" \
        HALFLING_SANITIZE="${HALFLING_SANITIZE:-0}" "$root/bench/gpu_$s.sh"
    done
    ;;
  train)
    build_targets 05_mixed_precision 07_conv_lenet train loader_throughput
    check_gpu
    export HALFLING_DATA=${HALFLING_DATA:-$root/data}  # bench/train reads it (via compare_train.sh)
    mnist=$HALFLING_DATA/mnist
    if [[ ! -d $mnist ]]; then
      record mnist FAILED "no $mnist: pass carry [\"data/mnist\"]"
    else
      step tutorial-05 timeout 150 "$build/tutorials/05_mixed_precision" --device cuda --epochs 5 --data "$mnist"
      step tutorial-07 timeout 120 "$build/tutorials/07_conv_lenet" --device cuda --precision mixed --epochs 5 \
        --data "$mnist"
      # compare_train.sh's OUT is a file name (ours is a folder): its table goes next to our file.
      step compare-train timeout 240 env OUT="$results/train_cuda_${slug}_${day}.txt" \
        "$root/bench/compare_train.sh" cuda mlp512,lenet 3
      # Issue #10: what the synchronization-free step saves (docs/performance.md): the small models,
      # where the host's queueing sets the pace, with and without one host read per step, interleaved.
      for round in 1 2; do
        for model in mlp512 lenet; do
          for sync in no-sync sync-each-step; do
            flags=(--model "$model" --precision mixed --device cuda --epochs 4)
            [[ $sync == sync-each-step ]] && flags+=(--sync-each-step)
            step "$sync-$model-$round" timeout 90 "$build/bench/train" "${flags[@]}"
          done
        done
      done
      # Issue #5: MLP-512 `mixed` and `fp32` over seeds 0-4, 5 epochs each (one seed is one draw), with
      # tutorial 05's cosine schedule and at DESIGN.md §4's constant rate (tutorials/05_mixed_precision).
      for schedule in cosine constant; do
        step "seeds-mlp512-$schedule" timeout 300 env SCHEDULE=$schedule \
          OUT="$results/seeds_mlp512_${schedule}_cuda_${slug}_${day}.txt" "$root/bench/seeds.sh" cuda mlp512 5 5
      done
    fi
    # CIFAR-10 skips itself when absent.
    step loader-throughput timeout 90 "$build/bench/loader_throughput" --device cuda --mnist "$mnist" \
      --cifar10 "$HALFLING_DATA/cifar10"
    ;;
  short)
    # Phase 1: the test stage's suite, with compute-sanitizer beside it (correctness only: the GPU is
    # shared, so nothing in this phase is timed). Phase 2: the benchmarks, one at a time on a quiet GPU,
    # the likeliest to close an issue first (docs/gpu_status.md).
    build_targets
    check_gpu
    rm -f "$build/Testing/Temporary/LastTest.log"
    if [[ -x $sanitizer ]]; then
      # shellcheck disable=SC2016  # the inner bash expands its own arguments
      # memcheck in three processes side by side: on 2026-11-26 the one process took 235 s of its 240, and
      # the tests added since (sweep tiles, wmma_smem's K steps, packed_row) would have passed the limit.
      # The convolution and softmax tests (about 95 s of that run) go to the second, and since 2026-11-28
      # (the second took 210 s of its 240 in the seventh session) the tests of that day's convolution
      # kernels to a third ($memcheck_third).
      # The three programs one after the other, each whatever the one before gave: a failure in the
      # framework's tests must not leave the kernels' unchecked. 270 s, not 240: 230 s in the H100's last
      # short (209 s of it for what it still runs), and the stricter tests of 2026-11-29 add a few seconds.
      bg_start memcheck 270 bash -c 'r=0; "$1" --tool memcheck --error-exitcode 1 "$2/tests/test_framework" \
        --gtest_filter="$3" || r=1; "$1" --tool memcheck --error-exitcode 1 "$2/tests/test_datasets" \
        --gtest_filter="$4" || r=1; "$1" --tool memcheck --error-exitcode 1 "$2/tests/test_kernels" \
        --gtest_filter="$5" || r=1; exit $r' memcheck "$sanitizer" "$build" "$framework_cuda" "$datasets_cuda" \
        "$kernels_cuda-$heavy:CudaRuntime.AllocationFailureNamesTheSize:$memcheck_second:$cluster_memcheck"
      bg_start memcheck-conv-softmax 240 "$sanitizer" --tool memcheck --error-exitcode 1 \
        "$build/tests/test_kernels" --gtest_filter="$memcheck_second-$heavy:$memcheck_third"
      bg_start memcheck-conv-new 240 "$sanitizer" --tool memcheck --error-exitcode 1 \
        "$build/tests/test_kernels" --gtest_filter="$memcheck_third"
      bg_start memcheck-rows 240 "$sanitizer" --tool memcheck --error-exitcode 1 \
        "$build/tests/test_kernels" --gtest_filter="$memcheck_rows"
      bg_start racecheck-new 240 "$sanitizer" --tool racecheck --error-exitcode 1 "$build/tests/test_kernels" \
        --gtest_filter="$race_new"
      bg_start racecheck-new-second 240 "$sanitizer" --tool racecheck --error-exitcode 1 \
        "$build/tests/test_kernels" --gtest_filter="$race_second"
      # The tests that run wmma_pipelined's cluster tiles, apart (gpu_common.sh, cluster_memcheck, says why).
      bg_start memcheck-cluster 240 "$sanitizer" --tool memcheck --error-exitcode 1 "$build/tests/test_kernels" \
        --gtest_filter="$cluster_memcheck"
      bg_start racecheck-cluster 240 "$sanitizer" --tool racecheck --error-exitcode 1 "$build/tests/test_kernels" \
        --gtest_filter="$cluster_race"
    else
      record compute-sanitizer FAILED "not found: $sanitizer"
    fi
    seed_ctest_costs
    step ctest timeout 260 ctest --test-dir "$build" -j"${HALFLING_CTEST_JOBS:-8}" --timeout 240 \
      --output-on-failure --no-tests=error -E "^(${cpu_only//:/|})\$"
    step cuda-skips cuda_skips
    step parity-cuda parity_cuda
    if [[ -x $sanitizer ]]; then
      for name in memcheck memcheck-conv-softmax memcheck-conv-new memcheck-rows racecheck-new \
        racecheck-new-second memcheck-cluster racecheck-cluster; do
        bg_finish "$name"
      done
    fi
    export HALFLING_DATA=${HALFLING_DATA:-$root/data}
    step conv-bench timeout 100 "$build/bench/conv_bench" --batch 128
    # Rungs 4 and 4b with the tiled layout change (opt-in since 2026-11-28, implicit_gemm_nhwc.h), next to
    # the conv-bench step's rows for the same rungs with the per-element copy.
    step conv-bench-tiled-layout timeout 40 "$build/bench/conv_bench" --batch 128 --no-cudnn --tiled-layout \
      --variants implicit_gemm_nhwc,implicit_gemm_nhwc_wgrad
    # Every tile but the cluster tiles, then each cluster tile in a program of its own, next to the
    # rung's own tile (gpu_common.sh, cluster_tiles, says why). ncu_new_kernels below profiles only
    # those whose step passed.
    step gemm-bench timeout 110 "$build/bench/gemm_bench" --runs 10 --sweep --sweep-tiles unclustered
    bench_cluster_tiles 10
    if [[ -d $HALFLING_DATA/mnist ]]; then
      step seeds-mlp512-cosine timeout 100 env SCHEDULE=cosine \
        OUT="$results/seeds_mlp512_cosine_cuda_${slug}_${day}.txt" "$root/bench/seeds.sh" cuda mlp512 5 5
      step tutorial-05 timeout 60 "$build/tutorials/05_mixed_precision" --device cuda --epochs 5 \
        --data "$HALFLING_DATA/mnist"
    else
      record mnist FAILED "no $HALFLING_DATA/mnist: carry it (scripts/gpu_pack.sh packs it)"
    fi
    step softmax-bench timeout 80 "$build/bench/softmax_bench" --sweep
    step pytorch-softmax timeout 45 python3 "$root/bench/pytorch/softmax.py"
    step bn-bench timeout 60 "$build/bench/bn_bench"
    step reduce-bench timeout 30 "$build/bench/reduce_bench"
    # Issue #7's accuracy targets on the defaults of the day (docs/gpu_status.md, the next session's item
    # 2): LeNet >= 99.0% in 5 epochs, VGG-small >= 85% in 30 (about 40 s on an H200 on 2026-11-26).
    if [[ -d $HALFLING_DATA/mnist ]]; then
      step tutorial-07 timeout 60 "$build/tutorials/07_conv_lenet" --device cuda --precision mixed --epochs 5 \
        --data "$HALFLING_DATA/mnist"
      # Where LeNet's mixed step goes now that bias gradients take reduce_sum's channel path
      # (docs/gpu_status.md, the next session's item 4; the ablate stage's lenet-profile, about 1 s).
      step lenet-profile timeout 30 "$build/bench/train" --model lenet --precision mixed --device cuda --epochs 2 \
        --max-steps 100 --profile
    fi
    if [[ -d $HALFLING_DATA/cifar10 ]]; then
      step tutorial-09 timeout 150 "$build/tutorials/09_cifar10_vgg" --device cuda --data "$HALFLING_DATA/cifar10" \
        --csv "$(unused_name "$results/tutorial09_cuda_${slug}_${day}.csv")"
    else
      record cifar10 FAILED "no $HALFLING_DATA/cifar10: carry it (scripts/gpu_pack.sh packs the JPEG archive)"
    fi
    # Issue #7: the weight gradients' split-K counts, every one timed (rungs 3 and 4b both count whole
    # waves since 2026-11-27, kernels/wave_split.h, a model): the data to keep or change the rule. After
    # the accuracy runs, so that it takes only what they leave of the budget (and Nsight Compute below
    # only what this leaves).
    step conv-splits timeout 60 "$build/bench/conv_bench" --batch 128 --runs 5 --no-cudnn --passes backward_weight \
      --variants implicit_gemm_wmma,implicit_gemm_nhwc_wgrad --sweep-splits
    # The counters of the kernels this run decides on (ncu_new_kernels), with what the budget has left:
    # none of them is needed to pass, so too little time left, or no ncu, skips them (the ncu stage fails
    # instead). 60 s: the first launches, about 6 s each under ncu, and the programs' start; a launch the
    # rest of the budget does not cover is recorded as not run (ncu_new_kernels puts them in order of need).
    if (($(step_seconds) < 60)); then
      record ncu-new skipped "less than 60 s of the budget left"
    elif ! ncu_setup; then
      record ncu-new skipped "$ncu_missing"
    else
      ncu_new_kernels "${ran_cluster_tiles[@]}"
    fi
    ;;
  ablate)
    # Issue #10's "explain each with its measured effect" (docs/performance.md): each technique switched
    # off on its own, end to end, next to the defaults, and the step replayed as a CUDA graph
    # (--cuda-graph, opt-in: docs/performance.md says why; first timed here on an H100, 2026-11-27),
    # interleaved in two rounds so that drift hits all alike. MLP-512 and LeNet run from the
    # device-resident MNIST, VGG-small (when CIFAR-10 is here) 100 steps per epoch; each s/epoch is the
    # median of epochs 2-3. Then one profile of each default step (bench/train --profile: its
    # proportions, not its speed; the profile stage adds PyTorch's).
    build_targets train
    check_gpu
    export HALFLING_DATA=${HALFLING_DATA:-$root/data}
    ablate_models=()
    [[ -d $HALFLING_DATA/mnist ]] && ablate_models+=(mlp512 lenet)
    [[ -d $HALFLING_DATA/cifar10 ]] && ablate_models+=(vgg_small)
    ((${#ablate_models[@]} > 0)) || record data FAILED "neither $HALFLING_DATA/mnist nor $HALFLING_DATA/cifar10"
    for round in 1 2; do
      for model in "${ablate_models[@]}"; do
        for variant in defaults no-fuse no-multi-tensor cuda-graph; do
          flags=(--model "$model" --precision mixed --device cuda --epochs 3)
          [[ $model == vgg_small ]] && flags+=(--max-steps 100)
          [[ $variant != defaults ]] && flags+=("--$variant")
          step "$model-$variant-$round" timeout 90 "$build/bench/train" "${flags[@]}"
        done
      done
    done
    for model in "${ablate_models[@]}"; do
      step "$model-profile" timeout 90 "$build/bench/train" --model "$model" --precision mixed --device cuda \
        --epochs 2 --max-steps 100 --profile
    done
    ;;
  ncu)
    # Issues #4, #6 and #7: why the kernels short of their targets are short, as counters rather than
    # guesses (docs/gpu_status.md, "Leads"). One launch of each, picked by its kernel's name, on the shape
    # where it misses: the GEMM rungs at 4096^3 next to cuBLAS's own kernel, the softmax rungs the
    # chooser took on the long rows next to register_warp where the target is met (and packed_row and
    # packed_online, the long rows' rungs since, packed_online the chooser's first: it is
    # ncu_new_kernels' last, beside packed_kept), the two weight-gradient kernels on VGG-small's
    # 256->256 layer, and the kernels of 2026-11-28 (ncu_new_kernels, above).
    build_targets gemm_bench softmax_bench conv_bench
    check_gpu
    if ncu_setup; then
      step ncu-version timeout 30 "$ncu_bin" --version
      gemm=("$build/bench/gemm_bench" --sizes 4096 --no-models --warmup 0 --runs 1)
      # cuBLAS runs first in every gemm_bench and is the program's first kernel launch (the inputs are
      # filled on the host): whatever its kernel is called, '.' takes it.
      ncu_kernel gemm-4096-cublas '.' 1 "${gemm[@]}" --variants cublas
      # wmma_pipelined's own tile (#12 since the H100 run of 2026-11-27) is ncu_new_kernels' step
      # gemm-4096-wmma_pipelined-own, below, next to the cluster tiles and #13.
      ncu_kernel gemm-4096-mma_sync 'gemm_mma_sync_kernel' 1 "${gemm[@]}" --variants mma_sync
      ncu_kernel gemm-4096-wmma_smem 'gemm_wmma_smem_kernel' 1 "${gemm[@]}" --variants wmma_smem
      ncu_kernel gemm-4096-wgmma 'gemm_wgmma_kernel' 1 "${gemm[@]}" --variants wgmma
      ncu_kernel gemm-4096-wgmma_tma 'gemm_wgmma_tma_kernel' 1 "${gemm[@]}" --variants wgmma_tma
      softmax=("$build/bench/softmax_bench" --samples 3)
      ncu_kernel softmax-4096x1024-register_warp 'register_warp_forward_kernel' 1 "${softmax[@]}" \
        --shapes 4096x1024 --variants register_warp
      ncu_kernel softmax-4096x4096-register_row 'register_row_forward_kernel' 1 "${softmax[@]}" \
        --shapes 4096x4096 --variants register_row
      ncu_kernel softmax-4096x4096-packed_warp 'packed_warp_forward_kernel' 1 "${softmax[@]}" \
        --shapes 4096x4096 --variants packed_warp
      ncu_kernel softmax-1024x32768-register_row 'register_row_forward_kernel' 1 "${softmax[@]}" \
        --shapes 1024x32768 --variants register_row
      ncu_kernel softmax-128x65536-block_row 'block_row_forward_kernel' 1 "${softmax[@]}" \
        --shapes 128x65536 --variants block_row
      ncu_kernel softmax-1024x32768-packed_row 'packed_row_forward_kernel' 1 "${softmax[@]}" \
        --shapes 1024x32768 --variants packed_row
      ncu_kernel softmax-128x65536-packed_row 'packed_row_forward_kernel' 1 "${softmax[@]}" \
        --shapes 128x65536 --variants packed_row
      conv=("$build/bench/conv_bench" --batch 128 --runs 1 --layers vgg --only '256->256' --passes backward_weight
        --no-cudnn)
      ncu_kernel conv-256-wgrad-rung3 'conv_implicit_gemm_wgrad_kernel|conv_wgrad_reduce_kernel' 2 "${conv[@]}" \
        --variants implicit_gemm_wmma
      ncu_kernel conv-256-wgrad-rung4b 'nchw_to_nhwc_kernel|conv_nhwc_wgrad_kernel|conv_nhwc_wgrad_reduce_kernel' 4 \
        "${conv[@]}" --variants implicit_gemm_nhwc_wgrad
      ncu_new_kernels "${cluster_tiles[@]}"
    else
      record ncu FAILED "$ncu_missing"
    fi
    ;;
  profile)
    build_targets train
    check_gpu
    export HALFLING_DATA=${HALFLING_DATA:-$root/data}
    models=lenet
    [[ -d $HALFLING_DATA/cifar10 ]] && models+=,vgg_small
    step profile timeout 300 env PROFILE=1 PRECISIONS=mixed MAX_STEPS=100 \
      OUT="$results/profile_cuda_${slug}_${day}.txt" "$root/bench/compare_train.sh" cuda "$models" 2
    # What the defaults of 2026-11-26 bought end to end: rung 3 (implicit_gemm_wmma, the default
    # convolution before rung 4) and the per_channel batch norm (before split), each pinned, next to
    # the defaults' epochs (LeNet: the train stage's compare-train; VGG-small: below), and the batch
    # norms' profiles.
    step lenet-epochs-conv-rung3 timeout 120 env HALFLING_CONV=implicit_gemm_wmma "$build/bench/train" \
      --model lenet --precision mixed --device cuda --epochs 3
    if [[ $models == *vgg_small* ]]; then
      step vgg-epochs-conv-rung3 timeout 120 env HALFLING_CONV=implicit_gemm_wmma "$build/bench/train" \
        --model vgg_small --precision mixed --device cuda --epochs 3
      for bn in split per_channel; do
        step "vgg-profile-bn-$bn" timeout 120 env HALFLING_BN=$bn "$build/bench/train" --model vgg_small \
          --precision mixed --device cuda --epochs 2 --max-steps 100 --profile
        step "vgg-epochs-bn-$bn" timeout 120 env HALFLING_BN=$bn "$build/bench/train" --model vgg_small \
          --precision mixed --device cuda --epochs 3
      done
    fi
    ;;
esac
finish
exit
