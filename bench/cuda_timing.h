// What the GPU benchmarks share: failing loudly on a CUDA error, uploads that have landed, the halfling
// stream, device buffers, the timing rule of DESIGN.md §6 (CUDA events after warm-up, the median of
// many samples, bench/stats.h), and the L2 cache the copy-bandwidth yardstick is read against (with
// fits_in_l2 and l2_note, bench/stats.h).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <vector>

#include "bench/stats.h"
#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/runtime.h"

namespace hl::bench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A host-to-device copy that has landed when this returns. cudaMemcpy from pageable memory may return
// once the data is staged, before the DMA ends, and it is ordered on the legacy stream, which the
// non-blocking halfling stream does not wait for: the device-wide wait covers both.
inline void upload(void* dst, const void* src, size_t bytes, const char* what) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), what);
  check(cudaDeviceSynchronize(), what);
}

// The first lines of a benchmark's output: the program, the GPU and the date, then the command
// (bench::command_line). Without a GPU it prints why and returns false (the caller then exits 0:
// nothing to benchmark is not a failure).
inline bool print_gpu_header(const char* program, int argc, const char* const* argv) {
  if (!runtime::cuda_available()) {
    std::printf("no CUDA device (%s): nothing to benchmark\n", runtime::cuda_unavailable_reason().c_str());
    return false;
  }
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("# %s  GPU: %s  date: %s\n%s\n", program, runtime::cuda_device_description().c_str(), date,
              command_line(argc, argv).c_str());
  return true;
}

inline cudaStream_t stream() { return static_cast<cudaStream_t>(runtime::cuda_stream()); }

// Median over `samples` of the time per call, each sample timing `reps` back-to-back calls between two
// events (so a launch-bound kernel is not drowned by event overhead). Warm-up first.
inline double median_us(const std::function<void()>& call, int samples, int reps) {
  for (int i = 0; i < 3; ++i) call();
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  std::vector<double> t;
  for (int s = 0; s < samples; ++s) {
    check(cudaEventRecord(a, stream()), "record");
    for (int r = 0; r < reps; ++r) call();
    check(cudaEventRecord(b, stream()), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(1000.0 * ms / reps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// The L2 cache of the current device, in bytes (0 if the runtime does not say).
inline int64_t l2_bytes() {
  int dev = 0, bytes = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, dev), "cudaDeviceGetAttribute(L2 size)");
  return bytes;
}

// The header lines that say what fits_in_l2 and l2_note (bench/stats.h) do, with this GPU's L2 size.
inline void print_l2_legend(int64_t l2) {
  std::printf("# L2 cache: %.1f MB (%.0f MiB). 'ws MB' = the row's working set (the tensors it reads and writes,\n"
              "# in MB of 10^6 bytes), 'copy MB' = its yardstick's; a set 'fits' the L2 at <= 3/4 of it. A row\n"
              "# where exactly one fits ends with an 'L2: ...' note: its %%copy then compares a rate from the L2\n"
              "# with one from device memory, not like with like.\n",
              static_cast<double>(l2) / 1e6, static_cast<double>(l2) / (1 << 20));
}

// n random values in [lo, hi), in steps of 1/1000 (xorshift64 from `state`, a fixed seed so that every
// run times the same data), stored as f16 or f32 at dst, and landed when this returns.
inline void upload_random(void* dst, size_t n, DType t, uint64_t state, float lo, float hi) {
  const uint64_t steps = static_cast<uint64_t>((hi - lo) * 1000.0f);
  auto rnd = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<float>((state >> 11) % steps) / 1000.0f + lo;
  };
  if (t == DType::f16) {
    std::vector<uint16_t> h(n);
    for (auto& v : h) v = float_to_half_bits(rnd());
    upload(dst, h.data(), n * 2, "upload");
  } else {
    std::vector<float> h(n);
    for (auto& v : h) v = rnd();
    upload(dst, h.data(), n * 4, "upload");
  }
}

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) : p(runtime::cuda_malloc(std::max<size_t>(bytes, 16))) {}
  ~Buf() { runtime::cuda_free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

}  // namespace hl::bench
