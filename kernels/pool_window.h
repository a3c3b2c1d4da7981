// Window arithmetic shared by the CPU pooling reference (kernels/cpu/pool_cpu.cpp) and the CUDA
// kernels (kernels/cuda/pool.cu), host and device (HL_HOST_DEVICE, kernels/half.h), so that both
// backends visit the same elements in the same order: the CPU stays a bit-exact reference for the
// GPU's f32 window sums and for the max-pool tie and NaN rules (kernels/pool.h has the semantics).
#pragma once
#include <cstdint>

#include "kernels/half.h"
#include "kernels/pool.h"

namespace hl::kernels {

// Calls f(h, w) for every element of output window (p, q) that lies inside the input plane (padding
// is skipped), in row-major window order: the order the max-pool tie rule is defined in.
template <class F>
HL_HOST_DEVICE void for_each_in_window(const Pool2dShape& s, int64_t p, int64_t q, F&& f) {
  for (int64_t r = 0; r < s.kh; ++r) {
    const int64_t h = p * s.stride_h - s.pad_h + r;
    if (h < 0 || h >= s.H) continue;
    for (int64_t c = 0; c < s.kw; ++c) {
      const int64_t w = q * s.stride_w - s.pad_w + c;
      if (w >= 0 && w < s.W) f(h, w);
    }
  }
}

// The output windows along one axis that contain input row (or column) h: p with
// p*stride - pad <= h <= p*stride - pad + k - 1, clipped to [0, P).
HL_HOST_DEVICE void windows_containing(int64_t h, int64_t k, int64_t stride, int64_t pad, int64_t P, int64_t& lo,
                                       int64_t& hi) {
  const int64_t top = h + pad - k + 1;  // smallest p*stride
  lo = top <= 0 ? 0 : (top + stride - 1) / stride;
  const int64_t last = (h + pad) / stride;
  hi = last < P - 1 ? last : P - 1;
}

// Calls f(p, q) for every output window containing input element (h, w), in row-major output order:
// the backward passes gather over these instead of scattering with atomics (deterministic).
template <class F>
HL_HOST_DEVICE void for_each_window_containing(const Pool2dShape& s, int64_t h, int64_t w, F&& f) {
  int64_t p0, p1, q0, q1;
  windows_containing(h, s.kh, s.stride_h, s.pad_h, s.P(), p0, p1);
  windows_containing(w, s.kw, s.stride_w, s.pad_w, s.Q(), q0, q1);
  for (int64_t p = p0; p <= p1; ++p)
    for (int64_t q = q0; q <= q1; ++q) f(p, q);
}

// One step of the max-pool rule: value v at plane position pos meets the running (best, where),
// where < 0 meaning "nothing seen yet". Strictly greater wins, so on a tie the first maximum stays;
// a NaN always takes over and then stays (the first NaN wins), so an overflow stays visible to the
// loss scaler (paper §3.2).
template <class C>
HL_HOST_DEVICE void max_pool_take(C v, int32_t pos, C& best, int32_t& where) {
  if (best != best) return;  // a NaN already won
  if (where < 0 || v > best || v != v) {
    best = v;
    where = pos;
  }
}

}  // namespace hl::kernels
