// The GEMM rungs' tuning hooks (big_tile_for_tuning, k_step_for_tuning, batched_copy_for_tuning,
// lean_copy_for_tuning): process-wide settings that `bench/gemm_bench --sweep` and the tests change
// for one scope, so that a candidate runs without becoming the rung's own. Plain C++.
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

}  // namespace hl::kernels
