// Grow-only device scratch memory for kernels that need temporary space: the convolution rungs'
// workspaces, CUB's temporary storage, cuBLAS's FP32 epilogue buffer, the optimizer's partial sums.
//
// Device memory from the framework's caching allocator (framework/device.h) is out of reach of
// kernels/, so each user keeps one cached buffer from runtime::cuda_malloc that only ever grows:
// after the first calls of a training run it never allocates again (a cudaMalloc per call would
// synchronize the device and cost more than a small layer's kernels). The price: the largest size
// any call needed stays allocated until the process exits.
//
// Safety: all kernels run on the one halfling stream, so a call's kernels are ordered after the
// previous call's and may reuse the buffer. Hold `mu` while a call queues its kernels, so two host
// threads cannot interleave theirs on it. Before a larger buffer replaces the old one the stream is
// drained, since queued kernels may still read the old one; and the old one is forgotten before the
// new one is allocated, so an out-of-memory error leaves an empty buffer, never a dangling one that
// the next call would write into.
#pragma once
#include <cstddef>
#include <mutex>

#include "kernels/runtime.h"

namespace hl::kernels::cuda {

struct Scratch {
  std::mutex mu;
  void* ptr = nullptr;
  size_t bytes = 0;

  // At least `want` bytes; call with mu held.
  void* reserve(size_t want) {
    if (want > bytes) {
      if (ptr != nullptr) {
        runtime::cuda_synchronize();
        void* old = ptr;
        ptr = nullptr;
        bytes = 0;
        runtime::cuda_free(old);
      }
      ptr = runtime::cuda_malloc(want);
      bytes = want;
    }
    return ptr;
  }
};

}  // namespace hl::kernels::cuda
