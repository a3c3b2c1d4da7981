// wmma_pipelined's cluster tiles (wmma_pipelined.cu, sm_90): the blocks of a thread-block cluster that
// need the same operand tile copy it once between them, each a part from global memory (through L2),
// and hand their parts to each other through distributed shared memory. Plain C++ with host/device
// functions, so that the kernel calls exactly this code and a CPU test (tests/kernels/
// test_cluster_share.cpp) plays the schedule through a model of the mbarriers under every order a
// seeded scheduler picks.
//
// Why (issue #4): Nsight Compute found wmma_pipelined's tile #12 bound by L2 at 4096^3 on an H100 (L2
// at 80% of its peak, the Tensor pipe at 43%; kernels/cuda/gemm/README.md). A 128 x 128 block reads
// 16 KiB of A and B per 32-deep K step from L2 for 1 MFLOP, and the blocks of one tile row of C all
// read the same A, those of one tile column the same B. Bigger blocks (tiles #14-#18) read less per
// multiply-add but ran slower: fewer warps per SM, more registers. A cluster keeps #12's block and
// shares what its blocks have in common instead. Blocks (x, y) of a cn x cm cluster (x along N, y
// along M) sit on tiles of C side by side: the blocks of one cluster row (same y) need the same A, of
// one cluster column (same x) the same B. With cm = 2 each block copies half of its B tile (the half
// numbered y) and receives the other half from its peer in the column; with cn = 2 the same for A. A
// 2 x 1 cluster cuts each block's L2 reads per K step from 16 KiB to 12, a 2 x 2 one to 8.
//
// The hand-off. A block's part of K tile kt lands in its own stage kt % S by cp.async, as in every
// tile; each thread then reads back the 16-byte vectors it copied itself and sends them with st.async
// to the same place in the peer's stage, where they count on the peer's mbarrier full[s] as bytes of
// transactions. So each stage has, in each block:
//   full[s]   one arrival (thread 0 of this block, announcing the bytes its peers will send for the
//             round) and those bytes: the peers' parts of the round have landed here.
//   empty[s]  one arrival per peer (its thread 0, remotely, after the __syncthreads that ends the
//             block's use of the stage): the peers no longer read the stage, so this block may send
//             them the next round for it.
// Per K-loop iteration kt of a block, in this order:
//   1. wait for its own cp.async of round kt + 1 (cp.async.wait_group S - 3), then send its part of
//      round kt + 1 (pushed_at), after waiting on empty for the peers' use of that stage S rounds
//      earlier (ring::producer_waits / empty_parity); the prologue sends round 0;
//   2. wait on full[kt % S] for the peers' parts of round kt (ring::full_parity), and thread 0
//      announces the bytes of round kt + S on it (expected_at), now that round kt's phase is over;
//   3. __syncthreads: its own parts of round kt visible to every warp, and every warp done with round
//      kt - 1; thread 0 tells the peers that stage (kt - 1) % S is free (released_at);
//   4. cp.async of its part of round kt + S - 1 into that stage, and the multiply-adds of round kt.
// Sending round kt + 1 one iteration ahead leaves the peers a whole K step to receive it before they
// need it; the cost is one stage of the ring (the rung's 4-stage depth needs 5 stages here). Announcing
// round kt + S's bytes in step 2, before step 3's release lets any peer send them, keeps a barrier's
// transaction count from ever going below zero. At the end every block waits at a cluster barrier
// before it exits: a peer may still arrive on its barriers until then.
#pragma once

#include <cstdint>

#include "kernels/cuda/gemm/ring_phases.h"
#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels::cuda::cluster_share {

// The rank of block (x, y) in a cluster cn blocks wide: x varies fastest (%cluster_ctarank).
HL_HOST_DEVICE constexpr int rank_of(int x, int y, int cn) { return x + y * cn; }
// The block that needs the same A tile (same rows of C, the other tile column of the cluster), and the
// one that needs the same B tile (same columns, the other tile row).
HL_HOST_DEVICE constexpr int a_peer(int x, int y, int cn) { return rank_of(x ^ 1, y, cn); }
HL_HOST_DEVICE constexpr int b_peer(int x, int y, int cn) { return rank_of(x, y ^ 1, cn); }
// How many blocks a block sends to and hears from: one per shared operand.
HL_HOST_DEVICE constexpr int peers(int cm, int cn) { return (cm == 2 ? 1 : 0) + (cn == 2 ? 1 : 0); }
// What the peers send into one stage of a block per round, which its full barrier waits for: the part of
// the A tile it does not copy (from its A peer, when cn = 2) and of the B tile (from its B peer, cm = 2).
// a_part_bytes, b_part_bytes: one part of each (the parts of a tile are the same size).
HL_HOST_DEVICE constexpr uint32_t received_bytes(int cm, int cn, uint32_t a_part_bytes, uint32_t b_part_bytes) {
  return (cn == 2 ? a_part_bytes : 0) + (cm == 2 ? b_part_bytes : 0);
}

// The part of an operand tile that a block copies itself. The tile (wmma_tile.cuh's SmemOperand) is
// kRows x kCols halves with rows kLd apart, K along the rows when kKContiguous (A with op N, B with op T),
// else down the columns; a cluster that shares it splits it into `parts` equal slices along M (A) or N
// (B): slices of rows when kKContiguous, of columns otherwise. Part p starts offset(p) halves into the
// tile and is itself a tile of kRows x kCols halves with the same kLd, which is what the copies take.
template <class Full, int parts>
struct Part {
  static_assert(parts == 1 || parts == 2, "a cluster shares an operand between 1 or 2 blocks");
  static constexpr bool kSplitRows = Full::kKContiguous;
  static constexpr int kRows = kSplitRows ? Full::kRows / parts : Full::kRows;
  static constexpr int kCols = kSplitRows ? Full::kCols : Full::kCols / parts;
  static constexpr int kLd = Full::kLd;
  static_assert(kRows * parts == Full::kRows || !kSplitRows, "the rows split evenly");
  static_assert(kCols % 8 == 0, "a part's rows are whole 16-byte vectors");
  static constexpr int kVectors = kRows * kCols / 8;
  HL_HOST_DEVICE static constexpr int offset(int p) { return kSplitRows ? p * kRows * kLd : p * kCols; }
  // Where vector v of the part lies in it (halves): numbered row by row, as the copies number them
  // (wmma_tile.cuh's load_tile, copy_plan.h), so vector v is copied, and then sent, by thread v % threads.
  HL_HOST_DEVICE static constexpr int vector_at(int v) { return (v / (kCols / 8)) * kLd + (v % (kCols / 8)) * 8; }
  static constexpr int kBytes = kRows * kCols * 2;  // what a peer receives of it, per K tile
};

// ---- the schedule of K-loop iteration kt (the header's steps 1-4) ----------------------------------------

// The round whose part this block sends in step 1 (the prologue sends round 0).
HL_HOST_DEVICE constexpr int64_t pushed_at(int64_t kt) { return kt + 1; }
// The cp.async groups that may still be in flight at step 1: with the prologue's S - 1 groups and one
// per iteration, rounds 0 .. kt + S - 2 have been issued, and round kt + 1 must have landed.
HL_HOST_DEVICE constexpr int groups_in_flight_at_push(int stages) { return stages - 3; }
// The round whose bytes thread 0 announces on full[kt % S] in step 2 (if there is such a K tile).
HL_HOST_DEVICE constexpr int64_t expected_at(int64_t kt, int stages) { return kt + stages; }
// The round whose stage this block hands back to its peers in step 3, or -1 for none: the previous
// one, which every warp has finished by that barrier. Only a stage that a peer will refill is handed
// back (released round + S < k_tiles), so that no arrival is left for a barrier nobody waits on.
HL_HOST_DEVICE constexpr int64_t released_at(int64_t kt, int64_t k_tiles, int stages) {
  return kt >= 1 && kt - 1 + stages < k_tiles ? kt - 1 : -1;
}

}  // namespace hl::kernels::cuda::cluster_share
