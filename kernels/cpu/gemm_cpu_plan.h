// How the blocked CPU GEMM (kernels/cpu/gemm_cpu.cpp) cuts a product into cache blocks and tasks, and
// whether it starts threads. These choices set the time and the memory a GEMM takes; every result is
// right whatever they give, as long as the blocks cover the problem. They live in a header of their own
// so that the tests can check them directly (tests/kernels/test_gemm_cpu_plan.cpp): a budget that is
// wrong shows up nowhere else.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hl::kernels::cpu::gemm_plan {

// kc: depth of one packed block; a kc x NR sliver of B (32 KiB at kc = 256 with NR = 32) stays in L1
//     while every sliver of A passes by. K is split into equal blocks so none is a thin tail.
// mc: rows of A per task (mc x kc floats = 96 KiB: in L2 next to the B slivers).
// nt: columns of C per task; with mc it sets the task size (enough tasks to balance two threads on
//     the training shapes; big enough that re-packing A once per task is cheap).
// nc: columns of B packed at once, all of K: as many as fit in kMaxPackedB values (16 MiB of f32),
//     but at least one task's worth. The packed copy is kept for the next call (gemm_cpu.cpp's scratch()).
constexpr int64_t kMaxKC = 256;
constexpr int64_t kMaxMC = 96;   // rounded to a multiple of MR
constexpr int64_t kMaxNT = 256;  // rounded to a multiple of NR
constexpr int64_t kMaxPackedB = int64_t{1} << 22;
// Below this many multiply-adds, starting threads costs more than it saves.
constexpr int64_t kMinParallelWork = int64_t{1} << 20;

// a / b rounded up, for a >= 0 and b >= 1.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
// Split n >= 1 into as few blocks of at most max_block as possible, all of one size (the last may be
// shorter), rounded up to a multiple of unit.
inline int64_t even_block(int64_t n, int64_t max_block, int64_t unit) {
  return round_up(ceil_div(n, ceil_div(n, max_block)), unit);
}

// The blocking of one M x N x K product for a micro-kernel of MR x NR (all sizes >= 1).
struct Blocking {
  int64_t kc_step, k_blocks;  // K in k_blocks blocks of kc_step (the last may be shorter)
  int64_t mc_step, m_tasks;   // M in m_tasks tasks of mc_step rows
  int64_t nt_step;            // columns of C per task
  int64_t nc_step;            // columns of B packed at once: a multiple of nt_step
  int64_t packed_b;           // values of the packed panel of op(B): K x (nc_step or N, whole slivers)
  bool parallel;              // worth starting threads for
};

inline Blocking blocking(int64_t M, int64_t N, int64_t K, int64_t MR, int64_t NR) {
  Blocking b{};
  b.kc_step = even_block(K, kMaxKC, 1);
  b.k_blocks = ceil_div(K, b.kc_step);
  b.mc_step = even_block(M, kMaxMC, MR);
  b.m_tasks = ceil_div(M, b.mc_step);
  b.nt_step = even_block(N, kMaxNT, NR);
  b.nc_step = std::min(round_up(N, b.nt_step), std::max<int64_t>(1, kMaxPackedB / K / b.nt_step) * b.nt_step);
  b.packed_b = K * round_up(std::min(b.nc_step, N), NR);
  b.parallel = M * N * K >= kMinParallelWork;
  return b;
}

}  // namespace hl::kernels::cpu::gemm_plan
