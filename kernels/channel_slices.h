// How a per-channel reduction on the GPU is cut into slices, one block each: batch norm's `split`
// variant (batchnorm.h) and reduce_sum's channel path (reduce_plan.h) sum each channel's vectors this
// way. Plain C++ (the plans are made on the host and checked by CPU tests).
#pragma once
#include <algorithm>
#include <cstdint>

namespace hl::kernels {

struct ChannelSlices {
  int64_t count = 1;  // blocks per channel
  int64_t chunk = 0;  // vectors per block (the last block of a channel may have fewer; none has none)
};

// `vectors` per channel, `channels` of them, on a GPU with `sm_count` SMs and blocks of `threads`: enough
// blocks for about four per SM over all channels, but never so many that a thread gets fewer than 8
// vectors to sum, so a small reduction is not split into slivers.
inline ChannelSlices slice_channels(int64_t vectors, int64_t channels, int sm_count, int threads) {
  const int64_t wanted =
      std::max<int64_t>(1, (4 * static_cast<int64_t>(sm_count) + channels - 1) / std::max<int64_t>(channels, 1));
  const int64_t most = std::max<int64_t>(1, vectors / (8 * static_cast<int64_t>(threads)));
  const int64_t blocks = std::min(wanted, most);
  ChannelSlices s;
  s.chunk = (vectors + blocks - 1) / blocks;
  s.count = s.chunk > 0 ? (vectors + s.chunk - 1) / s.chunk : 1;  // no empty slice
  return s;
}

}  // namespace hl::kernels
