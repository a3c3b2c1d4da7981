// A model of an mbarrier for the CPU tests that play a kernel's barrier schedule (test_wgmma_tma_plan.cpp,
// test_cluster_share.cpp), as the PTX ISA describes it: a phase completes when its pending arrivals reach
// zero and its transaction count is zero; then the next phase starts with the full arrival count.
// try_wait.parity(p) succeeds when the phase of parity p has completed, i.e. the current (incomplete)
// phase has the other parity. `completed` counts phases, so that a test can tell which one a waiter
// really saw.
#pragma once

#include <cstdint>

namespace hl::test {

struct MBarrier {
  int arrivals = 0, pending = 0;
  int64_t tx = 0;
  int64_t completed = 0;
  void init(int n) { arrivals = pending = n; }
  void settle() {
    if (pending == 0 && tx == 0) {
      ++completed;
      pending = arrivals;
    }
  }
  void arrive(int n = 1) {
    pending -= n;
    settle();
  }
  void expect_tx(int64_t bytes) { tx += bytes; }
  void complete_tx(int64_t bytes) {
    tx -= bytes;
    settle();
  }
  bool try_wait_parity(uint32_t parity) const { return static_cast<uint32_t>(completed & 1) != parity; }
};

}  // namespace hl::test
