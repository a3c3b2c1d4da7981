// Grow-only device scratch memory for kernels that need temporary space: the convolution rungs'
// workspaces, CUB's temporary storage, cuBLAS's FP32 epilogue buffer, the optimizer's partial sums.
//
// Device memory from the framework's caching allocator (framework/device.h) is out of reach of
// kernels/, so each user keeps one cached buffer from runtime::cuda_malloc that only ever grows:
// after the first calls of a training run it never allocates again (a cudaMalloc per call would
// synchronize the device and cost more than a small layer's kernels). The price: the largest size
// any call needed stays allocated until the process exits, or until the caching allocator runs out of
// memory and has the buffers no call is using freed (runtime::cuda_release_scratch).
//
// Safety: all kernels run on the one halfling stream, so a call's kernels are ordered after the
// previous call's and may reuse the buffer. Hold `mu` while a call queues its kernels, so two host
// threads cannot interleave theirs on it (and so that cuda_release_scratch leaves the buffer alone).
// Before a larger buffer replaces the old one the stream is drained, since queued kernels may still
// read the old one; and the old one is forgotten before the new one is allocated, so an out-of-memory
// error leaves an empty buffer, never a dangling one that the next call would write into.
//
// Out of memory: a buffer that cannot grow has the caching allocator's cached blocks given back, then
// tries once more (not while the thread records a CUDA graph, which cannot free memory). It does not
// free the other scratch buffers: a call may hold one buffer's lock while another grows (im2col_gemm
// keeps the convolution workspace while its GEMM grows the split-K one), and a thread must not try to
// lock a mutex it holds. The caching allocator's retry frees them instead (runtime::cuda_release_scratch).
//
// Host code only: nothing here runs on the device.
#pragma once
#include <cstddef>
#include <mutex>

#include "kernels/error.h"
#include "kernels/runtime.h"

namespace hl::kernels::cuda {

struct Scratch;
// The live scratch buffers, for runtime::cuda_release_scratch (kernels/cuda/runtime.cu keeps the list).
void register_scratch(Scratch* s);
void unregister_scratch(Scratch* s);
// Frees the buffer of every registered Scratch whose lock is free. Call from a thread that holds no
// Scratch's lock (it tries each one): the caching allocator's retry, since no tensor is allocated
// while a kernel call holds a scratch buffer.
void release_idle_scratch();

struct Scratch {
  std::mutex mu;
  void* ptr = nullptr;
  size_t bytes = 0;
  // The raw device memory functions: the runtime's, or a test's fake backend (the out-of-memory
  // retry is checked on the CPU: tests/framework/test_tensor.cpp).
  void* (*raw_alloc)(size_t) = runtime::cuda_malloc;
  void (*raw_free)(void*) = runtime::cuda_free;

  Scratch() { register_scratch(this); }
  ~Scratch() { unregister_scratch(this); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // At least `want` bytes; call with mu held.
  void* reserve(size_t want) {
    if (want > bytes) {
      if (ptr != nullptr) {
        // Refused here with the reason that fits, before cuda_synchronize would refuse the wait with
        // a hint about values read back to the host.
        HL_CHECK(!runtime::cuda_capturing(), "scratch buffer: must grow from ", bytes, " to ", want,
                 " bytes while this thread records a CUDA graph (framework/cuda_graph.h), but the old buffer "
                 "cannot be freed during a recording (cudaFree waits for the device, and the recording may "
                 "address it); run the step once without the graph first, so that the buffers reach their size");
        runtime::cuda_synchronize();
        release();
      }
      ptr = allocate(want);
      bytes = want;
    }
    return ptr;
  }

  // Frees the buffer (the next reserve allocates again); call with mu held.
  void release() {
    if (ptr == nullptr) return;
    void* old = ptr;
    ptr = nullptr;
    bytes = 0;
    raw_free(old);
  }

 private:
  void* allocate(size_t want) {
    try {
      return raw_alloc(want);
    } catch (const Error& e) {
      if (runtime::cuda_capturing())  // nothing can be freed during a recording to make room
        throw Error(detail::concat(e.what(), " (while this thread records a CUDA graph, where no cached memory "
                                             "can be given back; run the step once without the graph first)"));
    }
    runtime::cuda_release_cached_blocks();
    return raw_alloc(want);
  }
};

}  // namespace hl::kernels::cuda
