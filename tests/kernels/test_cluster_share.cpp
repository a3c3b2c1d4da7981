// wmma_pipelined's cluster tiles (kernels/cuda/gemm/cluster_share.h), checked on the CPU, on every
// build, with or without a GPU.
//
// 1. The parts. The blocks that share an operand tile each copy one part of it; together the parts
//    must cover the tile exactly once, each vector numbered as the copies number it (so that the
//    thread that copied a vector is the one that sends it), and part p must start p * X / 2 along M
//    or N, where the kernel points that part's copies.
// 2. The schedule. A model of the blocks of a cluster (each block one actor running the K loop of
//    cluster_share.h's steps 1-4 through the header's functions), of their mbarriers
//    (mbarrier_model.h), of cp.async groups landing in any order, and of st.async messages landing in
//    any order at any time, under a seeded random scheduler. No block may wait forever; a block must
//    find round kt in every part of its stage when its full barrier lets it through; nothing may
//    land in a stage a block still reads, or that holds a round it has not used yet; a block sends
//    only what has landed; no barrier's transaction count goes below zero; at the end every barrier
//    has completed exactly the phases waited for, with nothing left over. The same model must catch
//    a schedule with a step moved or left out.
// What this cannot check: the hardware's reading of the PTX (mapa, st.async, the cluster barrier): the
// GPU tests of the tiles (tests/kernels/test_gemm_cuda.cpp, CudaGemm.WmmaPipelined*).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/gemm/cluster_share.h"
#include "kernels/cuda/gemm/ring_phases.h"
#include "kernels/cuda/gemm/wmma_pipelined_tiles.h"
#include "tests/kernels/mbarrier_model.h"

namespace hl {
namespace {

namespace cs = kernels::cuda::cluster_share;
namespace ring = kernels::cuda::ring;
using test::MBarrier;

// ---- 1. the parts -----------------------------------------------------------------------------------------

// wmma_tile.cuh's SmemOperand without its device code: X along M or N, BK along K, rows padded by 8.
template <bool kKContiguous_, int X, int BK>
struct TileShape {
  static constexpr bool kKContiguous = kKContiguous_;
  static constexpr int kRows = kKContiguous ? X : BK;
  static constexpr int kCols = kKContiguous ? BK : X;
  static constexpr int kLd = kCols + 8;
};

template <bool kKContiguous, int X, int BK, int kThreads>
void check_parts() {
  SCOPED_TRACE(std::string(kKContiguous ? "K along the rows" : "K down the columns") + ", " + std::to_string(X) +
               " x " + std::to_string(BK));
  using Full = TileShape<kKContiguous, X, BK>;
  using P = cs::Part<Full, 2>;
  std::set<int> seen;
  for (int p = 0; p < 2; ++p) {
    // Part p starts where the element at p * X / 2 along M or N lies in the tile.
    const int first = kKContiguous ? (p * X / 2) * Full::kLd : p * X / 2;
    EXPECT_EQ(P::offset(p), first) << "part " << p;
    for (int v = 0; v < P::kVectors; ++v) {
      const int at = P::offset(p) + P::vector_at(v);
      const int row = at / Full::kLd, col = at % Full::kLd;
      // The copies (wmma_tile.cuh's load_tile, copy_plan.h) number a tile of the part's shape row by row.
      EXPECT_EQ(P::vector_at(v), (v / (P::kCols / 8)) * P::kLd + (v % (P::kCols / 8)) * 8);
      EXPECT_LT(row, Full::kRows);
      EXPECT_LE(col + 8, Full::kCols) << "a vector reaches into the padding";
      EXPECT_EQ(col % 8, 0);
      EXPECT_TRUE(seen.insert(at).second) << "vector at " << at << " in two parts";
    }
    EXPECT_EQ(P::kBytes, P::kVectors * 16);
  }
  EXPECT_EQ(static_cast<int>(seen.size()), Full::kRows * Full::kCols / 8) << "the parts leave vectors out";
  // One thread's vectors are v, v + kThreads, ...: the same in both parts' numbering as in a copy of
  // the part, so the kernel's sends read back what each thread copied.
  static_assert(P::kVectors % kThreads == 0, "every thread sends the same number of vectors");
}

TEST(ClusterShare, PartsCoverTheTileOnceInTheCopiesOrder) {
  // wmma_pipelined's 128 x 128 x 32 block tiles, 256 threads, both storage orders of each operand.
  check_parts<true, 128, 32, 256>();
  check_parts<false, 128, 32, 256>();
  check_parts<true, 64, 32, 128>();
  check_parts<false, 64, 64, 128>();
}

TEST(ClusterShare, PeersAndBytes) {
  // A 2 x 2 cluster: ranks x + 2 y; the A peer shares the row of C tiles, the B peer the column.
  EXPECT_EQ(cs::rank_of(1, 1, 2), 3);
  EXPECT_EQ(cs::a_peer(0, 1, 2), 3);
  EXPECT_EQ(cs::b_peer(0, 1, 2), 0);
  EXPECT_EQ(cs::a_peer(1, 0, 2), 0);
  EXPECT_EQ(cs::b_peer(1, 0, 2), 3);
  // 2 blocks along M (cn = 1): ranks are y; the B peer is the other one.
  EXPECT_EQ(cs::b_peer(0, 0, 1), 1);
  EXPECT_EQ(cs::b_peer(0, 1, 1), 0);
  EXPECT_EQ(cs::peers(2, 1), 1);
  EXPECT_EQ(cs::peers(1, 2), 1);
  EXPECT_EQ(cs::peers(2, 2), 2);
  EXPECT_EQ(cs::received_bytes(2, 1, 100, 7), 7u);
  EXPECT_EQ(cs::received_bytes(1, 2, 100, 7), 100u);
  EXPECT_EQ(cs::received_bytes(2, 2, 100, 7), 107u);
  // The tiles of the table that use a cluster: 2 blocks along M or N, or both, and stages enough for
  // step 1 (round kt + 1 landed while later rounds stay in flight).
  namespace tiles = kernels::wmma_pipelined;
  int clustered = 0;
  for (const tiles::Tile& t : tiles::kBigTiles) {
    if (!t.clustered()) continue;
    ++clustered;
    EXPECT_TRUE(t.cluster_m == 1 || t.cluster_m == 2) << tiles::describe(t);
    EXPECT_TRUE(t.cluster_n == 1 || t.cluster_n == 2) << tiles::describe(t);
    EXPECT_GE(cs::groups_in_flight_at_push(t.stages), 0) << tiles::describe(t);
    EXPECT_TRUE(t.lean) << "the cluster tiles are #12's block, lean copy and all: " << tiles::describe(t);
    EXPECT_NE(tiles::describe(t).find("clusters of"), std::string::npos);
  }
  EXPECT_GE(clustered, 2);
  EXPECT_FALSE(tiles::kBigTiles[tiles::kOwnTile].clustered()) << "the rung's own tile must run on every GPU";
}

// ---- 2. the schedule ------------------------------------------------------------------------------------

// The schedule under test: the header's, or a deliberately broken one.
struct ScheduleFns {
  std::function<bool(int64_t, int)> sender_waits = ring::producer_waits;
  std::function<uint32_t(int64_t, int)> empty_parity = ring::empty_parity;
  std::function<uint32_t(int64_t, int)> full_parity = ring::full_parity;
  std::function<int64_t(int64_t)> pushed_at = cs::pushed_at;
  std::function<int(int)> groups_in_flight_at_push = cs::groups_in_flight_at_push;
  std::function<int64_t(int64_t, int)> expected_at = cs::expected_at;
  std::function<int64_t(int64_t, int64_t, int)> released_at = cs::released_at;
};

constexpr uint32_t kABytes = 4096, kBBytes = 2048;  // a part of each tile: different, to catch a mix-up
constexpr int kMessages = 2;                         // each part goes out as this many st.async, landing apart

struct Message {  // st.async: `bytes` of part `from` (0: A, 1: B) of round `round`, into block `to`
  int to, stage, from;
  int64_t round;
  uint32_t bytes;
};
struct Landing {  // a cp.async group of a block's own parts
  int block, stage;
  int64_t round;
};

struct Block {
  int x = 0, y = 0;
  std::vector<MBarrier> full, empty;
  std::vector<int64_t> own;                   // per stage: the round its own parts hold (-1: none)
  std::vector<std::vector<int64_t>> peer;     // per stage, per received part (A, B): the round it holds
  std::vector<std::vector<int>> peer_pieces;  // ... and how many of its messages have landed
  int64_t issued = 0;                         // cp.async groups committed (one per round, rounds 0, 1, ...)
  int64_t kt = 0;
  int step = 0;            // 0 prologue, 1-4 the header's steps, 5 at the end barrier, 6 exited
  int64_t reading = -1;    // the round whose stage the warps may still read (until the next step 3)
  int64_t used = 0;        // rounds whose multiply-adds are done
};

// Plays the K loop of one cluster: returns what went wrong (empty when nothing did).
std::vector<std::string> play_cluster(int cm, int cn, int S, int64_t k_tiles, uint64_t seed,
                                      const ScheduleFns& fn = {}) {
  std::vector<std::string> problems;
  const auto fail = [&](const std::string& s) {
    if (problems.size() < 10) problems.push_back(s);
  };
  const int n = cm * cn, peers = cs::peers(cm, cn);
  const uint32_t received = cs::received_bytes(cm, cn, kABytes, kBBytes);
  std::vector<Block> blocks(static_cast<size_t>(n));
  for (int y = 0; y < cm; ++y)
    for (int x = 0; x < cn; ++x) {
      Block& b = blocks[static_cast<size_t>(cs::rank_of(x, y, cn))];
      b.x = x;
      b.y = y;
      b.full.resize(static_cast<size_t>(S));
      b.empty.resize(static_cast<size_t>(S));
      for (int s = 0; s < S; ++s) {
        b.full[static_cast<size_t>(s)].init(1);
        b.empty[static_cast<size_t>(s)].init(peers);
      }
      // The kernel's prologue, before the cluster barrier: the first S rounds' bytes announced.
      for (int64_t r = 0; r < S && r < k_tiles; ++r) {
        MBarrier& f = b.full[static_cast<size_t>(ring::stage_of(r, S))];
        f.expect_tx(received);
        f.arrive();
      }
      b.own.assign(static_cast<size_t>(S), -1);
      b.peer.assign(static_cast<size_t>(S), std::vector<int64_t>(2, -1));
      b.peer_pieces.assign(static_cast<size_t>(S), std::vector<int>(2, 0));
    }
  std::vector<Message> messages;
  std::vector<Landing> landings;

  const auto name = [&](const Block& b) { return "block (" + std::to_string(b.x) + ", " + std::to_string(b.y) + ")"; };
  // cp.async of round r's own parts (an empty group past K).
  const auto issue = [&](Block& b, int bi) {
    if (b.issued < k_tiles) landings.push_back({bi, ring::stage_of(b.issued, S), b.issued});
    ++b.issued;
  };
  const auto landed = [&](int bi, int64_t r) {
    for (const Landing& l : landings)
      if (l.block == bi && l.round <= r) return false;
    return true;
  };
  // Step 1's send of round r: may it go, and then send it.
  const auto may_send = [&](const Block& b, int64_t r) {
    return !fn.sender_waits(r, S) ||
           b.empty[static_cast<size_t>(ring::stage_of(r, S))].try_wait_parity(fn.empty_parity(r, S));
  };
  const auto send = [&](Block& b, int64_t r) {
    const int s = ring::stage_of(r, S);
    if (b.own[static_cast<size_t>(s)] != r)
      fail(name(b) + " sends round " + std::to_string(r) + " from stage " + std::to_string(s) + ", whose own parts hold round " +
           std::to_string(b.own[static_cast<size_t>(s)]));
    if (fn.sender_waits(r, S) && b.empty[static_cast<size_t>(s)].completed < r / S)
      fail(name(b) + " sends round " + std::to_string(r) + " before its peers released stage " + std::to_string(s));
    for (int piece = 0; piece < kMessages; ++piece) {
      if (cn == 2) messages.push_back({cs::a_peer(b.x, b.y, cn), s, 0, r, kABytes / kMessages});
      if (cm == 2) messages.push_back({cs::b_peer(b.x, b.y, cn), s, 1, r, kBBytes / kMessages});
    }
  };

  std::mt19937_64 rng(seed);
  for (int64_t moves = 0; moves < 1000000; ++moves) {
    // Who can move: block i (0 .. n - 1), a message landing (n), a cp.async group landing (n + 1).
    std::vector<int> ready;
    for (int i = 0; i < n; ++i) {
      const Block& b = blocks[static_cast<size_t>(i)];
      bool can = false;
      switch (b.step) {
        case 0: can = landed(i, 0) || b.issued == 0; break;  // after the prologue's copies: round 0 landed
        case 1: {
          const int64_t must = b.issued - 1 - fn.groups_in_flight_at_push(S);
          const int64_t r = fn.pushed_at(b.kt);
          can = landed(i, must) && (r >= k_tiles || may_send(b, r));
          break;
        }
        case 2:
          can = b.full[static_cast<size_t>(ring::stage_of(b.kt, S))].try_wait_parity(fn.full_parity(b.kt, S));
          break;
        case 3: case 4: can = true; break;
        case 5: {
          can = true;
          for (const Block& o : blocks) can = can && o.step >= 5;
          break;
        }
        default: break;
      }
      if (can) ready.push_back(i);
    }
    if (!messages.empty()) ready.push_back(n);
    if (!landings.empty()) ready.push_back(n + 1);
    if (ready.empty()) break;
    const int who = ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng)];

    if (who == n) {  // one st.async lands in a peer's stage
      const size_t i = std::uniform_int_distribution<size_t>(0, messages.size() - 1)(rng);
      const Message m = messages[i];
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(i));
      Block& t = blocks[static_cast<size_t>(m.to)];
      const size_t s = static_cast<size_t>(m.stage), f = static_cast<size_t>(m.from);
      if (t.step == 6) fail("round " + std::to_string(m.round) + " lands in " + name(t) + ", which has exited");
      if (t.reading >= 0 && ring::stage_of(t.reading, S) == m.stage)
        fail("round " + std::to_string(m.round) + " lands in stage " + std::to_string(m.stage) + " of " + name(t) +
             " while its warps read round " + std::to_string(t.reading) + " there");
      if (t.peer[s][f] != m.round && t.peer[s][f] >= t.used)
        fail("round " + std::to_string(m.round) + " lands in stage " + std::to_string(m.stage) + " of " + name(t) +
             " over round " + std::to_string(t.peer[s][f]) + ", not used yet");
      if (t.peer[s][f] != m.round) t.peer_pieces[s][f] = 0;
      t.peer[s][f] = m.round;
      ++t.peer_pieces[s][f];
      t.full[s].complete_tx(m.bytes);
      if (t.full[s].tx < 0)
        fail("stage " + std::to_string(m.stage) + " of " + name(t) + " received round " + std::to_string(m.round) +
             " before its bytes were announced");
    } else if (who == n + 1) {  // one cp.async group lands
      const size_t i = std::uniform_int_distribution<size_t>(0, landings.size() - 1)(rng);
      const Landing l = landings[i];
      landings.erase(landings.begin() + static_cast<std::ptrdiff_t>(i));
      Block& b = blocks[static_cast<size_t>(l.block)];
      if (b.reading >= 0 && ring::stage_of(b.reading, S) == l.stage)
        fail("the copy of round " + std::to_string(l.round) + " lands in a stage " + name(b) + " still reads");
      b.own[static_cast<size_t>(l.stage)] = l.round;
    } else {
      Block& b = blocks[static_cast<size_t>(who)];
      switch (b.step) {
        case 0:  // the prologue: rounds 0 .. S - 2 in flight, then round 0 sent
          if (b.issued == 0) {
            for (int s = 0; s < S - 1; ++s) issue(b, who);
            break;  // then wait for round 0 (the case's condition)
          }
          send(b, 0);
          b.step = 1;
          break;
        case 1: {
          const int64_t r = fn.pushed_at(b.kt);
          if (r < k_tiles) send(b, r);
          b.step = 2;
          break;
        }
        case 2: {
          const int s = ring::stage_of(b.kt, S);
          const size_t ss = static_cast<size_t>(s);
          if (b.full[ss].completed != b.kt / S + 1)
            fail(name(b) + " passed full[" + std::to_string(s) + "] for round " + std::to_string(b.kt) + " on phase " +
                 std::to_string(b.full[ss].completed - 1));
          for (int f = 0; f < 2; ++f) {
            const bool shared = f == 0 ? cn == 2 : cm == 2;
            if (shared && (b.peer[ss][static_cast<size_t>(f)] != b.kt || b.peer_pieces[ss][static_cast<size_t>(f)] != kMessages))
              fail(name(b) + " uses round " + std::to_string(b.kt) + " while its " + (f == 0 ? "A" : "B") +
                   " part from its peer is round " + std::to_string(b.peer[ss][static_cast<size_t>(f)]) + " (" +
                   std::to_string(b.peer_pieces[ss][static_cast<size_t>(f)]) + " of " + std::to_string(kMessages) +
                   " messages)");
          }
          if (fn.expected_at(b.kt, S) < k_tiles) {
            b.full[ss].expect_tx(received);
            b.full[ss].arrive();
          }
          b.step = 3;
          break;
        }
        case 3: {  // __syncthreads: round kt - 1 is done; its stage goes back to the peers; a new copy
          b.reading = -1;
          b.used = b.kt;
          const int s = ring::stage_of(b.kt, S);
          if (b.own[static_cast<size_t>(s)] != b.kt)
            fail(name(b) + " computes round " + std::to_string(b.kt) + " before its own parts landed");
          const int64_t released = fn.released_at(b.kt, k_tiles, S);
          if (released >= 0) {
            if (released >= b.kt) fail(name(b) + " releases round " + std::to_string(released) + ", not yet used");
            const size_t rs = static_cast<size_t>(ring::stage_of(released, S));
            if (cn == 2) blocks[static_cast<size_t>(cs::a_peer(b.x, b.y, cn))].empty[rs].arrive();
            if (cm == 2) blocks[static_cast<size_t>(cs::b_peer(b.x, b.y, cn))].empty[rs].arrive();
          }
          issue(b, who);
          b.step = 4;
          break;
        }
        case 4:  // the multiply-adds of round kt start; they read its stage until the next step 3
          b.reading = b.kt;
          ++b.kt;
          if (b.kt == k_tiles) {
            b.reading = -1;  // the kernel waits for every warp before the epilogue
            b.used = k_tiles;
            b.step = 5;
          } else {
            b.step = 1;
          }
          break;
        case 5:
          b.step = 6;
          break;
        default: break;
      }
    }
  }
  for (const Block& b : blocks)
    if (b.step != 6)
      fail(name(b) + " stopped at round " + std::to_string(b.kt) + ", step " + std::to_string(b.step) +
           ": a wait that never ends");
  if (!messages.empty()) fail("messages never landed");
  // The kernel exits with its barriers as they stand, so each must end between phases, having completed
  // exactly the phases some block waited for: full[s] once per round of stage s, empty[s] once per round
  // sent into stage s after its first (a refill). An arrival or announced bytes past those are left for a
  // barrier nobody waits on (why released_at hands back only stages a peer refills).
  for (const Block& b : blocks)
    for (int s = 0; s < S; ++s) {
      int64_t rounds = 0, refills = 0;
      for (int64_t r = s; r < k_tiles; r += S) {
        ++rounds;
        if (r >= S) ++refills;
      }
      const MBarrier& f = b.full[static_cast<size_t>(s)];
      const MBarrier& e = b.empty[static_cast<size_t>(s)];
      if (f.completed != rounds || f.pending != f.arrivals || f.tx != 0)
        fail(name(b) + "'s full[" + std::to_string(s) + "] completed " + std::to_string(f.completed) + " phases for " +
             std::to_string(rounds) + " rounds, with " + std::to_string(f.arrivals - f.pending) + " arrivals and " +
             std::to_string(f.tx) + " announced bytes left over");
      if (e.completed != refills || e.pending != e.arrivals)
        fail(name(b) + "'s empty[" + std::to_string(s) + "] completed " + std::to_string(e.completed) +
             " phases for " + std::to_string(refills) + " refills, with " + std::to_string(e.arrivals - e.pending) +
             " arrivals left over");
    }
  return problems;
}

struct ClusterCase {
  int cm, cn;
};
constexpr ClusterCase kClusters[] = {{2, 1}, {1, 2}, {2, 2}};

TEST(ClusterShare, TheScheduleNeverHangsNorRaces) {
  // Every cluster shape, 3 to 6 stages, K from one step to several trips around the ring, 10 schedules each.
  for (const ClusterCase& c : kClusters)
    for (int S = 3; S <= 6; ++S)
      for (int64_t k_tiles = 1; k_tiles <= 3 * S + 2; ++k_tiles)
        for (uint64_t seed = 0; seed < 10; ++seed)
          for (const std::string& p : play_cluster(c.cm, c.cn, S, k_tiles, seed))
            ADD_FAILURE() << c.cm << " x " << c.cn << " blocks, " << S << " stages, " << k_tiles << " K steps, schedule "
                          << seed << ": " << p;
}

TEST(ClusterShare, TheModelNoticesABrokenSchedule) {
  // The model is worth something only if it can fail: each way of getting the schedule wrong is caught
  // on some schedule of a 2 x 2 cluster and of a pair, at 3, 4 or 5 stages.
  for (const ClusterCase& c : {ClusterCase{2, 2}, ClusterCase{2, 1}}) {
    SCOPED_TRACE(std::to_string(c.cm) + " x " + std::to_string(c.cn));
    const auto caught_at = [&](const ScheduleFns& fn, int S) {
      for (uint64_t seed = 0; seed < 50; ++seed)
        if (!play_cluster(c.cm, c.cn, S, 4 * S, seed, fn).empty()) return true;
      return false;
    };
    const auto caught = [&](const ScheduleFns& fn) {
      return caught_at(fn, 3) || caught_at(fn, 4) || caught_at(fn, 5);
    };
    ScheduleFns no_wait;  // a sender that does not wait for the peers to release the stage
    no_wait.sender_waits = [](int64_t, int) { return false; };
    EXPECT_TRUE(caught_at(no_wait, 3));
    EXPECT_TRUE(caught_at(no_wait, 4));
    // With 5 stages or more the full barriers alone keep the blocks close enough: a block sends round r
    // only after receiving round r - 2, which its peer sent after finishing round r - 4, and the stage
    // of round r last held round r - 5. The kernel's tiles have 5 stages and keep the wait anyway: it is
    // what makes the schedule right at any depth, and by then it has always completed.
    EXPECT_FALSE(caught_at(no_wait, 5));
    ScheduleFns wrong_parity;
    wrong_parity.empty_parity = [](int64_t r, int s) { return ring::empty_parity(r, s) ^ 1u; };
    EXPECT_TRUE(caught(wrong_parity));
    ScheduleFns wrong_full;
    wrong_full.full_parity = [](int64_t kt, int s) { return ring::full_parity(kt, s) ^ 1u; };
    EXPECT_TRUE(caught(wrong_full));
    ScheduleFns early_push;  // sending round kt + 1 when only round kt is sure to have landed
    early_push.groups_in_flight_at_push = [](int s) { return s - 2; };
    EXPECT_TRUE(caught(early_push));
    ScheduleFns early_release;  // handing back the stage the warps are about to read
    early_release.released_at = [](int64_t kt, int64_t k_tiles, int s) { return kt + s < k_tiles ? kt : -1; };
    EXPECT_TRUE(caught(early_release));
    ScheduleFns late_announce;  // announcing the wrong round's bytes: some arrive before their announcement
    late_announce.expected_at = [](int64_t kt, int s) { return kt + s + 1; };
    EXPECT_TRUE(caught(late_announce));
    ScheduleFns announce_past_k;  // announcing bytes for rounds past K, which never come
    announce_past_k.expected_at = [](int64_t kt, int s) { return kt - s; };
    EXPECT_TRUE(caught(announce_past_k));
    ScheduleFns release_all;  // handing back stages no peer refills: arrivals on barriers nobody waits on
    release_all.released_at = [](int64_t kt, int64_t, int) { return kt - 1; };
    EXPECT_TRUE(caught(release_all));
    ScheduleFns release_one_more;  // ... or only the last of them, round K - S
    release_one_more.released_at = [](int64_t kt, int64_t k_tiles, int s) {
      return kt >= 1 && kt - 1 + s <= k_tiles ? kt - 1 : -1;
    };
    EXPECT_TRUE(caught(release_one_more));
    ScheduleFns two_ahead;  // sending two rounds ahead with the same wait
    two_ahead.pushed_at = [](int64_t kt) { return kt + 2; };
    EXPECT_TRUE(caught(two_ahead));
  }
}

}  // namespace
}  // namespace hl
