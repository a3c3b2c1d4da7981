// The phases of a ring of shared-memory stages handed back and forth through two mbarriers per stage,
// `full` (the stage holds its K tile) and `empty` (nobody reads the stage any more): which stage K tile
// kt uses and which phase of each barrier a waiter names. Shared by rung 8 (wgmma_tma.cu, through
// wgmma_tma_plan.h: a producer warpgroup and two consumer warpgroups in one block) and by
// wmma_pipelined's cluster tiles (cluster_share.h: the blocks of a cluster filling each other's
// stages). Plain C++ with host/device functions, so that the CPU tests play the same arithmetic.
//
// K tile kt is the use u = kt / S of stage kt % S, and each use completes one phase of each barrier.
// mbarrier.try_wait.parity(p) succeeds once the phase of parity p has completed, so a waiter names
// the parity of the phase it waits for: the reader that of use u of full[s]; the writer, before use
// u >= 1, that of use u - 1 of empty[s] (the first S uses need no wait: the ring starts empty). A
// parity names a phase without ambiguity only while the barrier is never more than one phase ahead of
// its waiter, which the hand-off guarantees: a stage is not refilled before it is emptied.
#pragma once

#include <cstdint>

#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels::cuda::ring {

HL_HOST_DEVICE constexpr int stage_of(int64_t kt, int stages) { return static_cast<int>(kt % stages); }
HL_HOST_DEVICE constexpr uint32_t full_parity(int64_t kt, int stages) {
  return static_cast<uint32_t>((kt / stages) & 1);
}
HL_HOST_DEVICE constexpr bool producer_waits(int64_t kt, int stages) { return kt >= stages; }
HL_HOST_DEVICE constexpr uint32_t empty_parity(int64_t kt, int stages) {
  return static_cast<uint32_t>((kt / stages - 1) & 1);
}

}  // namespace hl::kernels::cuda::ring
