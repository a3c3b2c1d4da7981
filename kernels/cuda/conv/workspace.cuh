// Scratch device memory for the convolution rungs that need it (im2col_gemm's X_col and FP32 GEMM
// results, implicit_gemm_wmma's split-K partial sums).
//
// Device memory from the framework's caching allocator (framework/device.h) is out of reach of
// kernels/, so the rungs share one cached, grow-only buffer from runtime::cuda_malloc: after the first
// calls of a training run it never allocates again (a cudaMalloc per call would synchronize the device
// and cost more than a small layer's whole convolution). cudaMallocAsync on the halfling stream would
// also be stream-ordered, but its pool hands memory back to the driver at synchronizations unless its
// release threshold is tuned; one cached buffer is simpler to reason about. The price: the largest
// workspace any call needed stays allocated until the process exits.
//
// Safety: all kernels run on the one halfling stream, so a call's kernels are ordered after the
// previous call's and may reuse the buffer. The mutex is held while a call queues its kernels, so two
// host threads cannot interleave theirs on it; before a larger buffer replaces the old one the stream
// is drained, since queued kernels may still read the old one.
#pragma once
#include <cstddef>
#include <mutex>

#include "kernels/runtime.h"

namespace hl::kernels::cuda::conv_detail {

struct Workspace {
  std::mutex mu;
  void* ptr = nullptr;
  size_t bytes = 0;

  // At least `want` bytes; call with mu held.
  void* reserve(size_t want) {
    if (want > bytes) {
      if (ptr != nullptr) {
        runtime::cuda_synchronize();
        runtime::cuda_free(ptr);
        ptr = nullptr;
        bytes = 0;
      }
      ptr = runtime::cuda_malloc(want);
      bytes = want;
    }
    return ptr;
  }
};

// One instance for the whole library (an inline function's static). Never freed: destroying it at
// exit could run after the CUDA runtime has shut down.
inline Workspace& workspace() {
  static Workspace* ws = new Workspace();
  return *ws;
}

}  // namespace hl::kernels::cuda::conv_detail
