// The K loop of wmma_pipelined's fragments-ahead tiles (wmma_pipelined.cu, point 5; tiles #21-#23 of
// wmma_pipelined_tiles.h): what each 16-deep step of a K tile loads, copies and waits for. Plain C++
// with host/device functions, so that the kernel calls exactly this code and a CPU test
// (tests/kernels/test_ahead_schedule.cpp) plays it with several warps in any order a seeded scheduler
// picks, through a model of the ring, the cp.async groups and the barrier.
//
// A block's ring has S stages; K tile kt lives in stage kt % S. Before the loop, tiles 0 .. S - 2 are
// copied (one cp.async group each, possibly empty), the first is waited for and published by a
// barrier, and step 0's fragments of tile 0 are loaded. Then step `step` (of `steps` = BK / 16) of K
// tile kt does, in this order:
//   1. load the fragments of the step after it: loaded_tile / loaded_step (step + 1 of tile kt, or
//      step 0 of tile kt + 1 after the last step; nothing past the last tile);
//   2. the mma_syncs of this step, on the fragments loaded before;
//   3. if copies_at(step): the copies of tile copied_tile(kt) into its stage, and a commit (one group
//      per K tile, empty past the last tile);
//   4. if barrier_after(step): cp.async.wait_group(in_flight_at_barrier), then __syncthreads.
// Why it is safe. Step 4 comes before the last step's loads, which are the first to read tile kt + 1:
// by then this thread's copies of that tile have landed (of the groups committed, S - 1 + kt + 1, only
// the S - 2 newest may be in flight, and tile kt + 1's is older than those), and the barrier makes
// every thread's copies visible to every warp. The copy of tile kt + S - 1 in step 3 goes into the
// stage of tile kt - 1, whose last reads (the loads for tile kt - 1's last step) came before the
// barrier of K tile kt - 1, which every warp has passed by step 3 of K tile kt. With S >= 3 (the
// kernel asserts it) that is not the stage of tile kt + 1, which the last step reads; with S = 2 the
// copy would be of tile kt + 1 itself, waited for at the barrier: still right, but with no copy in
// flight while a K tile is computed.
#pragma once

#include <cstdint>

#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels::cuda::ahead {

// Step 1: the K tile and the 16-deep step whose fragments step `step` of K tile kt loads.
HL_HOST_DEVICE constexpr int64_t loaded_tile(int64_t kt, int step, int steps) { return step + 1 < steps ? kt : kt + 1; }
HL_HOST_DEVICE constexpr int loaded_step(int step, int steps) { return step + 1 < steps ? step + 1 : 0; }
// Step 3: the step that copies, and the K tile it copies.
HL_HOST_DEVICE constexpr bool copies_at(int step) { return step == 0; }
HL_HOST_DEVICE constexpr int64_t copied_tile(int64_t kt, int stages) { return kt + stages - 1; }
// Step 4: the step after which the block waits and meets, and how many cp.async groups may then still
// be in flight.
HL_HOST_DEVICE constexpr bool barrier_after(int step, int steps) { return step + 2 == steps; }
HL_HOST_DEVICE constexpr int in_flight_at_barrier(int stages) { return stages - 2; }

}  // namespace hl::kernels::cuda::ahead
