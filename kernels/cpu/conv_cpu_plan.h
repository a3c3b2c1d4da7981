// How the CPU convolution's im2col variant (kernels/cpu/conv_cpu.cpp) cuts its work: how many images
// one chunk unfolds, in how many groups the weight gradient adds up its chunks, and whether the threads
// take whole chunks. These choices set the time and the memory a convolution takes, not its result:
// the bits depend on the shapes alone, never on the thread count (ConvCpuRegistry.
// Im2colGivesTheSameBitsAtEveryThreadCount). They live in a header of their own so that the tests can
// check the budgets directly (tests/kernels/test_conv_cpu_plan.cpp): a budget that is wrong shows up
// nowhere else, since every result stays right.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hl::kernels::cpu::conv_plan {

// Chunks are small on purpose: X_col of one chunk and the GEMM's packed copy of it (kernels/cpu/
// gemm_cpu.cpp packs B before use) should both stay in the core's L2 cache (1-2 MiB on current x86).
// With 16 MiB chunks (the first version) every im2col write, packing read and packing write went to
// L3 or DRAM: a third of LeNet's CPU time (docs/performance.md, "CPU path").
constexpr int64_t kColBudget = int64_t{1} << 17;  // elements of X_col per chunk (512 KiB in f32)

// Images per chunk: as many as X_col's budget holds, at col_per_image = C*R*S*P*Q values each; at
// least one (an image larger than the budget is a chunk alone), at most the batch of N >= 1.
inline int64_t chunk_images(int64_t N, int64_t col_per_image) {
  return std::clamp<int64_t>(kColBudget / std::max<int64_t>(col_per_image, 1), 1, N);
}

// The weight gradient sums over every chunk in groups fixed by the shapes alone: group g adds its
// chunks in order, then the groups are added in order, so the bits do not depend on which thread ran
// which group. As many groups as chunks (up to kMaxGroups), within the memory budget of the groups'
// partial sums (dw_size = K*C*R*S values each). One group is the plain running sum.
constexpr int64_t kGroupBudget = int64_t{1} << 20;  // elements of all groups' partial dW (4 MiB in f32)
constexpr int64_t kMaxGroups = 64;

inline int64_t weight_groups(int64_t n_chunks, int64_t dw_size) {
  return std::clamp<int64_t>(kGroupBudget / std::max<int64_t>(dw_size, 1), 1, std::min(n_chunks, kMaxGroups));
}

// Units of work (chunks, or groups of chunks) are shared among `threads` threads only when every
// thread gets at least two, for balance; otherwise they run in turn and each GEMM uses the threads.
// (Inside a parallel region `threads` is 1: a nested region would get one thread anyway.)
inline bool share_by_chunk(int64_t units, int64_t threads) { return threads > 1 && units >= 2 * threads; }

}  // namespace hl::kernels::cpu::conv_plan
