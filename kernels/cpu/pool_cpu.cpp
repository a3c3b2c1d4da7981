// CPU pooling (kernels/pool.h has the semantics): the reference for the CUDA kernels. The general
// paths (any window, stride and padding) are the definition; max pooling has fast paths for the
// common cases, which must agree with them bit for bit.
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cnn_backends.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/pool_window.h"

namespace hl::kernels::cpu {

namespace {

// The 2x2 window with stride 2 and no padding (LeNet's, VGG's): every window lies inside the plane, so
// the four values are read without bounds tests, in the same row-major order and by the same rule
// (max_pool_take in kernels/pool_window.h) as the general path below: the same maximum, the same
// argmax on ties and NaN, bit for bit (tests/kernels/test_cnn_cpu.cpp compares the two). The general
// path visits each window through a lambda with two bounds tests per element, and branches on every
// comparison: LeNet spent 8% of its CPU time there.
bool is_2x2_stride2(const Pool2dShape& s) {
  return s.kh == 2 && s.kw == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 0 && s.pad_w == 0;
}

// Windows that do not overlap (stride >= window, no padding: every window holds at least one element)
// send each input element's gradient to at most one output: the backward pass is then a zero fill and
// one store per output, instead of a search over the windows containing every input element.
bool windows_disjoint(const Pool2dShape& s) {
  return s.stride_h >= s.kh && s.stride_w >= s.kw && s.pad_h == 0 && s.pad_w == 0;
}

// max_pool_take's rule without branches: the first element starts the window; a later one takes over
// if it is greater or a NaN, unless a NaN already holds it. Written with & and | (no short circuit)
// and selects: the general path's branches mispredict on random data.
template <class C>
inline void take_if_wins(C& best, int32_t& where, C v, int32_t at) {
  const bool wins = (best == best) & ((v > best) | (v != v));
  best = wins ? v : best;
  where = wins ? at : where;
}

// One output row of 2x2 windows, one window at a time. r0 and r1 are the window's two input rows,
// `base` the plane index of r0's first element, W the input row length.
template <class T>
void max_pool_2x2_row(const T* __restrict r0, const T* __restrict r1, T* __restrict o, int32_t* __restrict a,
                      int64_t q0, int64_t Q, int32_t base, int32_t W) {
  using C = compute_t<T>;
  for (int64_t q = q0; q < Q; ++q) {
    const int32_t i0 = base + static_cast<int32_t>(2 * q);
    C best = load(r0, 2 * q);
    int32_t where = i0;
    take_if_wins(best, where, load(r0, 2 * q + 1), i0 + 1);
    take_if_wins(best, where, load(r1, 2 * q), i0 + W);
    take_if_wins(best, where, load(r1, 2 * q + 1), i0 + W + 1);
    store(o, q, best);
    a[q] = where;
  }
}

// f32: four windows at a time in 128-bit vectors (GCC's vector extension: SSE2 on any x86-64, NEON on
// ARM, so no run-time dispatch). The compilers do not vectorize the loop above by themselves (the
// stride-2 loads, g++ 12 and clang 14): it cost LeNet 8% of its one-thread training time. Eight
// consecutive inputs of a row are split into the windows' left (even) and right (odd) columns by a
// shuffle; the rule is the same, in the same order, with a comparison mask per lane and selects as bit
// operations, so the maximum and the argmax are the scalar loop's, bit for bit (NaN, ties, -0).
inline void take_if_wins(f32x4& best, i32x4& where, f32x4 v, i32x4 at) {
  const i32x4 wins = (best == best) & ((v > best) | (v != v));  // lanes of all ones or all zeros
  best = reinterpret_cast<f32x4>((reinterpret_cast<i32x4>(v) & wins) | (reinterpret_cast<i32x4>(best) & ~wins));
  where = (at & wins) | (where & ~wins);
}

void max_pool_2x2_row(const float* __restrict r0, const float* __restrict r1, float* __restrict o,
                      int32_t* __restrict a, int64_t q0, int64_t Q, int32_t base, int32_t W) {
  int64_t q = q0;
  for (; q + 4 <= Q; q += 4) {  // inputs 2q .. 2q+7 < 2Q <= W: inside the row
    f32x4 top_lo, top_hi, bottom_lo, bottom_hi;
    std::memcpy(&top_lo, r0 + 2 * q, 16), std::memcpy(&top_hi, r0 + 2 * q + 4, 16);
    std::memcpy(&bottom_lo, r1 + 2 * q, 16), std::memcpy(&bottom_hi, r1 + 2 * q + 4, 16);
    const i32x4 i0 = base + static_cast<int32_t>(2 * q) + i32x4{0, 2, 4, 6};
    f32x4 best = __builtin_shufflevector(top_lo, top_hi, 0, 2, 4, 6);
    i32x4 where = i0;
    take_if_wins(best, where, __builtin_shufflevector(top_lo, top_hi, 1, 3, 5, 7), i0 + 1);
    take_if_wins(best, where, __builtin_shufflevector(bottom_lo, bottom_hi, 0, 2, 4, 6), i0 + W);
    take_if_wins(best, where, __builtin_shufflevector(bottom_lo, bottom_hi, 1, 3, 5, 7), i0 + W + 1);
    std::memcpy(o + q, &best, 16), std::memcpy(a + q, &where, 16);
  }
  max_pool_2x2_row<float>(r0, r1, o, a, q, Q, base, W);  // the last Q % 4 windows
}

// f16: the two input rows are widened into floats (exactly), the f32 row above runs on them, and the
// maxima are rounded back, which is exact too, since each is one of the inputs. The same values, in the
// same order, by the same rule as the scalar loop, which widens and rounds one value at a time: the
// same bits (tests/kernels/test_cnn_cpu.cpp checks). One value at a time, the conversions had made the
// f16 version cost three times the f32 one.
void max_pool_2x2_row(const half* __restrict r0, const half* __restrict r1, half* __restrict o,
                      int32_t* __restrict a, int64_t q0, int64_t Q, int32_t base, int32_t W) {
  thread_local std::vector<float> buf;
  const int64_t n = 2 * Q;  // the inputs the windows read, of each row
  if (static_cast<int64_t>(buf.size()) < 2 * n + Q) buf.resize(static_cast<size_t>(2 * n + Q));
  float* __restrict top = buf.data();
  float* __restrict bottom = top + n;
  float* __restrict out = bottom + n;
  widen_f16_run(r0, top, n);  // the run converters: F16C where the CPU has it, the same bits as load()
  widen_f16_run(r1, bottom, n);
  max_pool_2x2_row(top, bottom, out, a, q0, Q, base, W);
  narrow_f16_run(out + q0, o + q0, Q - q0);
}

template <class T>
void max_pool_2x2_forward(const Pool2dShape& s, const T* px, T* py, int32_t* argmax) {
  const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C, W = s.W;
#pragma omp parallel for if (planes * P * Q > kParallelThreshold)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* in = px + pl * s.H * W;
    for (int64_t p = 0; p < P; ++p) {
      const T* r0 = in + 2 * p * W;
      max_pool_2x2_row(r0, r0 + W, py + (pl * P + p) * Q, argmax + (pl * P + p) * Q, 0, Q,
                       static_cast<int32_t>(2 * p * W), static_cast<int32_t>(W));
    }
  }
}

template <class T>
void max_pool_disjoint_backward(const Pool2dShape& s, const T* pdy, const int32_t* argmax, T* pdx) {
  using C = compute_t<T>;
  const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C, HW = s.H * s.W;
#pragma omp parallel for if (planes * HW > kParallelThreshold)
  for (int64_t pl = 0; pl < planes; ++pl) {
    T* dx = pdx + pl * HW;
    for (int64_t i = 0; i < HW; ++i) store(dx, i, C(0));
    for (int64_t o = pl * P * Q; o < (pl + 1) * P * Q; ++o) {
      // C(0) + dy, as the general path's sum over one window: -0 becomes +0 there too.
      if (argmax[o] >= 0) store(dx, argmax[o], C(0) + load(pdy, o));
    }
  }
}

}  // namespace

void max_pool2d_forward(const Pool2dShape& s, const void* x, void* y, int32_t* argmax, DType t) {
  if (is_2x2_stride2(s)) {
    visit_floating(t, "max_pool2d", [&](auto tag) {
      using T = decltype(tag);
      max_pool_2x2_forward(s, static_cast<const T*>(x), static_cast<T*>(y), argmax);
    });
    return;
  }
  max_pool2d_forward_general(s, x, y, argmax, t);
}

void max_pool2d_backward(const Pool2dShape& s, const void* dy, const int32_t* argmax, void* dx, DType t) {
  if (windows_disjoint(s)) {
    visit_floating(t, "max_pool2d_backward", [&](auto tag) {
      using T = decltype(tag);
      max_pool_disjoint_backward(s, static_cast<const T*>(dy), argmax, static_cast<T*>(dx));
    });
    return;
  }
  max_pool2d_backward_general(s, dy, argmax, dx, t);
}

void max_pool2d_forward_general(const Pool2dShape& s, const void* x, void* y, int32_t* argmax, DType t) {
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
          for_each_in_window(s, p, q, [&](int64_t h, int64_t w) {
            max_pool_take(load(in, h * s.W + w), static_cast<int32_t>(h * s.W + w), best, where);
          });
          const int64_t o = (pl * P + p) * Q + q;
          store(py, o, best);
          argmax[o] = where;
        }
    }
  });
}

void max_pool2d_backward_general(const Pool2dShape& s, const void* dy, const int32_t* argmax, void* dx, DType t) {
  visit_floating(t, "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* pdy = static_cast<const T*>(dy);
    T* pdx = static_cast<T*>(dx);
    // A local copy: clang rejects a lambda inside an OpenMP region that names a parameter of the
    // enclosing function ("reference to local variable declared in enclosing function").
    const int32_t* am = argmax;
    const int64_t P = s.P(), Q = s.Q(), planes = s.N * s.C;
#pragma omp parallel for if (planes * s.H * s.W > kParallelThreshold)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t w = 0; w < s.W; ++w) {
          C acc = 0;
          const int32_t me = static_cast<int32_t>(h * s.W + w);
          for_each_window_containing(s, h, w, [&](int64_t p, int64_t q) {
            const int64_t o = (pl * P + p) * Q + q;
            if (am[o] == me) acc += load(pdy, o);
          });
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
          for_each_in_window(s, p, q, [&](int64_t h, int64_t w) { acc += load(in, h * s.W + w); });
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
          C acc = 0;
          for_each_window_containing(s, h, w,
                                     [&](int64_t p, int64_t q) { acc += load(pdy, (pl * P + p) * Q + q); });
          store(pdx, (pl * s.H + h) * s.W + w, acc * inv);
        }
  });
}

}  // namespace hl::kernels::cpu
