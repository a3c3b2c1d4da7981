// CPU convolution variants (kernels/conv.h has the semantics).
//
//   reference  direct loops over every output element and every tap: the readable definition that
//              every other variant (CPU and CUDA) is tested against.
//   im2col     unfold the input into the im2col matrix X_col[(c,r,s), (n,p,q)] and hand the
//              products to the blocked CPU GEMM (kernels::gemm), so that LeNet trains at a usable
//              speed on a laptop. The CPU default.
//
// Both follow the GPU's numerics (paper §3.3): f16 inputs are widened to f32 exactly, products are
// accumulated in f32 (f64 for f64 inputs), and the result is rounded to the output dtype once, on
// the store, after the epilogue (beta * out, + bias, ReLU with NaN passing through).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "kernels/conv.h"
#include "kernels/cpu/conv_cpu_plan.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/gemm.h"

namespace hl::kernels::cpu {
namespace {

// The accumulation type: f64 stays f64, f16 and f32 accumulate in f32.
template <class S>
using acc_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

template <class F>
void visit_input(DType t, F&& f) {
  switch (t) {
    case DType::f16: return f(half{});
    case DType::f64: return f(double{});
    default: return f(float{});
  }
}

template <class A>
A load_any(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f16: return static_cast<A>(static_cast<float>(static_cast<const half*>(p)[i]));
    case DType::f64: return static_cast<A>(static_cast<const double*>(p)[i]);
    default: return static_cast<A>(static_cast<const float*>(p)[i]);
  }
}

template <class A>
void store_any(void* p, DType t, int64_t i, A v) {
  switch (t) {
    case DType::f16: store(static_cast<half*>(p), i, v); return;
    case DType::f64: static_cast<double*>(p)[i] = static_cast<double>(v); return;
    default: static_cast<float*>(p)[i] = static_cast<float>(v); return;
  }
}

// The epilogue shared by every pass and variant: out[i] = act(v + beta*out[i] + bias), rounded once.
template <class A>
void finish(const ConvArgs& a, int64_t i, A v, int64_t k) {
  void* out = a.out();
  if (a.beta != 0.0f) v += static_cast<A>(a.beta) * load_any<A>(out, a.out_type, i);
  if (a.bias != nullptr) v += load_any<A>(a.bias, a.bias_type, k);
  if (a.relu && !(v > 0) && v == v) v = 0;  // NaN stays NaN: an overflow must stay visible
  store_any(out, a.out_type, i, v);
}

// ================================================================================================
// reference: the definition, one output element at a time
// ================================================================================================

template <class S>
void reference_typed(const ConvArgs& a) {
  using A = acc_t<S>;
  const int64_t N = a.N, C = a.C, H = a.H, W = a.W, K = a.K, R = a.R, Sw = a.S, P = a.P(), Q = a.Q();
  const S* x = static_cast<const S*>(a.x);
  const S* w = static_cast<const S*>(a.w);
  const S* dy = static_cast<const S*>(a.dy);
  const auto X = [&](int64_t n, int64_t c, int64_t h, int64_t ww) { return load(x, ((n * C + c) * H + h) * W + ww); };
  const auto Wt = [&](int64_t k, int64_t c, int64_t r, int64_t s) { return load(w, ((k * C + c) * R + r) * Sw + s); };
  const auto DY = [&](int64_t n, int64_t k, int64_t p, int64_t q) { return load(dy, ((n * K + k) * P + p) * Q + q); };

  switch (a.pass) {
    case ConvPass::forward:
#pragma omp parallel for collapse(2) if (a.macs() > kParallelThreshold)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t p = 0; p < P; ++p)
            for (int64_t q = 0; q < Q; ++q) {
              A acc = 0;
              for (int64_t c = 0; c < C; ++c)
                for (int64_t r = 0; r < R; ++r)
                  for (int64_t s = 0; s < Sw; ++s) {
                    const int64_t h = p * a.stride_h - a.pad_h + r, ww = q * a.stride_w - a.pad_w + s;
                    if (h < 0 || h >= H || ww < 0 || ww >= W) continue;  // the zero padding
                    acc += static_cast<A>(X(n, c, h, ww)) * static_cast<A>(Wt(k, c, r, s));
                  }
              finish<A>(a, ((n * K + k) * P + p) * Q + q, acc, k);
            }
      return;
    case ConvPass::backward_data:
      // dx[n,c,h,w] collects dy[n,k,p,q] * w[k,c,r,s] from every (p,q,r,s) with h = p*stride - pad + r.
#pragma omp parallel for collapse(2) if (a.macs() > kParallelThreshold)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t ww = 0; ww < W; ++ww) {
              A acc = 0;
              for (int64_t k = 0; k < K; ++k)
                for (int64_t r = 0; r < R; ++r)
                  for (int64_t s = 0; s < Sw; ++s) {
                    const int64_t ph = h + a.pad_h - r, qw = ww + a.pad_w - s;
                    if (ph < 0 || qw < 0 || ph % a.stride_h != 0 || qw % a.stride_w != 0) continue;
                    const int64_t p = ph / a.stride_h, q = qw / a.stride_w;
                    if (p >= P || q >= Q) continue;
                    acc += static_cast<A>(DY(n, k, p, q)) * static_cast<A>(Wt(k, c, r, s));
                  }
              finish<A>(a, ((n * C + c) * H + h) * W + ww, acc, 0);
            }
      return;
    case ConvPass::backward_weight:
#pragma omp parallel for collapse(2) if (a.macs() > kParallelThreshold)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t r = 0; r < R; ++r)
            for (int64_t s = 0; s < Sw; ++s) {
              A acc = 0;
              for (int64_t n = 0; n < N; ++n)
                for (int64_t p = 0; p < P; ++p)
                  for (int64_t q = 0; q < Q; ++q) {
                    const int64_t h = p * a.stride_h - a.pad_h + r, ww = q * a.stride_w - a.pad_w + s;
                    if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                    acc += static_cast<A>(DY(n, k, p, q)) * static_cast<A>(X(n, c, h, ww));
                  }
              finish<A>(a, ((k * C + c) * R + r) * Sw + s, acc, 0);
            }
      return;
  }
}

const char* unsupported_dtypes(const ConvArgs& a) {
  const auto ok = [](DType t) { return t == DType::f16 || t == DType::f32 || t == DType::f64; };
  if (!ok(a.in_type) || !ok(a.out_type)) return "the CPU computes f16, f32 and f64 only";
  return nullptr;
}

HL_REGISTER_VARIANT(ConvArgs, {"reference", DeviceType::cpu, 0, "direct loops, f32 accumulation (the definition)",
                               [](const ConvArgs& a) { visit_input(a.in_type, [&](auto t) { reference_typed<decltype(t)>(a); }); },
                               unsupported_dtypes});

// ================================================================================================
// im2col: unfold, then GEMM
// ================================================================================================
//
// For a chunk of nb images, the im2col matrix X_col has one row per filter tap (c, r, s) and one
// column per output position (n, p, q); its entry is the input value that tap sees at that position
// (0 in the padding). Then (see kernels/conv.h):
//   forward          Y[k, npq]  = W[k, crs] * X_col[crs, npq]             gemm NN
//   backward_data    dX_col     = W[k, crs]^T * dY[k, npq], col2im        gemm TN
//   backward_weight  dW[k, crs] += dY[k, npq] * X_col[crs, npq]^T         gemm NT, beta 1 across chunks
// X_col costs C*R*S*P*Q values per image (25x the input for a 5x5 kernel): that memory traffic is what
// the implicit-GEMM rung on the GPU avoids. Chunks keep it small here (conv_plan::kColBudget, in
// kernels/cpu/conv_cpu_plan.h).

// The output positions q in [q0, q1) whose tap s reads inside the row, i.e. 0 <= q*stride - pad + s < W;
// the others read the zero padding. Computing the range once per row replaces a bounds test per element
// and leaves a contiguous copy for stride 1.
struct QRange {
  int64_t q0, q1;
};
inline QRange valid_q(int64_t s, int64_t stride, int64_t pad, int64_t W, int64_t Q) {
  const auto ceil_div = [](int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; };
  const int64_t q0 = std::min(ceil_div(pad - s, stride), Q);        // first q with q*stride >= pad - s
  const int64_t q1 = std::clamp(ceil_div(W + pad - s, stride), q0, Q);  // first q with q*stride >= W + pad - s
  return {q0, q1};
}

template <class S>
void im2col(const ConvArgs& a, const S* x, int64_t n0, int64_t nb, S* col) {
  const int64_t C = a.C, H = a.H, W = a.W, R = a.R, Sw = a.S, P = a.P(), Q = a.Q(), PQ = P * Q;
  const int64_t cols = nb * PQ, sw = a.stride_w;
#pragma omp parallel for collapse(2) if (C * R * Sw * cols > kParallelThreshold && !omp_in_parallel())
  for (int64_t c = 0; c < C; ++c)
    for (int64_t rs = 0; rs < R * Sw; ++rs) {
      const int64_t r = rs / Sw, s = rs % Sw;
      const QRange qr = valid_q(s, sw, a.pad_w, W, Q);
      S* row = col + (c * R * Sw + rs) * cols;
      for (int64_t i = 0; i < nb; ++i) {
        const S* img = x + ((n0 + i) * C + c) * H * W;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t h = p * a.stride_h - a.pad_h + r;
          S* out = row + i * PQ + p * Q;
          if (h < 0 || h >= H) {
            std::fill(out, out + Q, S(0.0f));
            continue;
          }
          // Zeros for the left padding, the interior, zeros for the right padding.
          const S* src = img + h * W;
          const int64_t off = s - a.pad_w;  // column q reads src[q * sw + off]
          std::fill(out, out + qr.q0, S(0.0f));
          if (sw == 1) {
            std::copy(src + qr.q0 + off, src + qr.q1 + off, out + qr.q0);
          } else {
            for (int64_t q = qr.q0; q < qr.q1; ++q) out[q] = src[q * sw + off];
          }
          std::fill(out + qr.q1, out + Q, S(0.0f));
        }
      }
    }
}

// dx (accumulator, [nb, C, H, W] of the chunk) += col2im(dcol): every column entry goes back to
// the input element it was copied from. Parallel over channels, so no two threads add to one element.
template <class A>
void col2im_add(const ConvArgs& a, const A* dcol, int64_t nb, A* dx) {
  const int64_t C = a.C, H = a.H, W = a.W, R = a.R, Sw = a.S, P = a.P(), Q = a.Q(), PQ = P * Q;
  const int64_t cols = nb * PQ, sw = a.stride_w;
#pragma omp parallel for if (C * R * Sw * cols > kParallelThreshold && !omp_in_parallel())
  for (int64_t c = 0; c < C; ++c)
    for (int64_t rs = 0; rs < R * Sw; ++rs) {
      const int64_t r = rs / Sw, s = rs % Sw;
      const QRange qr = valid_q(s, sw, a.pad_w, W, Q);
      const A* row = dcol + (c * R * Sw + rs) * cols;
      for (int64_t i = 0; i < nb; ++i) {
        A* img = dx + (i * C + c) * H * W;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t h = p * a.stride_h - a.pad_h + r;
          if (h < 0 || h >= H) continue;
          A* dst = img + h * W;
          const int64_t off = s - a.pad_w;  // column q's value came from dst[q * sw + off]
          const A* src = row + i * PQ + p * Q;
          if (sw == 1) {  // a contiguous run, which the compiler vectorizes (the strided loop it does not)
            A* __restrict d = dst + qr.q0 + off;
            const A* __restrict v = src + qr.q0;
            for (int64_t j = 0; j < qr.q1 - qr.q0; ++j) d[j] += v[j];
          } else {
            for (int64_t q = qr.q0; q < qr.q1; ++q) dst[q * sw + off] += src[q];
          }
        }
      }
    }
}

// The epilogue over a contiguous run: out[j] = act(v[j] + beta*out[j] + bias), rounded once on the
// store. The same arithmetic, in the same order, as finish() (which the reference uses), written so
// that the compiler vectorizes it: the dtype switches and the beta/relu tests are hoisted out of the
// loop (template flags), the ReLU is a select, and a missing bias adds -0.0, which leaves every value
// unchanged bit for bit (x + -0 = x, also for x = -0). The per-element version cost LeNet 12% of its
// CPU time.
// An f16 output is computed a block at a time in f32, then rounded by the run converter (F16C where
// the CPU has it: one instruction per 8 values, see half_convert_cpu.cpp), the same bits as store().
template <bool kBeta, bool kRelu, class A, class O>
void finish_loop(O* __restrict out, const A* __restrict v, int64_t n, A beta, A bias) {
  const auto value = [&](int64_t j) {
    A t = v[j];
    if constexpr (kBeta) t += beta * static_cast<A>(load(out, j));
    t += bias;
    if constexpr (kRelu) t = select((t > A(0)) | (t != t), t, A(0));  // NaN stays NaN
    return t;
  };
  if constexpr (std::is_same_v<O, half>) {
    constexpr int64_t kBlock = 256;
    float block[kBlock];
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
      const int64_t len = std::min(kBlock, n - j0);
      for (int64_t j = 0; j < len; ++j) block[j] = value(j0 + j);
      narrow_f16_run(block, out + j0, len);
    }
  } else {
    for (int64_t j = 0; j < n; ++j) store(out, j, value(j));
  }
}

template <class A, class O>
void finish_run(O* out, const A* v, int64_t n, A beta, const A* bias, bool relu) {
  const A b = bias != nullptr ? *bias : A(-0.0);
  if (beta != A(0)) {
    relu ? finish_loop<true, true>(out, v, n, beta, b) : finish_loop<true, false>(out, v, n, beta, b);
  } else {
    relu ? finish_loop<false, true>(out, v, n, beta, b) : finish_loop<false, false>(out, v, n, beta, b);
  }
}

// Calls f(O{}) with O the C++ type of the output: f16 or f32 for f16/f32 inputs, f64 for f64.
template <class A, class F>
void visit_output(DType t, F&& f) {
  if constexpr (std::is_same_v<A, double>) {
    f(double{});
  } else if (t == DType::f16) {
    f(half{});
  } else {
    f(float{});
  }
}

// Scratch buffers that grow and are kept (per thread, per type), so that a training loop does not
// allocate, zero and page-fault them on every call.
template <class T, int slot>
T* conv_scratch(int64_t count) {
  thread_local std::vector<T> buf;
  if (static_cast<int64_t>(buf.size()) < count) buf.resize(static_cast<size_t>(count));
  return buf.data();
}

// ---- where the threads go ----------------------------------------------------------------------
// Chunks are independent, so the threads take whole chunks: each runs its chunk's im2col, GEMM and
// epilogue alone, and a conv call opens one parallel region. Splitting every chunk's im2col and GEMM
// across the threads instead (the first version) ended each of those steps in a barrier, several per
// chunk; on LeNet with two threads a third of the time went to threads spinning at them
// (docs/performance.md, "CPU path"). When there are too few chunks to share out (a batch of one
// image, say), the chunks run in turn and the GEMM of each uses every thread, as before.
//
// The result does not depend on the thread count, bit for bit (ConvCpuRegistry.
// Im2colGivesTheSameBitsAtEveryThreadCount): forward and backward-data chunks write disjoint parts of
// the output; the weight gradient, which sums over every chunk, sums in groups fixed by the shapes
// alone. Group g adds its chunks in order (the GEMM's beta = 1 adds one chunk's complete product to
// the running sum), then the groups are added in order. The budgets and the rule for sharing are in
// kernels/cpu/conv_cpu_plan.h.

// One thread's working buffers for one chunk (kept across calls, see conv_scratch).
template <class S, class A>
struct ChunkBuffers {
  S* col = nullptr;  // X_col of the chunk, [CRS, nb*PQ]
  S* dyk = nullptr;  // dY of the chunk rearranged to [K, nb*PQ]
  A* acc = nullptr;  // the f32 (f64) GEMM result before the epilogue
  A* dcol = nullptr;  // dX_col, [CRS, nb*PQ]

  ChunkBuffers(const ConvArgs& a, int64_t nb_max) {
    const int64_t K = a.K, CRS = a.C * a.R * a.S, PQ = a.P() * a.Q(), CHW = a.C * a.H * a.W;
    switch (a.pass) {
      case ConvPass::forward:
        col = conv_scratch<S, 0>(CRS * nb_max * PQ);
        acc = conv_scratch<A, 1>(K * nb_max * PQ);
        break;
      case ConvPass::backward_data:
        dyk = conv_scratch<S, 2>(K * nb_max * PQ);
        dcol = conv_scratch<A, 3>(CRS * nb_max * PQ);
        acc = conv_scratch<A, 1>(nb_max * CHW);
        break;
      case ConvPass::backward_weight:  // the sums live in the groups' buffer
        col = conv_scratch<S, 0>(CRS * nb_max * PQ);
        dyk = conv_scratch<S, 2>(K * nb_max * PQ);
        break;
    }
  }
};

// work(buffers, u) for every unit u in [0, units) (a chunk, or a group of chunks): shared among the
// threads, each with its own buffers, when there are enough units; else in turn on this thread.
template <class S, class A, class F>
void for_each_unit(const ConvArgs& a, int64_t nb_max, int64_t units, const F& work) {
  if (conv_plan::share_by_chunk(units, omp_in_parallel() ? 1 : omp_get_max_threads())) {
#pragma omp parallel
    {
      const ChunkBuffers<S, A> b(a, nb_max);
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < units; ++u) work(b, u);
    }
  } else {
    const ChunkBuffers<S, A> b(a, nb_max);
    for (int64_t u = 0; u < units; ++u) work(b, u);
  }
}

template <class S>
void im2col_typed(const ConvArgs& a) {
  using A = acc_t<S>;
  constexpr DType in_t = std::is_same_v<S, half> ? DType::f16 : std::is_same_v<S, double> ? DType::f64 : DType::f32;
  constexpr DType acc_type = std::is_same_v<A, double> ? DType::f64 : DType::f32;
  const int64_t N = a.N, C = a.C, H = a.H, W = a.W, K = a.K, CRS = a.C * a.R * a.S, PQ = a.P() * a.Q();
  const int64_t CHW = C * H * W;
  const int64_t nb_max = conv_plan::chunk_images(N, CRS * PQ);
  const int64_t n_chunks = (N + nb_max - 1) / nb_max;

  const A beta = static_cast<A>(a.beta);
  std::vector<A> bias;  // widened once
  if (a.bias != nullptr)
    for (int64_t k = 0; k < K; ++k) bias.push_back(load_any<A>(a.bias, a.bias_type, k));

  GemmArgs base;
  base.device = DeviceType::cpu;
  base.ab_type = in_t;
  base.c_type = acc_type;

  const auto gather_dy = [&](const ChunkBuffers<S, A>& b, int64_t n0, int64_t nb) {
    const S* dy = static_cast<const S*>(a.dy);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < nb; ++i) std::copy_n(dy + ((n0 + i) * K + k) * PQ, PQ, b.dyk + k * nb * PQ + i * PQ);
  };

  // Forward and backward data: one chunk, start to finish, into its own part of the output.
  const auto run_chunk = [&](const ChunkBuffers<S, A>& b, int64_t chunk) {
    const int64_t n0 = chunk * nb_max, nb = std::min(nb_max, N - n0), cols = nb * PQ;
    GemmArgs g = base;
    if (a.pass == ConvPass::forward) {
      im2col(a, static_cast<const S*>(a.x), n0, nb, b.col);
      g.op_a = Op::N, g.op_b = Op::N, g.M = K, g.N = cols, g.K = CRS;
      g.A = a.w, g.B = b.col, g.C = b.acc, g.beta = 0.0f;
      set_dense_ld(g);
      gemm(g);
      // acc is [K, nb, P*Q]; y is [nb, K, P*Q]: one contiguous run of P*Q per (image, filter).
      visit_output<A>(a.out_type, [&](auto tag) {
        using O = decltype(tag);
        O* y = static_cast<O*>(a.y);
        for (int64_t i = 0; i < nb; ++i)
          for (int64_t k = 0; k < K; ++k)
            finish_run<A>(y + ((n0 + i) * K + k) * PQ, b.acc + k * cols + i * PQ, PQ, beta,
                          bias.empty() ? nullptr : &bias[k], a.relu);
      });
    } else {
      gather_dy(b, n0, nb);
      g.op_a = Op::T, g.op_b = Op::N, g.M = CRS, g.N = cols, g.K = K;
      g.A = a.w, g.B = b.dyk, g.C = b.dcol, g.beta = 0.0f;
      set_dense_ld(g);
      gemm(g);
      std::fill(b.acc, b.acc + nb * CHW, A(0));
      col2im_add(a, b.dcol, nb, b.acc);
      visit_output<A>(a.out_type, [&](auto tag) {
        using O = decltype(tag);
        finish_run<A>(static_cast<O*>(a.dx) + n0 * CHW, b.acc, nb * CHW, beta, nullptr, false);
      });
    }
  };

  if (a.pass != ConvPass::backward_weight) {
    for_each_unit<S, A>(a, nb_max, n_chunks, run_chunk);
    return;
  }

  // Backward weight: group g sums chunks [first(g), first(g + 1)) into its own K x CRS block.
  const int64_t KCRS = K * CRS, groups = conv_plan::weight_groups(n_chunks, KCRS);
  const auto first = [&](int64_t g) { return g * n_chunks / groups; };
  A* sums = conv_scratch<A, 4>(groups * KCRS);
  const auto run_group = [&](const ChunkBuffers<S, A>& b, int64_t group) {
    for (int64_t chunk = first(group); chunk < first(group + 1); ++chunk) {
      const int64_t n0 = chunk * nb_max, nb = std::min(nb_max, N - n0), cols = nb * PQ;
      im2col(a, static_cast<const S*>(a.x), n0, nb, b.col);
      gather_dy(b, n0, nb);
      GemmArgs g = base;
      g.op_a = Op::N, g.op_b = Op::T, g.M = K, g.N = CRS, g.K = cols;
      g.A = b.dyk, g.B = b.col, g.C = sums + group * KCRS, g.beta = chunk == first(group) ? 0.0f : 1.0f;
      set_dense_ld(g);
      gemm(g);
    }
  };
  for_each_unit<S, A>(a, nb_max, groups, run_group);
  // The groups in order; each element's sum runs over the same groups in the same order on any thread.
  for (int64_t group = 1; group < groups; ++group) {
    const A* __restrict part = sums + group * KCRS;
    for (int64_t j = 0; j < KCRS; ++j) sums[j] += part[j];
  }
  visit_output<A>(a.out_type, [&](auto tag) {
    using O = decltype(tag);
    finish_run<A>(static_cast<O*>(a.dw), sums, KCRS, beta, nullptr, false);
  });
}

HL_REGISTER_VARIANT(ConvArgs, {"im2col", DeviceType::cpu, 10, "im2col + the blocked CPU GEMM (the CPU default)",
                               [](const ConvArgs& a) { visit_input(a.in_type, [&](auto t) { im2col_typed<decltype(t)>(a); }); },
                               unsupported_dtypes});

}  // namespace
}  // namespace hl::kernels::cpu
