// The arithmetic of the `wgmma_tma` GEMM rung (kernels/cuda/gemm/wgmma_tma_plan.h), checked on the CPU,
// on every build, with or without a GPU.
//
// 1. The boxes. The TMA unit writes box row r at r x 128 bytes from the box's destination, and with
//    the 128-byte swizzle XORs the 16-byte chunk index (address bits 4-6) with address bits 7-9 (CUDA
//    driver API, cuTensorMapEncodeTiled: "Swizzle 16B chunks within 128B span"; the same pattern
//    wgmma's descriptors name, tests/kernels/test_wgmma_layout.cpp). A model of that, fed the boxes
//    the kernel asks for, must put every element of the operand tile exactly where rung 7's copies put
//    it (wgmma_layout.h's k_major_offset, mn_major_offset), which the instruction model of
//    test_wgmma_layout.cpp already reads back correctly, and fill the stage's bytes exactly (the
//    count the full barrier expects).
// 2. The barriers. A model of mbarrier (arrival count, transaction bytes, phase) and of the three
//    roles (the producer thread, two consumer warpgroups, the TMA unit delivering boxes in any order
//    and at any time) plays the K loop through the header's schedule under a seeded random
//    scheduler: no role may wait forever, a consumer must find its whole tile in its stage, and no box
//    may land in a stage that a wgmma group still reads. The same model must catch a schedule with a
//    wait left out.
// What this cannot check: the hardware's reading of the tensor map and of the PTX (tests on a GPU:
// tests/kernels/test_gemm_cuda.cpp, CudaGemm.WgmmaTma*).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/gemm/wgmma_layout.h"
#include "kernels/cuda/gemm/wgmma_tma_plan.h"
#include "tests/kernels/mbarrier_model.h"

namespace hl {
namespace {

namespace wl = kernels::cuda::wgmma_layout;
namespace tp = kernels::cuda::wgmma_tma_plan;

// ---- 1. the boxes ----------------------------------------------------------------------------------------

// The address-based 128-byte swizzle: the 16-byte chunk within a 128-byte row XORed with the row's
// position in its 1024-byte pattern.
uint32_t swizzle128(uint32_t address) { return address ^ (((address >> 7) & 7) << 4); }

// Plays one operand tile's boxes through the model: each element (x along M or N, k along K) of the
// X x 64 tile whose first element is (x0, k0) must be written once, at the layout's offset.
template <bool kKMajor, int X>
void check_boxes(uint32_t tile) {
  SCOPED_TRACE(std::string(kKMajor ? "K-major" : "MN-major") + ", " + std::to_string(X) + " x 64");
  using B = tp::Boxes<kKMajor, X>;
  EXPECT_EQ(B::kCount * B::kBytes, static_cast<uint32_t>(X * wl::kBK * 2)) << "the boxes fill the tile exactly";
  EXPECT_LE(B::kRows, 256) << "a box has at most 256 rows";
  const int64_t x0 = 384, k0 = 192;  // a tile inside the matrix: the coordinates carry an offset
  std::map<uint32_t, std::pair<int, int>> written;  // byte offset in the tile -> (x, k)
  int wrong = 0;
  for (int j = 0; j < B::kCount; ++j) {
    const tp::Box b = tp::box<kKMajor, X>(j, x0, k0);
    EXPECT_EQ((tile + b.bytes) % wl::kAtomBytes, 0u) << "box " << j << " starts off a 1024-byte boundary";
    for (int r = 0; r < B::kRows; ++r) {
      for (int i = 0; i < tp::kBoxInner; ++i) {
        // The element at dimension-0 coordinate b.c0 + i, dimension-1 coordinate b.c1 + r of the stored matrix.
        const int64_t d0 = b.c0 + i, d1 = b.c1 + r;
        const int x = static_cast<int>(kKMajor ? d1 - x0 : d0 - x0), k = static_cast<int>(kKMajor ? d0 - k0 : d1 - k0);
        const uint32_t at = swizzle128(tile + b.bytes + static_cast<uint32_t>(r * wl::kRowBytes + 2 * i)) - tile;
        if (x < 0 || x >= X || k < 0 || k >= wl::kBK) {
          ADD_FAILURE() << "box " << j << " fetches (" << x << ", " << k << "), outside the tile";
          continue;
        }
        const uint32_t want = kKMajor ? wl::k_major_offset(x, k) : wl::mn_major_offset(x, k);
        if (at != want && wrong++ < 5)
          ADD_FAILURE() << "(" << x << ", " << k << ") lands at byte " << at << ", rung 7's layout has it at " << want;
        if (!written.emplace(at, std::make_pair(x, k)).second) ADD_FAILURE() << "two elements land on byte " << at;
      }
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(written.size(), static_cast<size_t>(X * wl::kBK)) << "every element of the tile written once";
}

TEST(WgmmaTmaPlan, BoxesLandRungSevensLayout) {
  // The A tile (128 rows of M) and every B tile (N = 64, 128, 256), both storage orders, in a stage that
  // does not start at 0 (the swizzle is anchored to the address, not to the tile).
  const uint32_t tile = 5 * wl::kAtomBytes;
  check_boxes<true, 128>(tile);
  check_boxes<false, 128>(tile);
  check_boxes<true, 64>(tile);
  check_boxes<false, 64>(tile);
  check_boxes<true, 256>(tile);
  check_boxes<false, 256>(tile);
}

TEST(WgmmaTmaPlan, TheBoxModelNoticesAMisplacedBox) {
  // The model can fail: a destination off the 1024-byte pattern (here 512 bytes in) changes where the
  // chunks land, so the same box no longer matches rung 7's layout.
  int differ = 0;
  for (int r = 0; r < wl::kBK; ++r)
    for (int i = 0; i < tp::kBoxInner; ++i) {
      const uint32_t shifted = swizzle128(512 + static_cast<uint32_t>(r * wl::kRowBytes + 2 * i)) - 512;
      differ += shifted != wl::mn_major_offset(i, r);
    }
  EXPECT_GT(differ, 0);
  // And the second MN-major box of a 128-wide tile goes one whole 64 x 64 box further on (8192 bytes),
  // where mn_major_offset puts x = 64.
  EXPECT_EQ((tp::box<false, 128>(1, 0, 0).bytes), wl::mn_major_offset(64, 0));
}

// The tile hooks of `gemm_bench --sweep`, rung 7's (wgmma_layout.h) and rung 8's: off (-1, the rung's
// own tile) unless a scope forces a tile, and off again after it. Every tile gives the same product, so
// a hook left forcing #0 would pass the GPU tests while the rungs lost their choice of tile per shape.
TEST(WgmmaTmaPlan, TheTileHooksAreOffUnlessAScopeForcesATile) {
  EXPECT_EQ(kernels::wgmma::tile_for_tuning().load(), -1);
  EXPECT_EQ(kernels::wgmma_tma::tile_for_tuning().load(), -1);
  {
    const kernels::wgmma::ScopedTile rung7(wl::kNarrowTile);
    const kernels::wgmma_tma::ScopedTile rung8(tp::kWideTile);
    EXPECT_EQ(kernels::wgmma::tile_for_tuning().load(), wl::kNarrowTile);
    EXPECT_EQ(kernels::wgmma_tma::tile_for_tuning().load(), tp::kWideTile);
  }
  EXPECT_EQ(kernels::wgmma::tile_for_tuning().load(), -1);
  EXPECT_EQ(kernels::wgmma_tma::tile_for_tuning().load(), -1);
}

TEST(WgmmaTmaPlan, TilesFitOneBlockPerSm) {
  ASSERT_EQ(tp::kTileCount, 4);  // wgmma_tma.cu's run() dispatches on these four
  const int want[4][3] = {{128, 4, 1}, {256, 4, 1}, {128, 4, 0}, {64, 6, 1}};
  for (int i = 0; i < tp::kTileCount; ++i) {
    EXPECT_EQ(tp::kTiles[i].bn, want[i][0]) << "tile #" << i;
    EXPECT_EQ(tp::kTiles[i].stages, want[i][1]) << "tile #" << i;
    EXPECT_EQ(tp::kTiles[i].in_flight, want[i][2]) << "tile #" << i;
  }
  // The shared memory an H100 or H200 allows a block (227 KiB), with the staging tile of the epilogue
  // inside the ring (wgmma_layout.h's Tile checks that when it is instantiated).
  EXPECT_LE((wl::Tile<128, 4>::kSmemBytes), 227 * 1024);
  EXPECT_LE((wl::Tile<256, 4>::kSmemBytes), 227 * 1024);
  EXPECT_LE((wl::Tile<64, 6>::kSmemBytes), 227 * 1024);
  EXPECT_EQ(tp::kThreads, 384);
  // The rung's own tile (the H100 sweep's winners, wgmma_tma_plan.h), on a 132-SM H100.
  EXPECT_EQ(tp::own_tile(100352, 64, 132), tp::kNarrowTile);  // 64 or fewer columns, however many rows
  EXPECT_EQ(tp::own_tile(128, 10, 132), tp::kNarrowTile);
  EXPECT_EQ(tp::own_tile(2048, 2048, 132), tp::kWideTile);  // 128 wide tiles >= 3/4 of 132
  EXPECT_EQ(tp::own_tile(8192, 8192, 132), tp::kWideTile);
  EXPECT_EQ(tp::own_tile(25088, 800, 132), tp::kWideTile);  // LeNet conv2's data gradient
  EXPECT_EQ(tp::own_tile(1024, 1024, 132), tp::kNarrowTile);  // #0: 64 tiles, fewer than 66
  EXPECT_EQ(tp::own_tile(128, 512, 132), tp::kNarrowTile);    // MLP-512's layers at batch 128
  EXPECT_EQ(tp::own_tile(1536, 1536, 132), 0);  // #1: 72 tiles (< 99); #0: 144 (>= 66)
  EXPECT_EQ(tp::own_tile(1536, 1536, 96), tp::kWideTile);  // the same shape on a GPU of fewer SMs
  EXPECT_EQ(tp::own_tile(1024, 1024, 128), 0);             // and 64 tiles are half of 128 SMs
  // Which tiles those are: the wide one 256 columns wide (#1), the narrow one 64 (#3).
  EXPECT_EQ(tp::kTiles[tp::kWideTile].bn, 256);
  EXPECT_EQ(tp::kTiles[tp::kNarrowTile].bn, 64);
  // The tile counts round up, at a whole number of tiles and one column past it (33 block rows, 132
  // SMs: #1 needs 99 tiles, #0 is left for 66 or more). 512 columns: 2 x 33 = 66 wide tiles, too few,
  // and 4 x 33 = 132 of #0; 513: 3 x 33 = 99 wide tiles. 129 columns: 2 x 33 = 66 of #0, not fewer
  // than half the SMs, where 128 would leave 33.
  EXPECT_EQ(tp::own_tile(33 * 128, 512, 132), 0);
  EXPECT_EQ(tp::own_tile(33 * 128, 513, 132), tp::kWideTile);
  EXPECT_EQ(tp::own_tile(33 * 128, 768, 132), tp::kWideTile);
  EXPECT_EQ(tp::own_tile(33 * 128, 129, 132), 0);
  EXPECT_EQ(tp::own_tile(33 * 128, 128, 132), tp::kNarrowTile);
  // setmaxnreg's operands: multiples of 8 in [24, 256], and the register file of one SM not exceeded.
  for (int r : {tp::kProducerRegisters, tp::kConsumerRegisters}) {
    EXPECT_EQ(r % 8, 0);
    EXPECT_GE(r, 24);
    EXPECT_LE(r, 256);
  }
  // A consumer holds BN / 2 accumulators; the widest tile's 128 leave 104 registers for the rest.
  EXPECT_GE(tp::kConsumerRegisters - 256 / 2, 64);
}

// ---- 2. the barriers ----------------------------------------------------------------------------------------

using test::MBarrier;  // mbarrier_model.h

// The schedule under test: the header's, or a deliberately broken one.
struct ScheduleFns {
  std::function<bool(int64_t, int)> producer_waits = tp::producer_waits;
  std::function<uint32_t(int64_t, int)> empty_parity = tp::empty_parity;
  std::function<uint32_t(int64_t, int)> full_parity = tp::full_parity;
  std::function<int64_t(int64_t, int)> released_at = tp::released_at;
};

// Plays the K loop of one block: returns what went wrong (empty when nothing did).
std::vector<std::string> play_block(const tp::TileConfig& cfg, int64_t k_tiles, uint64_t seed,
                                    const ScheduleFns& fn = {}) {
  std::vector<std::string> problems;
  const auto fail = [&](const std::string& s) {
    if (problems.size() < 10) problems.push_back(s);
  };
  const int S = cfg.stages, F = cfg.in_flight;
  const int boxes = 3;  // e.g. two MN-major boxes of A and one K-major box of B: they land separately
  const int64_t box_bytes = 1000;
  std::vector<MBarrier> full(static_cast<size_t>(S)), empty(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    full[static_cast<size_t>(s)].init(tp::kFullArrivals);
    empty[static_cast<size_t>(s)].init(tp::kEmptyArrivals);
  }
  // What each stage's boxes hold (the K tile, -1 for nothing yet).
  std::vector<std::vector<int64_t>> holds(static_cast<size_t>(S), std::vector<int64_t>(boxes, -1));
  struct Copy {
    int stage, box;
    int64_t tile;
  };
  std::vector<Copy> in_flight_copies;  // issued, not yet landed

  int64_t producer_kt = 0;
  struct Consumer {
    int64_t kt = 0;
    std::vector<int64_t> reading;  // tiles whose wgmma group may still read its stage
  };
  Consumer consumers[tp::kConsumers];

  std::mt19937_64 rng(seed);
  for (int64_t moves = 0; moves < 100000; ++moves) {
    // Who can move: 0 the producer, 1..2 the consumers, 3 the TMA unit.
    std::vector<int> ready;
    if (producer_kt < k_tiles) {
      const int s = tp::stage_of(producer_kt, S);
      if (!fn.producer_waits(producer_kt, S) ||
          empty[static_cast<size_t>(s)].try_wait_parity(fn.empty_parity(producer_kt, S)))
        ready.push_back(0);
    }
    for (int c = 0; c < tp::kConsumers; ++c) {
      const Consumer& w = consumers[c];
      if (w.kt < k_tiles &&
          full[static_cast<size_t>(tp::stage_of(w.kt, S))].try_wait_parity(fn.full_parity(w.kt, S)))
        ready.push_back(1 + c);
    }
    if (!in_flight_copies.empty()) ready.push_back(3);
    if (ready.empty()) break;
    const int who = ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng)];

    if (who == 0) {  // the producer: announce the stage's bytes, issue its boxes
      const int s = tp::stage_of(producer_kt, S);
      if (fn.producer_waits(producer_kt, S) && empty[static_cast<size_t>(s)].completed != producer_kt / S)
        fail("the producer refilled stage " + std::to_string(s) + " for tile " + std::to_string(producer_kt) +
             " on the wrong phase of its empty barrier");
      full[static_cast<size_t>(s)].expect_tx(boxes * box_bytes);
      full[static_cast<size_t>(s)].arrive();
      for (int b = 0; b < boxes; ++b) in_flight_copies.push_back({s, b, producer_kt});
      ++producer_kt;
    } else if (who == 3) {  // the TMA unit: one box lands (any of those in flight)
      const size_t i = std::uniform_int_distribution<size_t>(0, in_flight_copies.size() - 1)(rng);
      const Copy c = in_flight_copies[i];
      in_flight_copies.erase(in_flight_copies.begin() + static_cast<std::ptrdiff_t>(i));
      for (const Consumer& w : consumers)
        for (int64_t t : w.reading)
          if (tp::stage_of(t, S) == c.stage)
            fail("tile " + std::to_string(c.tile) + " lands in stage " + std::to_string(c.stage) +
                 " while a wgmma reads tile " + std::to_string(t) + " there");
      holds[static_cast<size_t>(c.stage)][static_cast<size_t>(c.box)] = c.tile;
      full[static_cast<size_t>(c.stage)].complete_tx(box_bytes);
    } else {  // a consumer warpgroup: one K step
      Consumer& w = consumers[who - 1];
      const int s = tp::stage_of(w.kt, S);
      for (int b = 0; b < boxes; ++b)
        if (holds[static_cast<size_t>(s)][static_cast<size_t>(b)] != w.kt)
          fail("consumer " + std::to_string(who - 1) + " reads tile " + std::to_string(w.kt) + " from stage " +
               std::to_string(s) + ", whose box " + std::to_string(b) + " holds tile " +
               std::to_string(holds[static_cast<size_t>(s)][static_cast<size_t>(b)]));
      w.reading.push_back(w.kt);                                        // wgmma issued and committed
      while (static_cast<int>(w.reading.size()) > F) w.reading.erase(w.reading.begin());  // wgmma.wait_group F
      const int64_t done = fn.released_at(w.kt, F);
      if (done >= 0) {
        for (int64_t t : w.reading)
          if (t == done) fail("consumer releases tile " + std::to_string(done) + " while its wgmma may still read it");
        empty[static_cast<size_t>(tp::stage_of(done, S))].arrive(128);  // every thread of the warpgroup
      }
      ++w.kt;
    }
  }
  if (producer_kt < k_tiles) fail("the producer stopped at tile " + std::to_string(producer_kt) + ": a wait that never ends");
  for (int c = 0; c < tp::kConsumers; ++c)
    if (consumers[c].kt < k_tiles)
      fail("consumer " + std::to_string(c) + " stopped at tile " + std::to_string(consumers[c].kt) +
           ": a wait that never ends");
  if (!in_flight_copies.empty()) fail("copies never landed");
  return problems;
}

TEST(WgmmaTmaPlan, TheBarriersNeverHangNorRace) {
  // Every tile of the table, K from one step to several trips around the ring, 20 schedules each.
  for (const tp::TileConfig& cfg : tp::kTiles) {
    for (int64_t k_tiles = 1; k_tiles <= 4 * cfg.stages + 1; ++k_tiles) {
      for (uint64_t seed = 0; seed < 20; ++seed) {
        for (const std::string& p : play_block(cfg, k_tiles, seed))
          ADD_FAILURE() << "tile 128x" << cfg.bn << ", " << cfg.stages << " stages, " << cfg.in_flight << " in flight, "
                        << k_tiles << " K steps, schedule " << seed << ": " << p;
      }
    }
  }
}

TEST(WgmmaTmaPlan, TheBarrierModelNoticesABrokenSchedule) {
  // The model is worth something only if it can fail. Three ways to get it wrong, each caught on some
  // schedule: the producer not waiting for the empty barrier (it overwrites a stage still being read);
  // waiting on the wrong parity (it overwrites too, or hangs); a consumer releasing the stage it has
  // just issued a wgmma on while leaving that group running.
  const tp::TileConfig cfg = tp::kTiles[0];
  const auto caught = [&](const ScheduleFns& fn) {
    for (uint64_t seed = 0; seed < 50; ++seed)
      if (!play_block(cfg, 3 * cfg.stages, seed, fn).empty()) return true;
    return false;
  };
  ScheduleFns no_wait;
  no_wait.producer_waits = [](int64_t, int) { return false; };
  EXPECT_TRUE(caught(no_wait));
  ScheduleFns wrong_parity;
  wrong_parity.empty_parity = [](int64_t kt, int s) { return tp::empty_parity(kt, s) ^ 1u; };
  EXPECT_TRUE(caught(wrong_parity));
  ScheduleFns wrong_full;
  wrong_full.full_parity = [](int64_t kt, int s) { return tp::full_parity(kt, s) ^ 1u; };
  EXPECT_TRUE(caught(wrong_full));
  ScheduleFns early_release;
  early_release.released_at = [](int64_t kt, int) { return kt; };
  EXPECT_TRUE(caught(early_release));
}

}  // namespace
}  // namespace hl
