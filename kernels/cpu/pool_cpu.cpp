// CPU pooling (kernels/pool.h has the semantics): the reference for the CUDA kernels.
#include <cmath>
#include <limits>

#include "kernels/cnn_backends.h"
#include "kernels/cpu/cpu_common.h"

namespace hl::kernels::cpu {

namespace {

// The rows (or columns) of output windows that contain input row h: p with
// p*stride - pad <= h <= p*stride - pad + k - 1, clipped to [0, P).
inline void windows_containing(int64_t h, int64_t k, int64_t stride, int64_t pad, int64_t P, int64_t& lo,
                               int64_t& hi) {
  const int64_t top = h + pad - k + 1;  // smallest p*stride
  lo = top <= 0 ? 0 : (top + stride - 1) / stride;
  hi = std::min<int64_t>((h + pad) / stride, P - 1);
}

}  // namespace

void max_pool2d_forward(const Pool2dShape& s, const void* x, void* y, int32_t* argmax, DType t) {
  visit_floating(t, "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C;
#pragma omp parallel for if (planes * P * Q > kParallelThreshold)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* in = px + pl * s.H * s.W;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          C best = -std::numeric_limits<C>::infinity();
          int32_t where = -1;
          for (int64_t r = 0; r < s.kh; ++r) {
            const int64_t h = p * s.stride_h - s.pad_h + r;
            if (h < 0 || h >= s.H) continue;
            for (int64_t c = 0; c < s.kw; ++c) {
              const int64_t w = q * s.stride_w - s.pad_w + c;
              if (w < 0 || w >= s.W) continue;
              const C v = load(in, h * s.W + w);
              if (best != best) continue;  // a NaN already won: the first NaN stays
              // Strictly greater: on a tie the first maximum stays. A NaN always takes over.
              if (where < 0 || v > best || v != v) {
                best = v;
                where = static_cast<int32_t>(h * s.W + w);
              }
            }
          }
          const int64_t o = (pl * P + p) * Q + q;
          store(py, o, best);
          argmax[o] = where;
        }
    }
  });
}

void max_pool2d_backward(const Pool2dShape& s, const void* dy, const int32_t* argmax, void* dx, DType t) {
  visit_floating(t, "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* pdy = static_cast<const T*>(dy);
    T* pdx = static_cast<T*>(dx);
    const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C;
#pragma omp parallel for if (planes * s.H * s.W > kParallelThreshold)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t w = 0; w < s.W; ++w) {
          int64_t p0, p1, q0, q1;
          windows_containing(h, s.kh, s.stride_h, s.pad_h, P, p0, p1);
          windows_containing(w, s.kw, s.stride_w, s.pad_w, Q, q0, q1);
          C acc = 0;
          const int32_t me = static_cast<int32_t>(h * s.W + w);
          for (int64_t p = p0; p <= p1; ++p)
            for (int64_t q = q0; q <= q1; ++q) {
              const int64_t o = (pl * P + p) * Q + q;
              if (argmax[o] == me) acc += load(pdy, o);
            }
          store(pdx, (pl * s.H + h) * s.W + w, acc);
        }
  });
}

void avg_pool2d_forward(const Pool2dShape& s, const void* x, void* y, DType t) {
  visit_floating(t, "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C;
    const C inv = C(1) / static_cast<C>(s.kh * s.kw);
#pragma omp parallel for if (planes * P * Q > kParallelThreshold)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* in = px + pl * s.H * s.W;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          C acc = 0;
          for (int64_t r = 0; r < s.kh; ++r) {
            const int64_t h = p * s.stride_h - s.pad_h + r;
            if (h < 0 || h >= s.H) continue;
            for (int64_t c = 0; c < s.kw; ++c) {
              const int64_t w = q * s.stride_w - s.pad_w + c;
              if (w >= 0 && w < s.W) acc += load(in, h * s.W + w);
            }
          }
          store(py, (pl * P + p) * Q + q, acc * inv);
        }
    }
  });
}

void avg_pool2d_backward(const Pool2dShape& s, const void* dy, void* dx, DType t) {
  visit_floating(t, "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* pdy = static_cast<const T*>(dy);
    T* pdx = static_cast<T*>(dx);
    const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C;
    const C inv = C(1) / static_cast<C>(s.kh * s.kw);
#pragma omp parallel for if (planes * s.H * s.W > kParallelThreshold)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t w = 0; w < s.W; ++w) {
          int64_t p0, p1, q0, q1;
          windows_containing(h, s.kh, s.stride_h, s.pad_h, P, p0, p1);
          windows_containing(w, s.kw, s.stride_w, s.pad_w, Q, q0, q1);
          C acc = 0;
          for (int64_t p = p0; p <= p1; ++p)
            for (int64_t q = q0; q <= q1; ++q) acc += load(pdy, (pl * P + p) * Q + q);
          store(pdx, (pl * s.H + h) * s.W + w, acc * inv);
        }
  });
}

}  // namespace hl::kernels::cpu
