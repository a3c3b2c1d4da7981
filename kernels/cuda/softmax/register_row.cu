// Softmax ladder, rung 2c: "register_row" — one block per row, the row read once into registers.
//
// What changes from `block_row` / `warp_row`: those read a row three times (max pass, sum pass,
// normalize pass: `three_pass_row` in softmax_common.cuh). Here each thread loads its share of the row
// once, as FP32, into a register array: up to 4 FP16 packs of 16 bytes (32 values) or 4 FP32 packs
// (16 values), all loads issued before the first is used. The maximum and the sum of exponentials
// are reduced from those registers (warp shuffles, then one value per warp through shared memory:
// BlockGroup), and the output is written from them. The array is indexed only with compile-time constants (the loops
// over it are fully unrolled), so it stays in registers; the number of packs per thread is a template
// parameter, and the block size (a multiple of 32, up to 1024) is chosen per row length at run time
// (register_row_plan.h). Rows that are not whole packs, or misaligned buffers, take the same kernel
// with one value per "pack".
//
// Why: bytes. block_row moves 3 reads + 1 write per element; passes 2 and 3 hit L1/L2 for short rows,
// but a block's row of 4K..32K FP16 values, times the blocks resident on an SM, no longer stays in
// L1, and the H200 run (bench/results/softmax_nvidia_h200_2026-11-23.txt) shows block_row and
// warp_row at ~55% of the copy bandwidth for 1024..32768 columns. One read + one write per element is
// what a copy moves. Prediction: ~1.4x over block_row for rows that leave L1, towards the issue's 80%
// of copy. Softmax keeps exp(x - max) from the sum in the registers and multiplies it by 1/sum, so it
// also evaluates one exp() per element instead of two. The log-softmax backward caches dy (one read
// for the sum and the write) and reads y once: 2 reads + 1 write, down from block_row's 3 + 1.
// Paper §3.3: FP32 math on FP16 storage: every value is widened to FP32 on load, max, sum, exp and
// the normalization are FP32, and the result is rounded once, on the store.
//
// What is still left: a row must fit in the registers of one block: 1024 threads x 32 values = 32768
// columns for FP16 packs, 16384 for FP32 packs and the scalar path (more values per thread spill to
// local memory: register_row_plan.h). Longer rows are declined (unsupported() says why) and go to
// block_row or online. At that size one block fills an SM's register file, so the SM idles during the
// two block reductions; a row split across a cluster of blocks (distributed shared memory) would lift
// both limits.
#include <type_traits>

#include "kernels/cuda/softmax/register_row_plan.h"
#include "kernels/cuda/softmax/softmax_common.cuh"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;
namespace plan_ns = hl::kernels::register_row;

constexpr int kMaxThreads = plan_ns::kMaxThreads;

// Pack i of this thread is pack threadIdx.x + i * blockDim.x of the row: consecutive threads read
// consecutive packs, so every warp load is 32 contiguous 16-byte packs. `owned` is how many of its P
// packs lie inside the row (the packs i < owned), computed once per kernel: a compare with a
// constant per pack instead of an index per pack keeps the register count down.
__device__ __forceinline__ int packs_owned(int packs) {
  const int t = static_cast<int>(threadIdx.x), b = static_cast<int>(blockDim.x);
  return packs > t ? (packs - t + b - 1) / b : 0;
}

// v[i][k] = element k of pack i, as FP32; -inf past the end of the row. Returns this thread's max.
// Every load is issued before the first value is used: P loads of 16 bytes in flight per thread.
template <int P, int N, class T>
__device__ __forceinline__ float load_row(const T* row, int owned, float (&v)[P][N]) {
  const int stride = static_cast<int>(blockDim.x) * N, first = static_cast<int>(threadIdx.x) * N;
  Pack<T, N> raw[P];
#pragma unroll
  for (int i = 0; i < P; ++i)
    if (i < owned) raw[i] = *reinterpret_cast<const Pack<T, N>*>(row + first + i * stride);
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < P; ++i) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      v[i][k] = i < owned ? to_f32(raw[i].v[k]) : -INFINITY;
      m = fmaxf(m, v[i][k]);  // fmaxf ignores NaN; a NaN entry poisons the sum below instead
    }
  }
  return m;
}

// out pack i = f(v[i][k]) for the packs inside the row.
template <int P, int N, class T, class F>
__device__ __forceinline__ void store_row(T* row, int owned, const float (&v)[P][N], F&& f) {
  const int stride = static_cast<int>(blockDim.x) * N, first = static_cast<int>(threadIdx.x) * N;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (i < owned) {
      Pack<T, N> q;
#pragma unroll
      for (int k = 0; k < N; ++k) q.v[k] = from_f32<T>(f(v[i][k]));
      *reinterpret_cast<Pack<T, N>*>(row + first + i * stride) = q;
    }
  }
}

// P packs of N values per thread (N = 8 or 4 on the packed path, 1 on the scalar path).
template <int P, int N, class TX, class TY>
__global__ void __launch_bounds__(kMaxThreads) register_row_forward_kernel(int64_t rows, int cols, const TX* x, TY* y,
                                                                           bool log) {
  const BlockGroup g;
  const int owned = packs_owned(cols / N);  // the packed path is taken only when cols % N == 0
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float v[P][N];
    const float m = g.max(load_row<P, N>(x + r * cols, owned, v));
    // Sum of exp(x - max). Softmax keeps each exponential in v for the write; log-softmax keeps x.
    // Masked (-inf) entries and the padding past the row give exp(-inf) = 0.
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < P; ++i) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float e = expf(v[i][k] - m);
        if (i < owned) s += e;
        if (!log) v[i][k] = e;
      }
    }
    s = g.sum(s);
    // The NaN convention of finish_stats: no finite maximum, or a NaN entry (s is NaN), gives NaN
    // everywhere in the row.
    const RowStats st = finish_stats(m, s);
    TY* yr = y + r * cols;
    if (log) {
      store_row<P, N>(yr, owned, v, [&](float xv) { return log_prob(xv, st); });
    } else {
      const float inv = isnan(st.log_sum) ? NAN : 1.0f / s;
      store_row<P, N>(yr, owned, v, [&](float e) { return e * inv; });
    }
  }
}

// log-softmax backward, gx = dy - exp(y) * sum(dy): dy is read once into registers for the sum and
// kept for the write; y is read once, in the write. dy stays in its storage type in the registers
// (widened to FP32 where it is used), so that y's loads have registers too.
template <int P, int N, class TY, class TG>
__global__ void __launch_bounds__(kMaxThreads) register_row_backward_kernel(int64_t rows, int cols, const TY* y,
                                                                            const TY* dy, TG* gx) {
  const BlockGroup g;
  const int owned = packs_owned(cols / N);
  const int stride = static_cast<int>(blockDim.x) * N, first = static_cast<int>(threadIdx.x) * N;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const TY* dyr = dy + r * cols;
    const TY* yr = y + r * cols;
    TG* gr = gx + r * cols;
    Pack<TY, N> d[P];
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (i < owned) d[i] = *reinterpret_cast<const Pack<TY, N>*>(dyr + first + i * stride);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < P; ++i)
#pragma unroll
      for (int k = 0; k < N; ++k)
        if (i < owned) s += to_f32(d[i].v[k]);
    s = g.sum(s);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (i < owned) {
        const Pack<TY, N> yv = *reinterpret_cast<const Pack<TY, N>*>(yr + first + i * stride);
        Pack<TG, N> q;
#pragma unroll
        for (int k = 0; k < N; ++k) q.v[k] = from_f32<TG>(to_f32(d[i].v[k]) - expf(to_f32(yv.v[k])) * s);
        *reinterpret_cast<Pack<TG, N>*>(gr + first + i * stride) = q;
      }
    }
  }
}

// f(std::integral_constant<int, P>) for the plan's per-thread count; only the counts that
// register_row_plan.h lists are instantiated.
template <int N, class F>
void with_per_thread(int per_thread, F&& f) {
  const auto call = [&](auto p) {
    if constexpr (plan_ns::compiled_for(decltype(p)::value, N)) {
      f(p);
    } else {
      throw Error(detail::concat("register_row: no kernel for ", decltype(p)::value, " packs of ", N));
    }
  };
  switch (per_thread) {
    case 1: call(std::integral_constant<int, 1>{}); return;
    case 2: call(std::integral_constant<int, 2>{}); return;
    case 4: call(std::integral_constant<int, 4>{}); return;
    case 8: call(std::integral_constant<int, 8>{}); return;
    case 16: call(std::integral_constant<int, 16>{}); return;
    case 32: call(std::integral_constant<int, 32>{}); return;
    default: throw Error(detail::concat("register_row: no kernel for ", per_thread, " packs of ", N));
  }
}

// Launch with N values per access (kVec<TX> on the packed path, 1 on the scalar path).
template <int N, class TX, class TY>
void launch(const SoftmaxArgs& a, const TX* x, TY* y) {
  const plan_ns::Plan p = plan_ns::plan(a.cols, N);
  HL_CHECK(p.threads > 0, "register_row: no plan for ", a.describe());  // unsupported() rules this out
  const unsigned grid = grid_of(a.rows);
  const int cols = static_cast<int>(a.cols);
  with_per_thread<N>(p.per_thread, [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    if (a.op == SoftmaxOp::log_softmax_backward) {
      register_row_backward_kernel<P, N><<<grid, p.threads, 0, stream()>>>(a.rows, cols, x,
                                                                            static_cast<const TX*>(a.dy), y);
      HL_LAUNCH_CHECK("register_row_backward_kernel");
    } else {
      register_row_forward_kernel<P, N><<<grid, p.threads, 0, stream()>>>(a.rows, cols, x, y,
                                                                           a.op == SoftmaxOp::log_softmax);
      HL_LAUNCH_CHECK("register_row_forward_kernel");
    }
  });
}

// Values per access on the path run() takes: a 16-byte pack (8 FP16 or 4 FP32 values) when every row
// is a whole number of packs and the buffers are aligned, else 1 (the scalar path).
int path_width(const SoftmaxArgs& a) {
  int width = 1;
  with_type(a.x_type, [&](auto tx) {
    with_type(a.y_type, [&](auto ty) {
      using TX = decltype(tx);
      using TY = decltype(ty);
      const bool vec = a.op == SoftmaxOp::log_softmax_backward ? can_vectorize<TX, TY>(a.cols, a.x, a.y, a.dy)
                                                               : can_vectorize<TX, TY>(a.cols, a.x, a.y);
      width = vec ? kVec<TX> : 1;
    });
  });
  return width;
}

void run(const SoftmaxArgs& a) {
  const int width = path_width(a);
  with_type(a.x_type, [&](auto tx) {
    with_type(a.y_type, [&](auto ty) {
      using TX = decltype(tx);
      using TY = decltype(ty);
      const TX* x = static_cast<const TX*>(a.x);
      TY* y = static_cast<TY*>(a.y);
      if (width > 1) {
        launch<kVec<TX>>(a, x, y);
      } else {
        launch<1>(a, x, y);
      }
    });
  });
}

static_assert(plan_ns::max_cols(8) == 32768 && plan_ns::max_cols(4) == 16384 && plan_ns::max_cols(1) == 16384,
              "update the message below");

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax && a.op != SoftmaxOp::log_softmax_backward)
    return "register_row computes softmax and log-softmax (cross-entropy: fused_xent)";
  if (const char* why = unsupported_types(a)) return why;
  if (a.cols > plan_ns::max_cols(path_width(a)))
    return "register_row keeps a row in the registers of one block: at most 32768 columns for FP16 rows of whole "
           "16-byte packs, 16384 for FP32 rows and for the scalar path (rows not a whole number of packs, "
           "misaligned buffers); longer rows run in block_row or online";
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(SoftmaxArgs, {"register_row", DeviceType::cuda, 35,
                                  "one block per row, the row read once into registers (up to 32768 columns)", run,
                                  unsupported});

}  // namespace hl::kernels::cuda
