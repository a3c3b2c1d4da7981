// The register-resident row: what `register_row` (one block per row) and `register_warp` (one warp per
// row) share. A group of threads (softmax_common.cuh: BlockGroup or WarpGroup) reads its row once, as
// FP32, into a register array of P packs of N values per thread, reduces the maximum and the sum of
// exponentials from there, and writes the output from there: one read and one write per element, what
// a copy moves. Paper §3.3: FP32 math on FP16 storage, rounded once, on the store.
//
// The array is indexed only with compile-time constants (every loop over it is fully unrolled), so it
// stays in registers; P is a template parameter, chosen per row length by the rung's launch plan
// (register_row_plan.h).
#pragma once
#include <type_traits>

#include "kernels/cuda/softmax/kept_frames.h"
#include "kernels/cuda/softmax/register_row_plan.h"
#include "kernels/cuda/softmax/softmax_common.cuh"

namespace hl::kernels::cuda::softmax_detail {

// packs_owned (register_row_plan.h, plain C++ so that a CPU test checks it against both plans): how
// many of its P packs member `rank` of `size` owns. Pack i of the member is pack rank + i * size of
// the row: consecutive members read consecutive packs, so every warp load is 32 contiguous 16-byte
// packs. The count is computed once per kernel: a compare with a constant per pack instead of an
// index per pack keeps the register count down.
using register_row::packs_owned;

// raw[i] = the member's pack i (i < owned), as stored. Every load is issued before the first value is
// used: P loads of 16 bytes in flight per thread.
template <int P, int N, class T>
__device__ __forceinline__ void load_packs(const T* row, int rank, int size, int owned, Pack<T, N> (&raw)[P]) {
  const int stride = size * N, first = rank * N;
#pragma unroll
  for (int i = 0; i < P; ++i)
    if (i < owned) raw[i] = *reinterpret_cast<const Pack<T, N>*>(row + first + i * stride);
}

// v[i][k] = element k of pack i, as FP32; -inf past the end of the row. Returns this thread's max.
template <int P, int N, class T>
__device__ __forceinline__ float load_row(const T* row, int rank, int size, int owned, float (&v)[P][N]) {
  Pack<T, N> raw[P];
  load_packs<P, N>(row, rank, size, owned, raw);
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

// out pack i = value(i, k) for k < N, for the member's packs inside the row (i < owned): the write of
// every register rung. value is called with constants only (both loops unrolled), so an array it reads
// stays in registers.
template <int P, int N, class T, class Value>
__device__ __forceinline__ void store_packs(T* row, int rank, int size, int owned, Value&& value) {
  const int stride = size * N, first = rank * N;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (i < owned) {
      Pack<T, N> q;
#pragma unroll
      for (int k = 0; k < N; ++k) q.v[k] = from_f32<T>(value(i, k));
      *reinterpret_cast<Pack<T, N>*>(row + first + i * stride) = q;
    }
  }
}

// out pack i = f(v[i][k]) for the packs inside the row.
template <int P, int N, class T, class F>
__device__ __forceinline__ void store_row(T* row, int rank, int size, int owned, const float (&v)[P][N], F&& f) {
  store_packs<P, N>(row, rank, size, owned, [&](int i, int k) { return f(v[i][k]); });
}

// Softmax or log-softmax of one row xr -> yr by group g; `owned` = packs_owned(cols / N, rank, size)
// (rows of whole packs when N > 1). row_max and row_sum turn a member's partial maximum and sum into
// the row's: the group's reductions, or (cluster_row) the group's followed by the other blocks'.
template <int P, int N, class Group, class TX, class TY, class RowMax, class RowSum>
__device__ __forceinline__ void register_forward_row(const Group& g, const TX* xr, TY* yr, int owned, bool log,
                                                     RowMax&& row_max, RowSum&& row_sum) {
  const int rank = g.rank(), size = g.size();
  float v[P][N];
  const float m = row_max(load_row<P, N>(xr, rank, size, owned, v));
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
  s = row_sum(s);
  // The NaN convention of finish_stats: no finite maximum, or a NaN entry (s is NaN), gives NaN
  // everywhere in the row.
  const RowStats st = finish_stats(m, s);
  if (log) {
    store_row<P, N>(yr, rank, size, owned, v, [&](float xv) { return log_prob(xv, st); });
  } else {
    const float inv = isnan(st.log_sum) ? NAN : 1.0f / s;
    store_row<P, N>(yr, rank, size, owned, v, [&](float e) { return e * inv; });
  }
}

// The same, with the group's own reductions (register_row, register_warp).
template <int P, int N, class Group, class TX, class TY>
__device__ __forceinline__ void register_forward_row(const Group& g, const TX* xr, TY* yr, int owned, bool log) {
  register_forward_row<P, N>(
      g, xr, yr, owned, log, [&](float v) { return g.max(v); }, [&](float v) { return g.sum(v); });
}

// log-softmax backward of one row, gx = dy - exp(y) * sum(dy): dy is read once into registers for the
// sum and kept for the write; y is read once, in the write. dy stays in its storage type in the
// registers (widened to FP32 where it is used), so that y's loads have registers too.
template <int P, int N, class Group, class TY, class TG, class RowSum>
__device__ __forceinline__ void register_backward_row(const Group& g, const TY* yr, const TY* dyr, TG* gr, int owned,
                                                      RowSum&& row_sum) {
  const int stride = g.size() * N, first = g.rank() * N;
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
  s = row_sum(s);
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

// The same, with the group's own sum (register_row, register_warp).
template <int P, int N, class Group, class TY, class TG>
__device__ __forceinline__ void register_backward_row(const Group& g, const TY* yr, const TY* dyr, TG* gr, int owned) {
  register_backward_row<P, N>(g, yr, dyr, gr, owned, [&](float v) { return g.sum(v); });
}

// ---- the row kept as FP16 packs (packed_row: a block per row; packed_warp: a warp per row) ------------

// The base-2 exponentials of packed_online and packed_kept: log2(e) as a float (kept_frames.h), 2^t on
// the SFU with a subnormal result flushed, and a pack's largest value.
using kept_frames::kLog2e;

// 2^t on the SFU, a subnormal result flushed to zero (packed_online.cu's header, point 3).
__device__ __forceinline__ float ex2_ftz(float t) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
  return r;
}

// The largest of a pack's 8 values as FP32, NaN ignored as fmaxf ignores it (__hmax2: "if either of
// inputs is NaN, the other input is returned", cuda_fp16.h; one max.f16x2 per two values from sm_80).
// A pack of NaN only may give NaN, which the caller's fmaxf ignores in turn.
__device__ __forceinline__ float pack_max(const Pack<__half, 8>& p) {
  __half2 m2 = __halves2half2(p.v[0], p.v[1]);
#pragma unroll
  for (int k = 2; k < 8; k += 2) m2 = __hmax2(m2, __halves2half2(p.v[k], p.v[k + 1]));
  return fmaxf(__low2float(m2), __high2float(m2));
}

// out pack i = f(x) for every value x of the member's pack i, widened to FP32 (i < owned): the write of
// the rungs that keep the row as its FP16 packs.
template <int P, class TY, class F>
__device__ __forceinline__ void store_from_packs(TY* row, int rank, int size, int owned,
                                                 const Pack<__half, 8> (&raw)[P], F&& f) {
  store_packs<P, 8>(row, rank, size, owned, [&](int i, int k) { return f(to_f32(raw[i].v[k])); });
}

// Softmax or log-softmax of one FP16 row xr -> yr by group g, the row kept in registers as the 16-byte
// packs it arrives in (8 values per pack; the member's `owned` packs of its P, pack i of the member
// being pack rank + i * size of the row, as above), and exp() computed twice: once for the sum, once
// for the output. The same order as register_forward_row, so both give the same bits for the same
// group and packs.
template <int P, class Group, class TY>
__device__ __forceinline__ void packed_forward_row(const Group& g, const __half* xr, TY* yr, int owned, bool log) {
  constexpr int N = 8;  // FP16 values per 16-byte pack
  Pack<__half, N> raw[P];
  load_packs<P, N>(xr, g.rank(), g.size(), owned, raw);
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < P; ++i)
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (i < owned) m = fmaxf(m, to_f32(raw[i].v[k]));  // fmaxf ignores NaN; the sum below carries it
  m = g.max(m);
  // Sum of exp(x - max), in register_row's order (pack by pack, value by value); masked (-inf)
  // entries give exp(-inf) = 0.
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < P; ++i)
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (i < owned) s += expf(to_f32(raw[i].v[k]) - m);
  s = g.sum(s);
  // The NaN convention of finish_stats: no finite maximum, or a NaN entry (s is NaN), gives NaN
  // everywhere in the row.
  const RowStats st = finish_stats(m, s);
  const float inv = isnan(st.log_sum) ? NAN : 1.0f / s;
  store_from_packs<P>(yr, g.rank(), g.size(), owned, raw,
                      [&](float x) { return log ? log_prob(x, st) : expf(x - m) * inv; });  // the second exp()
}

// f(std::integral_constant<int, P>) for a per-thread count of the plan; only the counts for which
// Compiled(P, N) holds are instantiated (one kernel per count and dtype pair), any other throws.
template <bool (*Compiled)(int, int), int N, class F>
void with_per_thread(const char* rung, int per_thread, F&& f) {
  const auto call = [&](auto p) {
    if constexpr (Compiled(decltype(p)::value, N)) {
      f(p);
    } else {
      throw Error(detail::concat(rung, ": no kernel for ", decltype(p)::value, " packs of ", N));
    }
  };
  switch (per_thread) {
    case 1: call(std::integral_constant<int, 1>{}); return;
    case 2: call(std::integral_constant<int, 2>{}); return;
    case 4: call(std::integral_constant<int, 4>{}); return;
    case 8: call(std::integral_constant<int, 8>{}); return;
    case 16: call(std::integral_constant<int, 16>{}); return;
    case 32: call(std::integral_constant<int, 32>{}); return;
    default: throw Error(detail::concat(rung, ": no kernel for ", per_thread, " packs of ", N));
  }
}

// Values per access for these arguments: a 16-byte pack (8 FP16 or 4 FP32 values) when every row is a
// whole number of packs and the buffers are aligned, else 1 (the scalar path).
inline int path_width(const SoftmaxArgs& a) {
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

// What the rungs that keep a row as its FP16 packs in one block (packed_row, packed_online: the same
// plan) decline, and why; nullptr for the arguments they take. The registry names the rung.
inline const char* packed_block_unsupported(const SoftmaxArgs& a) {
  static_assert(register_row::packed::kMaxCols == 65536, "update the message below");
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax)
    return "this rung computes the forward softmax and log-softmax (backward: register_row, block_row; "
           "cross-entropy: fused_xent)";
  if (const char* why = unsupported_types(a)) return why;
  if (a.x_type != DType::f16) return "this rung keeps FP16 rows as their packs (FP32 rows: register_row)";
  // An empty row has nothing to do (softmax() returns before running any variant): not refused here.
  if (a.cols > 0 && register_row::packed::plan(a.cols, path_width(a)).threads == 0)
    return "this rung keeps a row in the registers of one block as 16-byte FP16 packs: at most 65536 columns, "
           "rows of whole packs (a multiple of 8 columns) in 16-byte-aligned buffers; other rows run in "
           "register_row, block_row or online";
  return nullptr;
}

// The host side of both rungs: launch(std::integral_constant<int, N>{}, x, y) with the typed buffers
// and N values per access (kVec<TX> on the packed path, 1 on the scalar path: path_width).
template <class Launch>
void run_by_width(const SoftmaxArgs& a, Launch&& launch) {
  const int width = path_width(a);
  with_type(a.x_type, [&](auto tx) {
    with_type(a.y_type, [&](auto ty) {
      using TX = decltype(tx);
      using TY = decltype(ty);
      const TX* x = static_cast<const TX*>(a.x);
      TY* y = static_cast<TY*>(a.y);
      if (width > 1) {
        launch(std::integral_constant<int, kVec<TX>>{}, x, y);
      } else {
        launch(std::integral_constant<int, 1>{}, x, y);
      }
    });
  });
}

}  // namespace hl::kernels::cuda::softmax_detail
