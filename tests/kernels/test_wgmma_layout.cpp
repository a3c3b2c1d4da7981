// The arithmetic of the `wgmma` GEMM rung (kernels/cuda/gemm/wgmma_layout.h), played through on the
// CPU, so that it is exercised on every build, with or without a GPU.
//
// The kernel copies each operand tile into shared memory chunk by chunk (chunk_of), hands
// wgmma.mma_async one descriptor per operand and 16-deep slice of K (slice_descriptor), and stores
// its accumulators by their thread-to-element map (accumulator_pos). Here a whole block goes through
// those functions for every layout and tile, with the instruction replaced by a model that knows
// nothing of the header: it decodes the descriptors' bit fields and finds each value where the PTX
// ISA's canonical layouts for the 128-byte swizzle put it ("Shared Memory Matrix Layout": K-major
// ((8,m),(T,2k)):((8T,SBO),(1,T)), MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8 halves,
// then the 16-byte chunk index XORed with address bits 7-9). The product must equal the float64 one
// exactly (small integers), every read must land inside its tile on a value the copies wrote, and
// every element of C must be written once. The ring's schedule (which buffer each step refills, how
// many copy groups it leaves pending, how many groups of wgmma run across the barrier) is played step
// by step too. What this cannot check is whether that reading of the ISA is the hardware's, nor the
// fences and the barriers themselves: tests/kernels/test_gemm_cuda.cpp does that on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/gemm/wgmma_layout.h"

namespace hl {
namespace {

namespace wl = kernels::cuda::wgmma_layout;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- the model of wgmma.mma_async's operand reads, from the PTX ISA ---------------------------------

struct Descriptor {
  uint32_t start, lbo, sbo;
  unsigned base_offset, swizzle;
};

Descriptor decode(uint64_t d) {
  return {static_cast<uint32_t>(d & 0x3FFF) << 4, static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4,
          static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4, static_cast<unsigned>((d >> 49) & 7),
          static_cast<unsigned>(d >> 62)};
}

// The 128-byte swizzle acts on the address the layout gives: bits 4-6 (the 16-byte chunk in a
// 128-byte row) XOR bits 7-9 (the row in an 8-row, 1024-byte pattern).
uint32_t swizzle128(uint32_t address) { return address ^ (((address >> 7) & 7) << 4); }

// The shared-memory address of element (x, k) of the operand a descriptor describes, x along M (A) or
// N (B), k in [0, 16); 2-byte elements, so T = 8 of them per 16 bytes.
uint32_t operand_address(const Descriptor& d, bool k_major, int x, int k) {
  uint32_t offset = 0;
  if (k_major) {  // ((8,m),(T,2k)):((8T,SBO),(1,T)) in elements
    offset = (x % 8) * 8 * 8 * 2 + (x / 8) * d.sbo + (k % 8) * 2 + (k / 8) * 8 * 2;
  } else {  // ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))
    offset = (x % 8) * 2 + ((x / 8) % 8) * 8 * 2 + (x / 64) * d.lbo + (k % 8) * 8 * 8 * 2 + (k / 8) * d.sbo;
  }
  return swizzle128(d.start + offset);
}

// Shared memory as 2-byte cells holding doubles (NaN: never written).
struct Smem {
  std::vector<double> cell;
  explicit Smem(size_t bytes) : cell(bytes / 2, kNaN) {}
};

// What the simulation found wrong, as readable lines.
struct Problems {
  std::vector<std::string> lines;
  void add(const std::string& s) {
    if (lines.size() < 20) lines.push_back(s);
  }
};

// One operand of one wgmma: rows x 16 values (rows = 64 for A, N for B) read through the descriptor;
// every read must fall inside [tile, tile + tile_bytes) on a written cell, and no two on one cell.
std::vector<std::vector<double>> read_operand(const Smem& s, uint64_t desc, bool k_major, int rows, uint32_t tile,
                                              uint32_t tile_bytes, const std::string& what, Problems& p) {
  const Descriptor d = decode(desc);
  if (d.swizzle != 1 || d.base_offset != 0) p.add(what + ": the descriptor does not say 128-byte swizzle, base offset 0");
  if (d.start % 16 != 0) p.add(what + ": the start address is not 16-byte aligned");
  std::vector<std::vector<double>> v(static_cast<size_t>(rows), std::vector<double>(16, kNaN));
  std::set<uint32_t> seen;
  for (int x = 0; x < rows; ++x) {
    for (int k = 0; k < 16; ++k) {
      const uint32_t a = operand_address(d, k_major, x, k);
      if (a < tile || a + 2 > tile + tile_bytes) {
        p.add(what + ": element (" + std::to_string(x) + ", " + std::to_string(k) + ") read outside its tile");
        continue;
      }
      if (!seen.insert(a).second) p.add(what + ": two elements read from one address");
      v[static_cast<size_t>(x)][static_cast<size_t>(k)] = s.cell[a / 2];
    }
  }
  return v;
}

// ---- the block, through the header ------------------------------------------------------------------

struct Case {
  bool a_k_major, b_k_major;
  int bn, stages;
};

std::string name_of(const Case& c) {
  return std::string("A ") + (c.a_k_major ? "K-major" : "M-major") + ", B " + (c.b_k_major ? "K-major" : "N-major") +
         ", 128x" + std::to_string(c.bn) + "x64";
}

// Copies op(A) (128 x 64) and op(B) (64 x BN) into stage `stage` of a ring at `ring` the way the
// kernel's copy_tile does, runs the 2 warpgroups x 4 slices of wgmma through the model, and writes the
// accumulators out by accumulator_pos. Returns the 128 x BN result (NaN where nothing was written).
template <bool kAK, bool kBK, int BN, int S>
std::vector<double> run_block(const std::vector<double>& a, const std::vector<double>& b, uint32_t ring, int stage,
                              std::vector<int>& writes, Problems& p) {
  using T = wl::Tile<BN, S>;
  Smem smem(ring + static_cast<size_t>(S) * T::kStageBytes);
  const uint32_t a_tile = ring + static_cast<uint32_t>(stage) * T::kStageBytes, b_tile = a_tile + T::kABytes;
  if (a_tile % wl::kAtomBytes != 0 || b_tile % wl::kAtomBytes != 0) p.add("a tile does not start on a 1024-byte boundary");

  // The copies: chunk v holds 8 consecutive stored values (along K for a K-major operand, along M or N
  // for the other), stored at the chunk's byte offset.
  std::set<uint32_t> a_chunks, b_chunks;
  for (int v = 0; v < wl::kBM * wl::kBK / 8; ++v) {
    const wl::Chunk c = wl::chunk_of<kAK, wl::kBM>(v);
    if (c.bytes % 16 != 0 || c.bytes + 16 > static_cast<uint32_t>(T::kABytes) || !a_chunks.insert(c.bytes).second)
      p.add("A copy " + std::to_string(v) + " lands misaligned, outside the tile or on another copy");
    for (int j = 0; j < 8; ++j) {
      const int m = kAK ? c.row : c.col + j, k = kAK ? c.col + j : c.row;
      smem.cell[(a_tile + c.bytes) / 2 + static_cast<size_t>(j)] = a[static_cast<size_t>(m * wl::kBK + k)];
    }
  }
  for (int v = 0; v < BN * wl::kBK / 8; ++v) {
    const wl::Chunk c = wl::chunk_of<kBK, BN>(v);
    if (c.bytes % 16 != 0 || c.bytes + 16 > static_cast<uint32_t>(T::kBBytes) || !b_chunks.insert(c.bytes).second)
      p.add("B copy " + std::to_string(v) + " lands misaligned, outside the tile or on another copy");
    for (int j = 0; j < 8; ++j) {
      const int n = kBK ? c.row : c.col + j, k = kBK ? c.col + j : c.row;
      smem.cell[(b_tile + c.bytes) / 2 + static_cast<size_t>(j)] = b[static_cast<size_t>(k * BN + n)];
    }
  }

  std::vector<double> c_tile(static_cast<size_t>(wl::kBM * BN), kNaN);
  writes.assign(static_cast<size_t>(wl::kBM * BN), 0);
  for (int wg = 0; wg < wl::kWarpgroups; ++wg) {
    std::vector<double> d(static_cast<size_t>(wl::kWgRows * BN), 0.0);  // the warpgroup's 64 x BN accumulator
    for (int slice = 0; slice < wl::kBK / wl::kInstrK; ++slice) {
      const std::string where = " (warpgroup " + std::to_string(wg) + ", slice " + std::to_string(slice) + ")";
      const auto av = read_operand(smem, wl::slice_descriptor<kAK>(a_tile, wg * wl::kWgRows, slice), kAK, wl::kWgRows,
                                   a_tile, T::kABytes, "A" + where, p);
      const auto bv =
          read_operand(smem, wl::slice_descriptor<kBK>(b_tile, 0, slice), kBK, BN, b_tile, T::kBBytes, "B" + where, p);
      for (int m = 0; m < wl::kWgRows; ++m)
        for (int n = 0; n < BN; ++n)
          for (int k = 0; k < 16; ++k)
            d[static_cast<size_t>(m * BN + n)] += av[static_cast<size_t>(m)][static_cast<size_t>(k)] *
                                                  bv[static_cast<size_t>(n)][static_cast<size_t>(k)];
    }
    // The registers: thread t's accumulator i is D at accumulator_pos(t, i); the epilogue stores each
    // at the same place of the block tile, offset by the warpgroup's 64 rows.
    for (int t = 0; t < 128; ++t) {
      for (int i = 0; i < T::kAccPerThread; ++i) {
        const wl::TilePos pos = wl::accumulator_pos(t, i);
        if (pos.row < 0 || pos.row >= wl::kWgRows || pos.col < 0 || pos.col >= BN) {
          p.add("accumulator " + std::to_string(i) + " of thread " + std::to_string(t) + " lies outside the tile");
          continue;
        }
        const size_t at = static_cast<size_t>((wg * wl::kWgRows + pos.row) * BN + pos.col);
        c_tile[at] = d[static_cast<size_t>(pos.row * BN + pos.col)];
        ++writes[at];
      }
    }
  }
  return c_tile;
}

template <bool kAK, bool kBK, int BN, int S>
void check_block(uint64_t seed) {
  const Case c{kAK, kBK, BN, S};
  SCOPED_TRACE(name_of(c));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-4, 4);  // products and sums of 64 stay exact
  std::vector<double> a(static_cast<size_t>(wl::kBM * wl::kBK)), b(static_cast<size_t>(wl::kBK * BN));
  for (double& x : a) x = small(rng);
  for (double& x : b) x = small(rng);

  Problems p;
  std::vector<int> writes;
  // A ring that starts on a 1024-byte boundary but not at 0, and the last stage of it: the descriptors'
  // start addresses then carry high bits too.
  const std::vector<double> got = run_block<kAK, kBK, BN, S>(a, b, 3 * wl::kAtomBytes, S - 1, writes, p);
  for (const std::string& line : p.lines) ADD_FAILURE() << line;

  int wrong = 0, not_once = 0;
  for (int m = 0; m < wl::kBM; ++m) {
    for (int n = 0; n < BN; ++n) {
      double want = 0.0;
      for (int k = 0; k < wl::kBK; ++k)
        want += a[static_cast<size_t>(m * wl::kBK + k)] * b[static_cast<size_t>(k * BN + n)];
      const size_t at = static_cast<size_t>(m * BN + n);
      if (writes[at] != 1) ++not_once;
      if (!(got[at] == want) && wrong++ < 5)
        ADD_FAILURE() << "C[" << m << "][" << n << "] = " << got[at] << ", want " << want;
    }
  }
  EXPECT_EQ(wrong, 0) << "elements of C wrong";
  EXPECT_EQ(not_once, 0) << "elements of C not written exactly once";
}

TEST(WgmmaLayout, DescriptorBitsWhereTheIsaPutsThem) {
  // start 0x12340 -> 0x1234 in bits 0-13; 16 -> 1 in bits 16-29; 1024 -> 64 in bits 32-45; bits 62-63 = 1.
  const uint64_t d = wl::descriptor(0x12340, 16, 1024);
  EXPECT_EQ(d & 0x3FFF, 0x1234u);
  EXPECT_EQ((d >> 16) & 0x3FFF, 1u);
  EXPECT_EQ((d >> 32) & 0x3FFF, 64u);
  EXPECT_EQ((d >> 49) & 7, 0u);
  EXPECT_EQ(d >> 62, 1u);
  // Nothing else is set: bits 14-15, 30-31, 46-48 and 52-61 are reserved.
  EXPECT_EQ(d & ~(0x3FFFull | 0x3FFFull << 16 | 0x3FFFull << 32 | 7ull << 49 | 3ull << 62), 0u);
  // The encoding keeps 18 bits of the address (the shared window is below 256 KiB): higher bits drop out.
  EXPECT_EQ(wl::descriptor(0x40000 + 0x100, 16, 1024) & 0x3FFF, 0x10u);
}

TEST(WgmmaLayout, NarrowOutputsTakeTheNarrowTile) {
  // C with 64 columns or fewer (LeNet's conv2 as an im2col GEMM, the MNIST heads) takes tile #3 (N = 64);
  // anything wider the rung's tile #0.
  EXPECT_EQ(wl::kTiles[wl::kNarrowTile].bn, 64);
  for (int64_t n : {1, 10, 63, 64}) EXPECT_EQ(wl::own_tile(n), wl::kNarrowTile) << n;
  for (int64_t n : {65, 128, 512, 4096}) EXPECT_EQ(wl::own_tile(n), 0) << n;
}

TEST(WgmmaLayout, SwizzledRowsHoldEachChunkOnce) {
  // Within an atom, row r's 8 chunks land on 8 distinct chunk positions, and the 8 rows' chunk 0 on 8
  // distinct positions too: what makes the copies and the Tensor Cores' reads conflict-free.
  for (uint32_t r = 0; r < 8; ++r) {
    std::set<uint32_t> in_row, column;
    for (uint32_t c = 0; c < 8; ++c) in_row.insert((wl::swizzled(r, c, 0) % wl::kRowBytes) / 16);
    for (uint32_t r2 = 0; r2 < 8; ++r2) column.insert((wl::swizzled(r2, r, 0) % wl::kRowBytes) / 16);
    EXPECT_EQ(in_row.size(), 8u) << "row " << r;
    EXPECT_EQ(column.size(), 8u) << "chunk " << r;
  }
  // 8 consecutive values of a chunk are 8 consecutive cells, in both layouts.
  for (int x = 0; x < 128; x += 8)
    for (int k = 0; k < 64; k += 8)
      for (int j = 0; j < 8; ++j) {
        EXPECT_EQ(wl::k_major_offset(x, k + j), wl::k_major_offset(x, k) + 2u * j);
        EXPECT_EQ(wl::mn_major_offset(x + j, k), wl::mn_major_offset(x, k) + 2u * j);
      }
}

TEST(WgmmaLayout, EveryTileFitsTheRingAndTheEpilogue) {
  // The tiles of the table as the kernel instantiates them (wgmma.cu's run dispatches on these four).
  ASSERT_EQ(wl::kTileCount, 4);
  const int want[4][3] = {{128, 3, 0}, {256, 4, 0}, {128, 4, 1}, {64, 4, 0}};  // N, stages, groups in flight
  for (int i = 0; i < wl::kTileCount; ++i)
    EXPECT_EQ((std::array<int, 3>{wl::kTiles[i].bn, wl::kTiles[i].stages, wl::kTiles[i].in_flight}),
              (std::array<int, 3>{want[i][0], want[i][1], want[i][2]}))
        << "tile #" << i;
  // A ring with a tile being copied beside the one being read (and, with a group of wgmma running
  // across the barrier, beside the one it reads too).
  for (const wl::TileConfig& t : wl::kTiles) EXPECT_GE(t.stages - 2 - t.in_flight, 0);
  // What an H100 or H200 allows a block (227 KiB), and two blocks of tile #0 per SM (228 KiB, less 1
  // KiB the system keeps per block).
  EXPECT_LE((wl::Tile<128, 3>::kSmemBytes), 227 * 1024);
  EXPECT_LE((wl::Tile<256, 4>::kSmemBytes), 227 * 1024);
  EXPECT_LE((wl::Tile<128, 4>::kSmemBytes), 227 * 1024);
  EXPECT_EQ((wl::Tile<128, 3>::kBlocksPerSm), 2);
  EXPECT_EQ((wl::Tile<256, 4>::kBlocksPerSm), 1);
  EXPECT_EQ((wl::Tile<128, 4>::kBlocksPerSm), 1);
  EXPECT_LE((wl::Tile<64, 4>::kSmemBytes), 227 * 1024);
  EXPECT_EQ((wl::Tile<64, 4>::kBlocksPerSm), 2);
  // The ring and its 1 KiB of slack, as the table's comments give them: 97, 193, 129 and 97 KiB.
  EXPECT_EQ((wl::Tile<128, 3>::kSmemBytes), 97 * 1024);
  EXPECT_EQ((wl::Tile<256, 4>::kSmemBytes), 193 * 1024);
  EXPECT_EQ((wl::Tile<128, 4>::kSmemBytes), 129 * 1024);
  EXPECT_EQ((wl::Tile<64, 4>::kSmemBytes), 97 * 1024);
  // Two warpgroups of 128 threads, each with 64 of the block's 128 rows.
  EXPECT_EQ(wl::kThreads, 256);
  EXPECT_EQ(wl::kWgRows * wl::kWarpgroups, wl::kBM);
  // The epilogue's staging rows hold their BN floats in whole 16-byte vectors, and are padded so that
  // consecutive rows do not start in the same bank.
  for (const wl::TileConfig& t : wl::kTiles) {
    EXPECT_GE(wl::staging_ld(t.bn), t.bn);
    EXPECT_EQ(wl::staging_ld(t.bn) % 4, 0);
    EXPECT_NE(wl::staging_ld(t.bn) % 32, 0);
  }
}

// The K loop's schedule, played step by step for one warpgroup (the other does the same, between the
// same barriers): copies go into a buffer only when no wgmma may still read it and the tile it holds
// has been read; a wgmma reads a buffer only when it holds its tile and this thread's copies of it have
// landed (cp.async.wait_group leaves copies_left_pending groups pending); every tile is read once.
struct Schedule {
  int stages, in_flight, ahead, pending;  // pending: copy groups left pending at the wait
};
Schedule schedule_of(const wl::TileConfig& t) {
  return {t.stages, t.in_flight, wl::ring_ahead(t.stages, t.in_flight), wl::copies_left_pending(t.stages, t.in_flight)};
}

std::vector<std::string> play_ring(const Schedule& cfg, int k_tiles) {
  std::vector<std::string> problems;
  const int S = cfg.stages, ahead = cfg.ahead;
  std::vector<int> holds(static_cast<size_t>(S), -1);  // the tile each buffer holds (or is being copied)
  std::vector<int> group_of_tile(static_cast<size_t>(k_tiles), -1);
  std::vector<bool> read(static_cast<size_t>(k_tiles), false);
  int groups = 0, landed = 0;  // copy groups committed; groups known complete (a prefix)
  std::vector<int> running;    // tiles whose wgmma may still be reading (oldest first)
  const auto copy = [&](int tile, const std::string& when) {
    const int b = tile % S;
    for (int r : running)
      if (r % S == b) problems.push_back(when + ": tile " + std::to_string(tile) + " overwrites the buffer a running wgmma reads");
    const int old = holds[static_cast<size_t>(b)];
    if (old >= 0 && !read[static_cast<size_t>(old)])
      problems.push_back(when + ": tile " + std::to_string(tile) + " overwrites tile " + std::to_string(old) + " before it is read");
    holds[static_cast<size_t>(b)] = tile;
    group_of_tile[static_cast<size_t>(tile)] = groups;
  };
  for (int s = 0; s < ahead; ++s) {
    if (s < k_tiles) copy(s, "prologue");
    ++groups;
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    const std::string when = "step " + std::to_string(kt);
    landed = std::max(landed, groups - cfg.pending);
    const int next = kt + ahead;
    if (next < k_tiles) copy(next, when);
    ++groups;
    if (holds[static_cast<size_t>(kt % S)] != kt) problems.push_back(when + ": its buffer does not hold its tile");
    if (group_of_tile[static_cast<size_t>(kt)] < 0 || group_of_tile[static_cast<size_t>(kt)] >= landed)
      problems.push_back(when + ": reads its tile before the copies have landed");
    if (read[static_cast<size_t>(kt)]) problems.push_back(when + ": reads its tile twice");
    read[static_cast<size_t>(kt)] = true;
    running.push_back(kt);
    while (static_cast<int>(running.size()) > cfg.in_flight) running.erase(running.begin());  // wgmma.wait_group
  }
  for (int kt = 0; kt < k_tiles; ++kt)
    if (!read[static_cast<size_t>(kt)]) problems.push_back("tile " + std::to_string(kt) + " is never read");
  return problems;
}

TEST(WgmmaLayout, TheRingNeverOverwritesWhatAWgmmaMayStillRead) {
  for (const wl::TileConfig& cfg : wl::kTiles) {
    for (int k_tiles = 1; k_tiles <= 12; ++k_tiles) {
      for (const std::string& p : play_ring(schedule_of(cfg), k_tiles))
        ADD_FAILURE() << "tile 128x" << cfg.bn << ", " << cfg.stages << " stages, " << cfg.in_flight
                      << " in flight, " << k_tiles << " K steps: " << p;
    }
  }
  // ... and the simulation catches the two ways to get the schedule wrong: copying one tile further
  // ahead than the ring allows (into a buffer a wgmma may still read, or whose tile is still unread),
  // and leaving one more copy group pending (reading a tile before its copies have landed).
  for (const wl::TileConfig& cfg : wl::kTiles) {
    Schedule further = schedule_of(cfg), hastier = schedule_of(cfg);
    ++further.ahead;
    ++further.pending;  // the waits keep pace with the deeper ring: only the buffers are wrong
    ++hastier.pending;
    EXPECT_FALSE(play_ring(further, 8).empty()) << cfg.stages << " stages, " << cfg.in_flight << " in flight";
    EXPECT_FALSE(play_ring(hastier, 8).empty()) << cfg.stages << " stages, " << cfg.in_flight << " in flight";
  }
}

TEST(WgmmaLayout, ABlockThroughAModelOfTheInstruction) {
  const uint64_t seed = 20261127;
  check_block<true, true, 128, 3>(seed);
  check_block<true, false, 128, 3>(seed + 1);
  check_block<false, true, 128, 3>(seed + 2);
  check_block<false, false, 128, 3>(seed + 3);
  check_block<true, true, 256, 4>(seed + 4);
  check_block<true, false, 256, 4>(seed + 5);
  check_block<false, true, 256, 4>(seed + 6);
  check_block<false, false, 256, 4>(seed + 7);
  check_block<true, true, 64, 4>(seed + 8);
  check_block<true, false, 64, 4>(seed + 9);
  check_block<false, true, 64, 4>(seed + 10);
  check_block<false, false, 64, 4>(seed + 11);
}

TEST(WgmmaLayout, TheModelNoticesAWrongStride) {
  // The simulation is worth something only if it can fail: the same block with the K-major stride byte
  // offset of an unswizzled layout (128 bytes instead of 1024) must read the wrong values.
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> small(-4, 4);
  std::vector<double> a(static_cast<size_t>(wl::kBM * wl::kBK)), b(static_cast<size_t>(wl::kBK * 128));
  for (double& x : a) x = small(rng);
  for (double& x : b) x = small(rng);
  Smem smem(wl::Tile<128, 3>::kStageBytes);
  for (int v = 0; v < wl::kBM * wl::kBK / 8; ++v) {
    const wl::Chunk c = wl::chunk_of<true, wl::kBM>(v);
    for (int j = 0; j < 8; ++j) smem.cell[c.bytes / 2 + static_cast<size_t>(j)] = a[static_cast<size_t>(c.row * wl::kBK + c.col + j)];
  }
  Problems p;
  const uint64_t good = wl::slice_descriptor<true>(0, 0, 0);
  const uint64_t bad = wl::descriptor(wl::k_major_offset(0, 0), wl::kKMajorLbo, 128);
  const auto right = read_operand(smem, good, true, 64, 0, wl::Tile<128, 3>::kABytes, "good", p);
  EXPECT_TRUE(p.lines.empty());
  int differ = 0;
  const auto wrong = read_operand(smem, bad, true, 64, 0, wl::Tile<128, 3>::kABytes, "bad", p);
  for (int x = 0; x < 64; ++x)
    for (int k = 0; k < 16; ++k) {
      EXPECT_EQ(right[static_cast<size_t>(x)][static_cast<size_t>(k)], a[static_cast<size_t>(x * wl::kBK + k)]);
      differ += !(wrong[static_cast<size_t>(x)][static_cast<size_t>(k)] == a[static_cast<size_t>(x * wl::kBK + k)]);
    }
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace hl
