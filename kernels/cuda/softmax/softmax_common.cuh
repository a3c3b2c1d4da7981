// What every rung of the softmax ladder shares: typed FP16/FP32 element access, 128-bit packed
// loads and stores, the row statistics and their NaN convention, the group reductions (a thread, a
// warp or a block working on one row) and the online (max, sum) pair of Milakov & Gimelshein (2018).
//
// Paper §3.3: whatever the storage dtype, every value is widened to FP32 on load, the max, the sum of
// exponentials and the normalization are FP32, and the result is rounded once, on the store.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/softmax.h"

namespace hl::kernels::cuda::softmax_detail {

// ---- typed element access (the fast rungs are templated on the storage types; to_f32 and from_f32
// are in kernels/cuda/common.cuh) ------------------------------------------------------------------

// N values of T moved as one access (Pack, common.cuh): 16 bytes for the input type (8 halves or 4
// floats), so a warp reads 512 contiguous bytes per instruction. The output pack holds the same N
// values of its own type (8 floats = two 128-bit stores when an FP16 row is written as FP32).
template <class T>
constexpr int kVec = static_cast<int>(16 / sizeof(T));

// The packed path needs every row to start on a pack boundary: cols a multiple of N and every buffer
// aligned (cudaMalloc gives 256 bytes; a view into the middle of a tensor may not).
template <class TIn, class TOut>
bool can_vectorize(int64_t cols, const void* in, const void* out, const void* in2 = nullptr) {
  constexpr int N = kVec<TIn>;
  return cols % N == 0 && aligned_to(in, 16) && (in2 == nullptr || aligned_to(in2, 16)) &&
         (out == nullptr || aligned_to(out, sizeof(TOut) * N));
}

// f(c, value) for every element of the row that this member (rank of size) owns.
template <bool VEC, class T, class F>
__device__ __forceinline__ void row_for_each(const T* row, int64_t cols, int rank, int size, F&& f) {
  if constexpr (VEC) {
    constexpr int N = kVec<T>;
    for (int64_t c = static_cast<int64_t>(rank) * N; c < cols; c += static_cast<int64_t>(size) * N) {
      const Pack<T, N> p = *reinterpret_cast<const Pack<T, N>*>(row + c);
#pragma unroll
      for (int k = 0; k < N; ++k) f(c + k, to_f32(p.v[k]));
    }
  } else {
    for (int64_t c = rank; c < cols; c += size) f(c, to_f32(row[c]));
  }
}

// out[c] = f(c, in[c]) for the elements this member owns.
template <bool VEC, class TIn, class TOut, class F>
__device__ __forceinline__ void row_map(const TIn* in, TOut* out, int64_t cols, int rank, int size, F&& f) {
  if constexpr (VEC) {
    constexpr int N = kVec<TIn>;
    for (int64_t c = static_cast<int64_t>(rank) * N; c < cols; c += static_cast<int64_t>(size) * N) {
      const Pack<TIn, N> p = *reinterpret_cast<const Pack<TIn, N>*>(in + c);
      Pack<TOut, N> q;
#pragma unroll
      for (int k = 0; k < N; ++k) q.v[k] = from_f32<TOut>(f(c + k, to_f32(p.v[k])));
      *reinterpret_cast<Pack<TOut, N>*>(out + c) = q;
    }
  } else {
    for (int64_t c = rank; c < cols; c += size) out[c] = from_f32<TOut>(f(c, to_f32(in[c])));
  }
}

// out[c] = f(a[c], b[c]) (the log-softmax backward reads y and dy).
template <bool VEC, class TIn, class TOut, class F>
__device__ __forceinline__ void row_map2(const TIn* a, const TIn* b, TOut* out, int64_t cols, int rank, int size,
                                         F&& f) {
  if constexpr (VEC) {
    constexpr int N = kVec<TIn>;
    for (int64_t c = static_cast<int64_t>(rank) * N; c < cols; c += static_cast<int64_t>(size) * N) {
      const Pack<TIn, N> pa = *reinterpret_cast<const Pack<TIn, N>*>(a + c);
      const Pack<TIn, N> pb = *reinterpret_cast<const Pack<TIn, N>*>(b + c);
      Pack<TOut, N> q;
#pragma unroll
      for (int k = 0; k < N; ++k) q.v[k] = from_f32<TOut>(f(to_f32(pa.v[k]), to_f32(pb.v[k])));
      *reinterpret_cast<Pack<TOut, N>*>(out + c) = q;
    }
  } else {
    for (int64_t c = rank; c < cols; c += size) out[c] = from_f32<TOut>(f(to_f32(a[c]), to_f32(b[c])));
  }
}

// ---- row statistics and the NaN convention (kernels/softmax.h) --------------------------------------

struct RowStats {
  float max, log_sum;
};

// A row without a finite maximum (all -inf, or a +inf entry) gets NaN statistics, which make every
// output of the row NaN, exactly as the CPU reference does. A NaN entry already made `sum` NaN.
__device__ __forceinline__ RowStats finish_stats(float mx, float sum) {
  if (!isfinite(mx)) return {NAN, NAN};
  return {mx, logf(sum)};
}

// (x - max) - log_sum: x - max first, so that large logits keep their accuracy.
__device__ __forceinline__ float log_prob(float x, RowStats s) { return (x - s.max) - s.log_sum; }
__device__ __forceinline__ float prob(float x, RowStats s) { return expf(log_prob(x, s)); }

// ---- the online (max, sum) pair (Milakov & Gimelshein 2018) -----------------------------------------
// d is sum(exp(x - m)) over the values seen so far. A new maximum rescales d by exp(old_m - new_m), so
// one pass over the row gives both numbers. -inf entries contribute nothing (and must not evaluate
// exp(-inf - -inf) = NaN); a NaN entry makes d NaN, which no later step can hide.
struct MaxSum {
  float m, d;
};

__device__ __forceinline__ void online_add(MaxSum& s, float x) {
  if (x > s.m) {
    s.d = s.d * expf(s.m - x) + 1.0f;  // exp(-inf) = 0 for the first finite value
    s.m = x;
  } else if (x != -INFINITY) {
    s.d += expf(x - s.m);  // a NaN x lands here and poisons d
  }
}

// Merge two partial pairs. A part with d == 0 saw only -inf and contributes nothing; otherwise it is
// rescaled to the common maximum (a NaN d stays NaN).
__device__ __forceinline__ MaxSum online_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  const float da = a.d == 0.0f ? 0.0f : a.d * expf(a.m - m);
  const float db = b.d == 0.0f ? 0.0f : b.d * expf(b.m - m);
  return {m, da + db};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum s) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum o{__shfl_xor_sync(0xFFFFFFFFu, s.m, offset), __shfl_xor_sync(0xFFFFFFFFu, s.d, offset)};
    s = online_merge(s, o);
  }
  return s;
}

// ---- groups: who works on one row ---------------------------------------------------------------------
// A block: shared-memory reductions (common.cuh block_reduce), blockDim.x a multiple of 32.
struct BlockGroup {
  __device__ int rank() const { return static_cast<int>(threadIdx.x); }
  __device__ int size() const { return static_cast<int>(blockDim.x); }
  __device__ float max(float v) const {
    __shared__ float scratch[32];
    return block_reduce(v, MaxOp{}, -INFINITY, scratch);
  }
  __device__ float sum(float v) const {
    __shared__ float scratch[32];
    return block_reduce(v, SumOp{}, 0.0f, scratch);
  }
  __device__ MaxSum merge(MaxSum s) const {
    __shared__ float sm[32], sd[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    s = warp_merge(s);
    __syncthreads();  // the previous use of sm/sd is over
    if (lane == 0) {
      sm[warp] = s.m;
      sd[warp] = s.d;
    }
    __syncthreads();
    if (warp == 0) {
      s = lane < warps ? MaxSum{sm[lane], sd[lane]} : MaxSum{-INFINITY, 0.0f};
      s = warp_merge(s);
      if (lane == 0) {
        sm[0] = s.m;
        sd[0] = s.d;
      }
    }
    __syncthreads();
    return {sm[0], sd[0]};
  }
};

// A warp: register shuffles only, no shared memory and no barriers.
struct WarpGroup {
  __device__ int rank() const { return static_cast<int>(threadIdx.x % 32); }
  __device__ int size() const { return 32; }
  __device__ float max(float v) const { return warp_reduce(v, MaxOp{}); }
  __device__ float sum(float v) const { return warp_reduce(v, SumOp{}); }
  __device__ MaxSum merge(MaxSum s) const { return warp_merge(s); }
};

// Rows owned by warps, kWarps to a block (warp_row, register_warp): warp w of block b takes row
// b * kWarps + w, stepping by all warps of the grid. Every lane of a warp has the same row, so the whole
// warp enters and leaves the loop together (the shuffles need all 32).
template <int kWarps>
struct WarpRows {
  __device__ static int64_t first() { return static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; }
  __device__ static int64_t step() { return static_cast<int64_t>(gridDim.x) * kWarps; }
};

// ---- the three-pass row body, for any group (block_row and warp_row differ only in the group) --------

// pass 1: max; pass 2: sum of exp(x - max); pass 3: write. Passes 2 and 3 re-read the row, which the
// group has just touched, so they mostly hit L1/L2 rather than DRAM.
template <bool VEC, class Group, class TX, class TY>
__device__ __forceinline__ void three_pass_row(const Group& g, const TX* xr, TY* yr, int64_t cols, bool log) {
  float m = -INFINITY;
  row_for_each<VEC>(xr, cols, g.rank(), g.size(), [&](int64_t, float v) { m = fmaxf(m, v); });
  m = g.max(m);
  float s = 0.0f;
  row_for_each<VEC>(xr, cols, g.rank(), g.size(), [&](int64_t, float v) { s += expf(v - m); });
  s = g.sum(s);
  const RowStats st = finish_stats(m, s);
  if (log) {
    row_map<VEC>(xr, yr, cols, g.rank(), g.size(), [&](int64_t, float v) { return log_prob(v, st); });
  } else {
    row_map<VEC>(xr, yr, cols, g.rank(), g.size(), [&](int64_t, float v) { return prob(v, st); });
  }
}

// log-softmax backward: gx = dy - exp(y) * sum(dy), one reduction and one elementwise pass.
template <bool VEC, class Group, class TY, class TG>
__device__ __forceinline__ void backward_row(const Group& g, const TY* y, const TY* dy, TG* gx, int64_t cols) {
  float s = 0.0f;
  row_for_each<VEC>(dy, cols, g.rank(), g.size(), [&](int64_t, float v) { s += v; });
  s = g.sum(s);
  row_map2<VEC>(y, dy, gx, cols, g.rank(), g.size(), [&](float yv, float dyv) { return dyv - expf(yv) * s; });
}

// ---- launch helpers -------------------------------------------------------------------------------------

constexpr int64_t kMaxGrid = 65535;  // grid-stride loops cover any number of rows beyond this
inline unsigned grid_of(int64_t units) {
  return static_cast<unsigned>(units < 1 ? 1 : (units < kMaxGrid ? units : kMaxGrid));
}

// Threads for a block that owns a row: enough to give each one pack (or a few), 32..max_threads.
inline int block_for_row(int64_t cols, int vec, int max_threads) {
  int block = 32;
  while (block < max_threads && static_cast<int64_t>(block) * vec < cols) block *= 2;
  return block;
}

// Call f(T{}) with T = __half or float for an f16 / f32 dtype (the fast rungs take nothing else).
template <class F>
void with_type(DType t, F&& f) {
  if (t == DType::f16) {
    f(__half{});
  } else {
    f(float{});
  }
}

inline bool f16_or_f32(DType t) { return t == DType::f16 || t == DType::f32; }

// The dtypes the FP32-math rungs accept (everything but f64, which only `naive` handles on the GPU).
inline const char* unsupported_types(const SoftmaxArgs& a) {
  const bool xent_fwd = a.op == SoftmaxOp::xent_forward;
  if (!f16_or_f32(a.x_type) || (!xent_fwd && !f16_or_f32(a.y_type)))
    return "this rung reads and writes f16 or f32 (f64 runs in `naive` or on the CPU)";
  return nullptr;
}

}  // namespace hl::kernels::cuda::softmax_detail
