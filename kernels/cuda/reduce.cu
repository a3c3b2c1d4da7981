// CUDA reductions: sums over any set of dimensions (through CUB), row argmax, counting equal labels,
// and the inf/NaN check that drives dynamic loss scaling (paper §3.2).
//
// A fast generic reduction is not what this project teaches (DESIGN.md §7), so sums use CUB. What is
// shown here is how to feed it: a reduction over non-contiguous dimensions needs no transposed copy,
// only an input iterator that maps the j-th logical element to its place in memory and widens it to
// float as it is read (paper §3.3: sums of FP16 values are accumulated in FP32, never in FP16).
//
// One shape of sum gets kernels of its own, the "channel path" (kernels/reduce_plan.h says when and
// why; reduce_sum's choice for that shape since its H100 run, kChannelPathIsDefault): a bias
// gradient's per-channel sums, x seen as [A, C, B] and summed over A and B. The iterator above finds
// each element with a 64-bit division per dimension, and CUB's segmented reduction gives each of the C
// sums one block. On an H100, LeNet's first convolution's backward took 1.017 ms where its weight
// gradient takes 0.05: its bias gradient, 32 such sums of 100,352 values, is the likely cost, and
// reduce_bench timed CUB on that sum at 895-902 us against the channel path's 9-11 (the step itself
// not yet profiled with it: docs/gpu_status.md). The channel path reads
// 16-byte vectors with one division each and cuts every sum into slices, one block per slice; a second
// kernel adds a sum's slices in order. The same idea as batch norm's `split` variant (batchnorm.cu),
// whose statistics are such sums too.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <algorithm>
#include <mutex>
#include <type_traits>

#include "kernels/backends.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.cuh"
#include "kernels/reduce_plan.h"

namespace hl::kernels::cuda {

namespace {

// ---- CUB temporary storage -------------------------------------------------------------------------

// CUB needs scratch memory for every call. Allocating it each time would put cudaMalloc (which
// synchronizes the device) on the training hot path, so keep one grow-only buffer (scratch.cuh).
Scratch& cub_scratch() {
  static Scratch* ws = new Scratch();
  return *ws;
}

// The two-phase CUB idiom: ask for the scratch size, then run. `cub_call(temp, bytes)` makes the call.
template <class CubCall>
void run_cub(const char* what, CubCall&& cub_call) {
  Scratch& ws = cub_scratch();
  const std::lock_guard<std::mutex> lock(ws.mu);
  size_t bytes = 0;
  HL_CUDA_CHECK(cub_call(nullptr, bytes));
  // Never hand CUB a null pointer: with one it only reports the size again and does no work.
  void* temp = ws.reserve(std::max<size_t>(bytes, 4096));
  HL_CUDA_CHECK(cub_call(temp, bytes));
  HL_LAUNCH_CHECK(what);
}

// ---- reduce_sum ------------------------------------------------------------------------------------

// The reduction seen as out_numel segments of R elements each: logical element j belongs to output
// o = j / R and is the r = j % R-th element summed into it. Each of o and r is a multi-index over
// its own dimensions (kept, resp. reduced), and each dimension has its stride in the dense input.
struct ReduceLayout {
  int kept_ndim = 0, reduced_ndim = 0;
  int64_t kept_shape[kMaxDims] = {}, kept_stride[kMaxDims] = {};
  int64_t reduced_shape[kMaxDims] = {}, reduced_stride[kMaxDims] = {};
  int64_t R = 1;  // elements summed into each output

  __host__ __device__ int64_t offset(int64_t j) const {
    int64_t o = j / R, r = j - o * R, off = 0;
    for (int d = kept_ndim - 1; d >= 0; --d) {
      off += (o % kept_shape[d]) * kept_stride[d];
      o /= kept_shape[d];
    }
    for (int d = reduced_ndim - 1; d >= 0; --d) {
      off += (r % reduced_shape[d]) * reduced_stride[d];
      r /= reduced_shape[d];
    }
    return off;
  }
};

// `ix` should be reduce_plan::merged already: the fewer dimensions, the fewer divisions per element.
ReduceLayout make_layout(const ReduceIndex& ix) {
  ReduceLayout L;
  int64_t stride = 1;
  int64_t strides[kMaxDims] = {};
  for (int d = ix.ndim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= ix.shape[d];
  }
  for (int d = 0; d < ix.ndim; ++d) {
    if (ix.reduced[d]) {
      L.reduced_shape[L.reduced_ndim] = ix.shape[d];
      L.reduced_stride[L.reduced_ndim++] = strides[d];
    } else {
      L.kept_shape[L.kept_ndim] = ix.shape[d];
      L.kept_stride[L.kept_ndim++] = strides[d];
    }
  }
  L.R = ix.reduce_numel();
  return L;
}

// Input iterator functor: logical index j -> x at its physical offset, widened to C.
template <class C>
struct ReadElement {
  const void* x;
  DType tx;
  ReduceLayout layout;
  __device__ C operator()(int64_t j) const { return load_as<C>(x, tx, layout.offset(j)); }
};

// Begin offset of segment s (its end is the begin of s + 1).
struct SegmentStart {
  int64_t R;
  __host__ __device__ int64_t operator()(int64_t s) const { return s * R; }
};

// Output functor: CUB hands over (segment, sum); scale it and round once into the output dtype.
template <class C>
struct StoreScaled {
  void* out;
  DType tout;
  double scale;
  __device__ void operator()(int64_t o, C sum) const { store_double(out, tout, o, static_cast<double>(sum) * scale); }
};

// Nothing to add up (every reduced dimension has size 1): a strided copy, scaled. CUB would spend a
// whole block on every one-element segment.
template <class C>
__global__ void copy_scaled_kernel(int64_t n, ReadElement<C> read, StoreScaled<C> store) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) store(i, read(i));
}

// All-zero output for a reduction over an empty dimension (the sum of nothing).
__global__ void zero_kernel(int64_t n, void* out, DType tout) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) store_float(out, tout, i, 0.0f);
}

// ---- the channel path (kernels/reduce_plan.h) ------------------------------------------------------

constexpr int kChannelBlock = 256;

// T widened to the accumulator type C (float, or double for f64 inputs).
template <class C, class T>
__device__ __forceinline__ C widen(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return to_f32(v);
  }
}

// Block (c, slice) of the channel path: the sum of channel c's vectors [slice * chunk, slice * chunk +
// chunk), each thread adding its vectors in order, then the block's tree (block_reduce). With one slice
// per channel the block's sum is the channel's: scaled and rounded once into `out`. Otherwise it goes to
// partial[c * slices + slice] for channel_sum_finish_kernel.
template <class T, class C, int V>
__global__ void __launch_bounds__(kChannelBlock)
    channel_sum_kernel(reduce_plan::ChannelSum p, const T* x, C* partial, void* out, DType tout, double scale) {
  __shared__ C scratch[32];
  const int64_t c = blockIdx.x, slice = blockIdx.y;
  const int64_t begin = slice * p.chunk, end = min(begin + p.chunk, p.vectors);
  C acc = 0;
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    // One V-wide load (V == p.vec): B and x's address are multiples of it, so it is aligned and never
    // straddles two rows of B.
    const Pack<T, V> v = *reinterpret_cast<const Pack<T, V>*>(x + p.vector_offset(c, k));
#pragma unroll
    for (int e = 0; e < V; ++e) acc += widen<C>(v.v[e]);
  }
  const C total = block_reduce(acc, SumOp{}, C(0), scratch);
  if (threadIdx.x != 0) return;
  if (p.slices == 1) {
    store_double(out, tout, c, static_cast<double>(total) * scale);
  } else {
    partial[c * p.slices + slice] = total;
  }
}

// One thread per channel (grid-stride): its slices' partial sums in slice order, so the result does
// not depend on which block finished first; scaled and rounded once, as the CUB path's StoreScaled does.
template <class C>
__global__ void channel_sum_finish_kernel(reduce_plan::ChannelSum p, const C* partial, void* out, DType tout,
                                          double scale) {
  for (int64_t c = global_thread_index(); c < p.C; c += global_thread_count()) {
    C total = 0;
    for (int64_t s = 0; s < p.slices; ++s) total += partial[c * p.slices + s];
    store_double(out, tout, c, static_cast<double>(total) * scale);
  }
}

// The partial sums' buffer (scratch.cuh): slices x C accumulators, grow-only.
Scratch& channel_partials() {
  static Scratch* ws = new Scratch();
  return *ws;
}

template <class T, class C, int V>
void launch_channel_sum(const reduce_plan::ChannelSum& p, const void* x, void* out, DType tout, double scale) {
  cudaStream_t s = stream();
  Scratch& ws = channel_partials();
  const std::lock_guard<std::mutex> lock(ws.mu);
  C* partial = nullptr;
  if (p.slices > 1) partial = static_cast<C*>(ws.reserve(sizeof(C) * static_cast<size_t>(p.C * p.slices)));
  const dim3 grid(static_cast<unsigned>(p.C), static_cast<unsigned>(p.slices));
  channel_sum_kernel<T, C, V><<<grid, kChannelBlock, 0, s>>>(p, static_cast<const T*>(x), partial, out, tout, scale);
  HL_LAUNCH_CHECK("channel_sum_kernel (reduce_sum over [A, C, B] -> C)");
  if (p.slices > 1) {
    channel_sum_finish_kernel<C><<<grid_for(p.C), kBlock, 0, s>>>(p, partial, out, tout, scale);
    HL_LAUNCH_CHECK("channel_sum_finish_kernel (reduce_sum over [A, C, B] -> C)");
  }
}

// T's vector widths: as many as fit in 16 bytes (plan_channel_sum chose vec among them).
template <class T, class C>
void run_channel_sum(const reduce_plan::ChannelSum& p, const void* x, void* out, DType tout, double scale) {
  switch (p.vec) {
    case 1: return launch_channel_sum<T, C, 1>(p, x, out, tout, scale);
    case 2: return launch_channel_sum<T, C, 2>(p, x, out, tout, scale);
    default: break;
  }
  if constexpr (sizeof(T) <= 4) {
    if (p.vec == 4) return launch_channel_sum<T, C, 4>(p, x, out, tout, scale);
  }
  if constexpr (sizeof(T) <= 2) {
    if (p.vec == 8) return launch_channel_sum<T, C, 8>(p, x, out, tout, scale);
  }
  HL_CHECK(false, "reduce_sum: no channel-path kernel for vectors of ", p.vec, " elements of ", sizeof(T), " bytes");
}

// Whether the channel path took the sum (else the caller goes on to CUB).
bool try_channel_sum(const ReduceIndex& ix, const void* x, DType tx, void* out, DType tout, double scale) {
  if (!reduce_plan::channel_path_chosen()) return false;
  const reduce_plan::ChannelSum p = reduce_plan::plan_channel_sum(ix, dtype_size(tx), reduce_plan::address_alignment(x),
                                                                  sm_count(), kChannelBlock);
  if (!p.applies) return false;
  switch (tx) {
    case DType::f16: run_channel_sum<__half, float>(p, x, out, tout, scale); return true;
    case DType::f32: run_channel_sum<float, float>(p, x, out, tout, scale); return true;
    case DType::f64: run_channel_sum<double, double>(p, x, out, tout, scale); return true;
    case DType::i32: break;  // refused by reduce_sum's check_floating before it gets here
  }
  return false;
}

// ---- the CUB path ----------------------------------------------------------------------------------

template <class C>
void reduce_sum_typed(const ReduceIndex& ix_in, const void* x, DType tx, void* out, DType tout, double scale) {
  const ReduceIndex ix = reduce_plan::merged(ix_in);
  const int64_t out_n = ix.out_numel();
  const ReduceLayout layout = make_layout(ix);
  const auto in = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                                  ReadElement<C>{x, tx, layout});
  const auto store = thrust::make_tabulate_output_iterator(StoreScaled<C>{out, tout, scale});
  cudaStream_t s = stream();
  if (layout.R == 1) {
    copy_scaled_kernel<C><<<grid_for(out_n), kBlock, 0, s>>>(out_n, ReadElement<C>{x, tx, layout},
                                                              StoreScaled<C>{out, tout, scale});
    HL_LAUNCH_CHECK("copy_scaled_kernel (reduce_sum over dimensions of size 1)");
    return;
  }
  if (out_n == 1) {  // a full reduction: the whole GPU works on one sum
    const int64_t n = layout.R;
    run_cub("cub::DeviceReduce::Sum (reduce_sum)", [&](void* temp, size_t& bytes) {
      return cub::DeviceReduce::Sum(temp, bytes, in, store, n, s);
    });
    return;
  }
  // One segment per output element; a CUB block sums each segment.
  const auto begins = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), SegmentStart{layout.R});
  run_cub("cub::DeviceSegmentedReduce::Sum (reduce_sum)", [&](void* temp, size_t& bytes) {
    return cub::DeviceSegmentedReduce::Sum(temp, bytes, in, store, out_n, begins, begins + 1, s);
  });
}

// ---- argmax_rows -----------------------------------------------------------------------------------

// Is (v1 at i1) a better argmax than (v2 at i2)? Larger wins, NaN beats everything (like PyTorch and
// the CPU reference), and between equals the first index wins.
template <class C>
__device__ __forceinline__ bool better(C v1, int64_t i1, C v2, int64_t i2) {
  const bool nan1 = isnan(v1), nan2 = isnan(v2);
  if (nan1 != nan2) return nan1;
  if (!nan1 && v1 != v2) return v1 > v2;
  return i1 < i2;
}

// One warp per row: each lane scans every 32nd element, then the lanes compare by shuffles.
template <class C>
__global__ void argmax_rows_kernel(int64_t rows, int64_t cols, const void* x, DType tx, int32_t* out) {
  const int lane = threadIdx.x % 32;
  const int64_t first_warp = global_thread_index() / 32, warps = global_thread_count() / 32;
  for (int64_t r = first_warp; r < rows; r += warps) {
    C best_v = -INFINITY;
    int64_t best_i = INT64_MAX;  // loses every tie against a real element
    for (int64_t c = lane; c < cols; c += 32) {
      const C v = load_as<C>(x, tx, r * cols + c);
      if (better(v, c, best_v, best_i)) {
        best_v = v;
        best_i = c;
      }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      const C other_v = __shfl_xor_sync(0xFFFFFFFFu, best_v, offset);
      const int64_t other_i = __shfl_xor_sync(0xFFFFFFFFu, best_i, offset);
      if (better(other_v, other_i, best_v, best_i)) {
        best_v = other_v;
        best_i = other_i;
      }
    }
    if (lane == 0) out[r] = static_cast<int32_t>(best_i);
  }
}

// ---- count_equal, any_nonfinite --------------------------------------------------------------------

struct EqualAt {
  const int32_t* a;
  const int32_t* b;
  __device__ int32_t operator()(int64_t i) const { return a[i] == b[i] ? 1 : 0; }
};

// Every thread that sees an inf or NaN writes 1; the flag was zeroed before the launch. Threads
// racing to write the same value need no atomics.
template <class C>
__global__ void any_nonfinite_kernel(int64_t n, const void* x, DType tx, int32_t* flag) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    if (!isfinite(load_as<C>(x, tx, i))) *flag = 1;
  }
}

}  // namespace

void reduce_sum(const ReduceIndex& ix, const void* x, DType tx, void* out, DType tout, double scale) {
  check_floating(tx, "reduce_sum");
  check_floating(tout, "reduce_sum");
  const int64_t out_n = ix.out_numel();
  if (out_n == 0) return;
  if (ix.reduce_numel() == 0) {
    zero_kernel<<<grid_for(out_n), kBlock, 0, stream()>>>(out_n, out, tout);
    HL_LAUNCH_CHECK("zero_kernel (reduce_sum over an empty dimension)");
    return;
  }
  if (try_channel_sum(ix, x, tx, out, tout, scale)) return;
  // f64 inputs (gradient checks) keep double precision; everything else accumulates in f32.
  if (tx == DType::f64) {
    reduce_sum_typed<double>(ix, x, tx, out, tout, scale);
  } else {
    reduce_sum_typed<float>(ix, x, tx, out, tout, scale);
  }
}

void argmax_rows(int64_t rows, int64_t cols, const void* x, DType tx, int32_t* out) {
  check_floating(tx, "argmax");
  if (rows == 0) return;
  HL_CHECK(cols > 0, "argmax: rows of length 0 have no maximum");
  const unsigned blocks = grid_for(rows * 32);
  if (tx == DType::f64) {
    argmax_rows_kernel<double><<<blocks, kBlock, 0, stream()>>>(rows, cols, x, tx, out);
  } else {
    argmax_rows_kernel<float><<<blocks, kBlock, 0, stream()>>>(rows, cols, x, tx, out);
  }
  HL_LAUNCH_CHECK("argmax_rows_kernel");
}

void count_equal(int64_t n, const int32_t* a, const int32_t* b, int32_t* count) {
  cudaStream_t s = stream();
  if (n == 0) {
    HL_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int32_t), s));
    return;
  }
  const auto matches = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), EqualAt{a, b});
  run_cub("cub::DeviceReduce::Sum (count_equal)", [&](void* temp, size_t& bytes) {
    return cub::DeviceReduce::Sum(temp, bytes, matches, count, n, s);
  });
}

void any_nonfinite(int64_t n, const void* x, DType tx, int32_t* flag) {
  check_floating(tx, "any_nonfinite");
  HL_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int32_t), stream()));
  if (n == 0) return;
  // Checked in the dtype's own range: a huge f64 is finite even though it would overflow a float.
  if (tx == DType::f64) {
    any_nonfinite_kernel<double><<<grid_for(n), kBlock, 0, stream()>>>(n, x, tx, flag);
  } else {
    any_nonfinite_kernel<float><<<grid_for(n), kBlock, 0, stream()>>>(n, x, tx, flag);
  }
  HL_LAUNCH_CHECK("any_nonfinite_kernel");
}

}  // namespace hl::kernels::cuda
