// Tuning hooks: process-wide settings that a benchmark and the tests change for one scope, so that a
// candidate (or the path a kernel replaced) runs without becoming the default. The GEMM rungs'
// (big_tile_for_tuning, k_step_for_tuning, batched_copy_for_tuning, lean_copy_for_tuning, ...), set by
// `bench/gemm_bench --sweep`, and reduce_sum's channel path (reduce_plan.h), set by `bench/reduce_bench`.
// Plain C++.
#pragma once

#include <atomic>

namespace hl::kernels {

// `hook` set to `value` for one scope, and back to what it was however the scope ends (an exception, a
// failed test assertion).
template <class T>
class ScopedHook {
 public:
  ScopedHook(std::atomic<T>& hook, T value) : hook_(hook), saved_(hook.exchange(value)) {}
  ~ScopedHook() { hook_.store(saved_); }
  ScopedHook(const ScopedHook&) = delete;
  ScopedHook& operator=(const ScopedHook&) = delete;

 private:
  std::atomic<T>& hook_;
  T saved_;
};

// A choice between two ways of doing the same work (wmma_smem's batched copy, mma_sync's lean copy,
// reduce_sum's channel path, rungs 4 and 4b's tiled layout change): the hook holds -1, the code's own
// choice `own` (what training and the tests' default runs get), or 0 / 1 to force the old way or the
// new one for one scope of the benchmark or a test.
inline bool chosen_by_hook(const std::atomic<int>& hook, bool own) {
  const int forced = hook.load(std::memory_order_relaxed);
  return forced < 0 ? own : forced != 0;
}

}  // namespace hl::kernels
