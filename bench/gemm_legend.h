// How `gemm_bench --sweep` names a Hopper rung's tile in the legend under its table (wgmma_layout.h's and
// wgmma_tma_plan.h's tables), in plain C++: tests/bench/test_tile_numbers.cpp reads the committed legends
// back against the tables with the same words (wmma_pipelined's tiles have their own, tiles::describe).
#pragma once
#include <string>

namespace hl::bench {

// "128x<bn>x64, <warpgroups>, <stages> stages, <in_flight> wgmma group in flight".
template <class TileConfig>
std::string describe_wgmma(const TileConfig& t, const std::string& warpgroups) {
  return "128x" + std::to_string(t.bn) + "x64, " + warpgroups + ", " + std::to_string(t.stages) + " stages, " +
         std::to_string(t.in_flight) + " wgmma group in flight";
}

}  // namespace hl::bench
