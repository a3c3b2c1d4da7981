// The K loop of wmma_pipelined's fragments-ahead tiles (kernels/cuda/gemm/ahead_schedule.h), checked on
// the CPU, on every build, with or without a GPU.
//
// A model of one block: several warps, each running the kernel's loop (the prologue, steps 1-4 of the
// header for every 16-deep step of every K tile, and the wait and barrier before the epilogue) through
// the header's functions, one operation at a time, in an order a seeded scheduler picks; a barrier
// holds a warp until every warp has reached it. Each warp copies its own part of every K tile, in its
// own cp.async groups. The model checks what the kernel relies on:
//   - a load of K tile t finds every warp's part of t in t's stage, published: each warp waited for
//     the group that copied its part, then reached a barrier the loading warp has since passed; and no
//     warp has yet issued a copy of a later tile into that stage;
//   - a copy into a stage comes after a barrier that followed every warp's last load of the tile that
//     stage held before;
//   - each step's mma_syncs find that step's fragments in the set they use;
//   - every warp computes every step of every K tile once.
// The same model must catch a schedule with a step moved or a count off by one.
// What this cannot check: the hardware (cp.async, ldmatrix, the barrier), or the kernel's order of the
// steps within a 16-deep step, which it writes out as the model does: the GPU tests
// (tests/kernels/test_gemm_cuda.cpp, CudaGemm.WmmaPipelinedFragmentsAheadGiveTheirTilesBits, and every
// test that takes every tile, under racecheck in scripts/gpu_check.sh).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/gemm/ahead_schedule.h"
#include "kernels/cuda/gemm/wmma_pipelined_tiles.h"

namespace hl {
namespace {

namespace ahead = kernels::cuda::ahead;

// The schedule's decisions: ahead_schedule.h's, unless a test swaps one for a broken one.
struct Schedule {
  std::function<int64_t(int64_t, int, int)> loaded_tile = ahead::loaded_tile;
  std::function<int(int, int)> loaded_step = ahead::loaded_step;
  std::function<bool(int)> copies_at = ahead::copies_at;
  std::function<int64_t(int64_t, int)> copied_tile = ahead::copied_tile;
  std::function<bool(int, int)> barrier_after = ahead::barrier_after;
  std::function<int(int)> in_flight_at_barrier = ahead::in_flight_at_barrier;
};

enum class Kind { copy, commit, wait, barrier, load, mma };
struct Op {
  Kind kind;
  int64_t tile = -1;  // copy: the K tile; load: the tile whose fragments it loads; mma: the tile computed
  int step = 0;       // load, mma: the 16-deep step
  int set = 0;        // load, mma: the fragment set
  int n = 0;          // wait: the groups that may stay in flight
};

// One warp's operations, in the order the kernel's loop issues them (wmma_pipelined.cu, the AHEAD branch).
std::vector<Op> program(const Schedule& sc, int stages, int steps, int64_t k_tiles) {
  std::vector<Op> ops;
  for (int s = 0; s < stages - 1; ++s) {
    if (s < k_tiles) ops.push_back({Kind::copy, s});
    ops.push_back({Kind::commit});
  }
  ops.push_back({Kind::wait, -1, 0, 0, sc.in_flight_at_barrier(stages)});
  ops.push_back({Kind::barrier});
  ops.push_back({Kind::load, 0, 0, 0});
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    for (int step = 0; step < steps; ++step) {
      const int cur = step % 2;
      if (const int64_t t = sc.loaded_tile(kt, step, steps); t < k_tiles)
        ops.push_back({Kind::load, t, sc.loaded_step(step, steps), 1 - cur});
      ops.push_back({Kind::mma, kt, step, cur});
      if (sc.copies_at(step)) {
        if (const int64_t next = sc.copied_tile(kt, stages); next < k_tiles) ops.push_back({Kind::copy, next});
        ops.push_back({Kind::commit});
      }
      if (sc.barrier_after(step, steps)) {
        ops.push_back({Kind::wait, -1, 0, 0, sc.in_flight_at_barrier(stages)});
        ops.push_back({Kind::barrier});
      }
    }
  }
  ops.push_back({Kind::wait, -1, 0, 0, 0});  // before the epilogue reuses the ring
  ops.push_back({Kind::barrier});
  return ops;
}

struct Warp {
  std::vector<Op> ops;
  size_t pc = 0;
  int passed = 0;                               // barriers this warp has passed
  std::vector<std::vector<int64_t>> groups;     // committed cp.async groups: the tiles each copied
  std::vector<int64_t> open;                    // copies issued since the last commit
  size_t waited = 0;                            // groups [0, waited) landed, as a wait told this warp
  std::map<int64_t, int> published;             // tile -> the barrier by which this warp's part was visible
  std::map<int64_t, int> loads;                 // tile -> this warp's loads of it so far
  std::map<int64_t, int> last_load_barrier;     // tile -> barriers passed when its last load was issued
  std::pair<int64_t, int> frags[2] = {{-1, -1}, {-1, -1}};
  int64_t computed = 0;                         // steps computed
};

// Plays the schedule with `warps` warps on a ring of `stages` stages, K tiles of `steps` 16-deep steps,
// k_tiles of them. Returns the first violation, or "" when there is none.
std::string play(const Schedule& sc, int warps, int stages, int steps, int64_t k_tiles, uint64_t seed) {
  std::vector<Warp> w(static_cast<size_t>(warps));
  for (Warp& x : w) x.ops = program(sc, stages, steps, k_tiles);
  // For each stage, the latest tile any warp has issued a copy of into it.
  std::vector<int64_t> newest_copy(static_cast<size_t>(stages), -1);
  std::mt19937_64 rng(seed);
  const auto where = [&](size_t i, const Op& op) {
    return "warp " + std::to_string(i) + ", tile " + std::to_string(op.tile) + " step " + std::to_string(op.step) +
           ": ";
  };
  for (;;) {
    std::vector<size_t> ready;
    bool all_done = true;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i].pc >= w[i].ops.size()) continue;
      all_done = false;
      const Op& op = w[i].ops[w[i].pc];
      if (op.kind != Kind::barrier) {
        ready.push_back(i);
        continue;
      }
      // A barrier lets a warp through once every warp has reached it (the same one: each has passed
      // as many barriers, and stands at one).
      bool all_here = true;
      for (const Warp& y : w)
        all_here = all_here && y.passed == w[i].passed && y.pc < y.ops.size() && y.ops[y.pc].kind == Kind::barrier;
      if (all_here) ready.push_back(i);
    }
    if (all_done) break;
    if (ready.empty()) return "the warps wait at different barriers: a deadlock";
    // A barrier releases every warp at once; anything else runs one warp one operation further.
    const size_t i = ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng)];
    Warp& x = w[i];
    const Op op = x.ops[x.pc];
    switch (op.kind) {
      case Kind::copy: {
        const auto s = static_cast<size_t>(op.tile % stages);
        // The stage's previous tile: every warp must have issued its last load of it before a barrier
        // this warp has passed since.
        if (const int64_t before = op.tile - stages; before >= 0) {
          for (size_t j = 0; j < w.size(); ++j) {
            if (w[j].loads[before] < steps)
              return where(i, op) + "copied into the stage of tile " + std::to_string(before) + ", which warp " +
                     std::to_string(j) + " has still to read";
            if (w[j].last_load_barrier[before] >= x.passed)
              return where(i, op) + "copied into the stage of tile " + std::to_string(before) +
                     " with no barrier after warp " + std::to_string(j) + "'s last read of it";
          }
        }
        newest_copy[s] = std::max(newest_copy[s], op.tile);
        x.open.push_back(op.tile);
        break;
      }
      case Kind::commit:
        x.groups.push_back(x.open);
        x.open.clear();
        break;
      case Kind::wait:
        // cp.async.wait_group n: every group but the n newest has landed.
        if (x.groups.size() > static_cast<size_t>(op.n)) x.waited = std::max(x.waited, x.groups.size() - op.n);
        break;
      case Kind::barrier:
        for (Warp& y : w) {
          // What each warp had waited for before this barrier is visible to every warp after it.
          for (size_t g = 0; g < y.waited; ++g)
            for (int64_t t : y.groups[g]) y.published.emplace(t, y.passed);
          ++y.passed;
          ++y.pc;
        }
        continue;
      case Kind::load: {
        const auto s = static_cast<size_t>(op.tile % stages);
        for (size_t j = 0; j < w.size(); ++j) {
          const auto it = w[j].published.find(op.tile);
          if (it == w[j].published.end() || it->second >= x.passed)
            return where(i, op) + "loaded before warp " + std::to_string(j) + "'s part of the tile was published";
        }
        if (newest_copy[s] != op.tile)
          return where(i, op) + "loaded from a stage that a copy of tile " + std::to_string(newest_copy[s]) +
                 " may already overwrite";
        x.frags[op.set] = {op.tile, op.step};
        ++x.loads[op.tile];
        x.last_load_barrier[op.tile] = x.passed;
        break;
      }
      case Kind::mma:
        if (x.frags[op.set] != std::make_pair(op.tile, op.step))
          return where(i, op) + "computed on the fragments of tile " + std::to_string(x.frags[op.set].first) +
                 " step " + std::to_string(x.frags[op.set].second);
        ++x.computed;
        break;
    }
    ++x.pc;
  }
  for (size_t i = 0; i < w.size(); ++i)
    if (w[i].computed != k_tiles * steps)
      return "warp " + std::to_string(i) + " computed " + std::to_string(w[i].computed) + " steps of " +
             std::to_string(k_tiles * steps);
  return "";
}

// The shapes of the table's fragments-ahead tiles (wmma_pipelined_tiles.h): their stages and 16-deep steps.
std::vector<std::pair<int, int>> ahead_tiles() {
  std::vector<std::pair<int, int>> shapes;
  for (const auto& t : kernels::wmma_pipelined::kBigTiles)
    if (t.ahead) shapes.emplace_back(t.stages, t.bk / 16);
  return shapes;
}

// Every (stages, steps) pair the table uses and a few more (2 stages among them: right, as
// ahead_schedule.h says, though the kernel asks for 3), K from 1 tile to past three times round the
// ring, 3 warps, several seeds; returns the first violation.
std::string play_all(const Schedule& sc) {
  std::vector<std::pair<int, int>> shapes = ahead_tiles();
  for (const auto& extra : std::vector<std::pair<int, int>>{{2, 2}, {3, 2}, {4, 4}, {5, 2}, {5, 4}})
    shapes.push_back(extra);
  for (const auto& [stages, steps] : shapes)
    for (int64_t k_tiles = 1; k_tiles <= 3 * stages + 2; ++k_tiles)
      for (uint64_t seed = 1; seed <= 8; ++seed)
        if (std::string bad = play(sc, 3, stages, steps, k_tiles, seed); !bad.empty())
          return std::to_string(stages) + " stages, " + std::to_string(steps) + " steps, " + std::to_string(k_tiles) +
                 " K tiles, seed " + std::to_string(seed) + ": " + bad;
  return "";
}

TEST(AheadSchedule, EveryWarpReadsPublishedTilesThatNoCopyOverwrites) {
  ASSERT_FALSE(ahead_tiles().empty()) << "no tile of wmma_pipelined_tiles.h loads its fragments ahead";
  EXPECT_EQ(play_all(Schedule{}), "");
}

// The model is only as good as what it catches: each schedule below is ahead_schedule.h's with one
// decision broken, and each must be found, for the reason it is wrong, with 32-deep and 64-deep K steps
// alike (ten K tiles: past the ring several times).
TEST(AheadSchedule, TheModelCatchesBrokenSchedules) {
  struct Broken {
    const char* what;
    std::function<void(Schedule&)> break_it;
    const char* found;  // what the model must say
  };
  const std::vector<Broken> broken = {
      {"the barrier after the last step (the next tile's first loads come before it)",
       [](Schedule& s) { s.barrier_after = [](int step, int steps) { return step + 1 == steps; }; },
       "before warp 0's part of the tile was published"},
      {"one more group left in flight at the barrier",
       [](Schedule& s) { s.in_flight_at_barrier = [](int stages) { return stages - 1; }; },
       "before warp 0's part of the tile was published"},
      {"the copy of tile kt + S, into the stage being computed",
       [](Schedule& s) { s.copied_tile = [](int64_t kt, int stages) { return kt + stages; }; },
       "copied into the stage of tile 0"},
      {"the last step loading this tile's first step again",
       [](Schedule& s) { s.loaded_tile = [](int64_t kt, int, int) { return kt; }; }, "computed on the fragments of"},
      {"the next tile's first loads at the second-to-last step",
       [](Schedule& s) {
         s.loaded_tile = [](int64_t kt, int step, int steps) { return step + 2 < steps ? kt : kt + 1; };
       },
       "part of the tile was published"},
  };
  for (const Broken& b : broken) {
    Schedule s;
    b.break_it(s);
    for (const auto& [stages, steps] : std::vector<std::pair<int, int>>{{4, 2}, {3, 4}}) {
      const std::string found = play(s, 3, stages, steps, 10, 1);
      EXPECT_NE(found.find(b.found), std::string::npos)
          << b.what << ", " << stages << " stages, " << steps << " steps: the model said \"" << found
          << "\", where it should say \"" << b.found << "\"";
    }
  }
}

}  // namespace
}  // namespace hl
