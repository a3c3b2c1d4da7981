// The GEMM rungs' tile tables are named by number in the committed measurements: `gemm_bench --sweep`
// prints rows such as "wmma_pipelined #12" or "wgmma_tma #1" and, under the table, a legend that says
// what each number was ("#   #12: 128x128x32, 2x4 warps of 64x32, 4 stages, lean copy"). The headers,
// docs/gpu_status.md and kernels/cuda/gemm/README.md quote those rows by number. So the tables may only
// grow: an entry changed in place would leave every committed result under its number describing a
// tile that no longer exists, and the next GPU session would compare new numbers with old ones for a
// different tile. Both choices compile, and no GPU test would notice. This reads every legend under
// bench/results/ and checks it against the tables as they are now; the tiles not yet run on a GPU
// (no legend names them) are checked against what their comments in wmma_pipelined_tiles.h say they are.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "bench/gemm_legend.h"
#include "kernels/cuda/gemm/wgmma_layout.h"
#include "kernels/cuda/gemm/wgmma_tma_plan.h"
#include "kernels/cuda/gemm/wmma_pipelined_tiles.h"

namespace {

namespace fs = std::filesystem;
namespace tiles = hl::kernels::wmma_pipelined;
namespace wl = hl::kernels::cuda::wgmma_layout;
namespace tp = hl::kernels::cuda::wgmma_tma_plan;

// One legend line of a results file: which table, which number, what it said, and where.
struct LegendEntry {
  std::string table;  // "wmma_pipelined", "wgmma" or "wgmma_tma"
  int index = -1;
  std::string said;  // the description, without a trailing " (the rung's own ...)" note
  std::string where;
};

// Every legend entry of every file under bench/results/. A legend starts with a line naming its table
// (the wording changed once: "# --sweep: wmma_pipelined with block tile #I ..." before 2026-11-28,
// "# 'wmma_pipelined #I': ..." since) and goes on while lines read "#   #N: ...".
std::vector<LegendEntry> committed_legends() {
  const std::regex entry(R"(^#   #(\d+): (.*)$)");
  std::vector<LegendEntry> out;
  for (const auto& file : fs::directory_iterator(fs::path(HALFLING_SOURCE_DIR) / "bench" / "results")) {
    if (!file.is_regular_file()) continue;
    std::ifstream in(file.path());
    std::string line, table;
    for (int lineno = 1; std::getline(in, line); ++lineno) {
      std::smatch m;
      if (!table.empty() && std::regex_match(line, m, entry)) {
        std::string said = m[2];
        if (const auto note = said.find(" (the rung's own"); note != std::string::npos) said.resize(note);
        out.push_back({table, std::stoi(m[1]), said, file.path().filename().string() + ":" + std::to_string(lineno)});
        continue;
      }
      table.clear();
      if (line.find("wmma_pipelined with block tile #I") != std::string::npos ||
          line.find("'wmma_pipelined #I'") != std::string::npos)
        table = "wmma_pipelined";
      else if (line.find("'wgmma #I'") != std::string::npos)
        table = "wgmma";
      else if (line.find("'wgmma_tma #I'") != std::string::npos)
        table = "wgmma_tma";
    }
  }
  return out;
}

TEST(TileNumbers, EveryTileACommittedResultNamesIsStillThatTile) {
  const std::vector<LegendEntry> legends = committed_legends();
  std::map<std::string, int> seen;
  for (const LegendEntry& e : legends) {
    SCOPED_TRACE(e.where);
    ++seen[e.table];
    std::string now;
    if (e.table == "wmma_pipelined") {
      ASSERT_LT(e.index, tiles::kBigTileCount) << "wmma_pipelined_tiles.h lost tile #" << e.index;
      now = tiles::describe(tiles::kBigTiles[e.index]);
    } else if (e.table == "wgmma") {
      ASSERT_LT(e.index, wl::kTileCount) << "wgmma_layout.h lost tile #" << e.index;
      now = hl::bench::describe_wgmma(wl::kTiles[e.index], "2 warpgroups");
    } else {
      ASSERT_LT(e.index, tp::kTileCount) << "wgmma_tma_plan.h lost tile #" << e.index;
      now = hl::bench::describe_wgmma(tp::kTiles[e.index], "a producer and 2 consumer warpgroups");
    }
    EXPECT_EQ(now, e.said) << e.table << " #" << e.index
                           << " was measured as the tile on the right; add a new entry instead of changing it";
  }
  // The H100 runs of 2026-11-27 swept every table: a parser that found nothing would pass the loop above.
  EXPECT_GE(seen["wmma_pipelined"], 19);
  EXPECT_GE(seen["wgmma"], 4);
  EXPECT_GE(seen["wgmma_tma"], 4);
}

// A change in one field, with every other field as in `base`.
tiles::Tile with(tiles::Tile base, int stages, int cluster_m, int cluster_n, bool ahead) {
  base.stages = stages;
  base.cluster_m = cluster_m;
  base.cluster_n = cluster_n;
  base.ahead = ahead;
  return base;
}

bool same(const tiles::Tile& a, const tiles::Tile& b) {
  return a.bm == b.bm && a.bn == b.bn && a.bk == b.bk && a.warps_m == b.warps_m && a.warps_n == b.warps_n &&
         a.stages == b.stages && a.lean == b.lean && a.cluster_m == b.cluster_m && a.cluster_n == b.cluster_n &&
         a.ahead == b.ahead;
}

// The entries no committed legend names yet (#19-#23, added 2026-11-28 and 2026-11-29) are what their
// comments in wmma_pipelined_tiles.h say: each is an earlier tile with one thing changed, so that its
// measurement, when it comes, compares with that tile's. The own tile is #12, entry 0's lean-copy twin.
TEST(TileNumbers, TheTilesNotYetTimedAreWhatTheirCommentsSay) {
  ASSERT_EQ(tiles::kBigTileCount, 24);
  const auto& t = tiles::kBigTiles;
  EXPECT_EQ(tiles::kOwnTile, 12);
  tiles::Tile lean0 = t[0];
  lean0.lean = true;
  EXPECT_TRUE(same(t[12], lean0));
  // 19: #12 with 5 stages in clusters of 2 along M sharing B; 20: clusters of 2 x 2 sharing A and B.
  EXPECT_TRUE(same(t[19], with(t[12], 5, 2, 1, false))) << tiles::describe(t[19]);
  EXPECT_TRUE(same(t[20], with(t[12], 5, 2, 2, false))) << tiles::describe(t[20]);
  EXPECT_EQ(tiles::describe(t[19]),
            "128x128x32, 2x4 warps of 64x32, 5 stages, lean copy, clusters of 2 along M sharing B");
  EXPECT_EQ(tiles::describe(t[20]),
            "128x128x32, 2x4 warps of 64x32, 5 stages, lean copy, clusters of 2 x 2 sharing A and B");
  // 21-23: #12, #13 and #17 with the next K step's fragments loaded ahead, nothing else changed.
  const int bases[] = {12, 13, 17};
  for (int i = 0; i < 3; ++i) {
    const tiles::Tile& base = t[bases[i]];
    EXPECT_TRUE(same(t[21 + i], with(base, base.stages, 1, 1, true))) << "#" << 21 + i << " against #" << bases[i];
    EXPECT_EQ(tiles::describe(t[21 + i]), tiles::describe(base) + ", fragments ahead");
  }
}

// describe() names every field a legend needs, also for a cluster along N alone, which no entry has yet.
TEST(TileNumbers, DescribeNamesEveryField) {
  EXPECT_EQ(tiles::describe({64, 32, 16, 4, 1, 2}), "64x32x16, 4x1 warps of 16x32, 2 stages");
  EXPECT_EQ(tiles::describe({128, 128, 32, 2, 4, 5, true, 1, 2}),
            "128x128x32, 2x4 warps of 64x32, 5 stages, lean copy, clusters of 2 along N sharing A");
  EXPECT_EQ(tiles::describe({128, 64, 64, 2, 2, 3, false, 4, 1, true}),
            "128x64x64, 2x2 warps of 64x32, 3 stages, fragments ahead, clusters of 4 along M sharing B");
}

}  // namespace
