// Shared plumbing for every CUDA kernel file: error checking, dtype-generic loads and stores, launch
// geometry and warp/block reductions.
//
// Why runtime-dtype loads instead of one template instantiation per dtype combination: a binary op
// alone has 3 x 3 x 3 input/output combinations. A switch on a dtype that is the same for every
// thread costs nothing next to the memory traffic of an elementwise kernel, and keeps each kernel
// readable as one function. The hot kernels of the GEMM ladder are templated instead.
//
// FP16 conversions use the cuda_fp16 intrinsics (__half2float, __float2half_rn, __double2half), which
// round to nearest, ties to even, exactly like hl::half on the CPU (kernels/half.h), so both backends
// agree bit for bit on every store.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/runtime.h"

// Throw hl::Error naming the failing call, where it was made, and CUDA's explanation. A failed call
// also leaves its error as the thread's last error: cleared here (a sticky error stays anyway), so that
// a caller that catches this and goes on does not see it blamed on the next kernel's HL_LAUNCH_CHECK.
#define HL_CUDA_CHECK(call)                                                                             \
  do {                                                                                                  \
    const cudaError_t hl_cuda_status_ = (call);                                                         \
    if (hl_cuda_status_ != cudaSuccess) {                                                               \
      cudaGetLastError();                                                                               \
      throw ::hl::Error(::hl::detail::concat("cuda: ", #call, " failed at ", __FILE__, ":", __LINE__,   \
                                             ": ", cudaGetErrorString(hl_cuda_status_), " (",           \
                                             cudaGetErrorName(hl_cuda_status_), ")"));                  \
    }                                                                                                   \
  } while (0)

// After every kernel launch: a bad launch configuration (or an earlier asynchronous fault) is
// reported here, naming the kernel, rather than at some unrelated later call.
#define HL_LAUNCH_CHECK(kernel_name)                                                                    \
  do {                                                                                                  \
    const cudaError_t hl_cuda_status_ = cudaGetLastError();                                             \
    if (hl_cuda_status_ != cudaSuccess) {                                                               \
      throw ::hl::Error(::hl::detail::concat("cuda: launch of ", kernel_name, " failed at ", __FILE__,  \
                                             ":", __LINE__, ": ", cudaGetErrorString(hl_cuda_status_),  \
                                             " (", cudaGetErrorName(hl_cuda_status_), ")"));            \
    }                                                                                                   \
  } while (0)

namespace hl::kernels::cuda {

// The halfling stream, typed (runtime.h hands it out as void* so that .cpp files need no CUDA headers).
inline cudaStream_t stream() { return static_cast<cudaStream_t>(runtime::cuda_stream()); }

constexpr int kBlock = 256;  // threads per block for the elementwise kernels

// cudaLaunchKernelEx's configuration for a grid of thread-block clusters (Hopper) of `cluster` blocks
// each, on the halfling stream: pass `&config`. The cluster attribute lives in the object, which
// config points at, so the object is neither copied nor moved. A launch's status is left for
// HL_LAUNCH_CHECK, which also clears it: thrown straight away, a refused cluster launch would stay
// behind as CUDA's last error and be reported later against some other kernel.
struct ClusterLaunch {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute cluster{};
  ClusterLaunch(dim3 grid, dim3 block, size_t dynamic_smem, dim3 blocks_per_cluster) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = dynamic_smem;
    config.stream = stream();
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = blocks_per_cluster.x;
    cluster.val.clusterDim.y = blocks_per_cluster.y;
    cluster.val.clusterDim.z = blocks_per_cluster.z;
    config.attrs = &cluster;
    config.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// N values of T moved as one access (16 bytes of halves or floats, or two such accesses for 8 floats):
// the softmax rungs' packed rows and the Hopper GEMM rungs' 8-column epilogue.
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Whether p may be read or written as a `bytes`-wide access (cudaMalloc gives 256 bytes; a view into
// the middle of a tensor may not). Host and device: the Hopper GEMM epilogue asks inside the kernel.
__host__ __device__ inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Blocks for a grid-stride loop over n elements. Capped because each thread loops over as many
// elements as needed: more blocks than the GPU can keep resident only adds scheduling overhead.
inline unsigned grid_for(int64_t n, int block = kBlock) {
  constexpr int64_t kMaxBlocks = 65535;
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// Streaming multiprocessors to plan a launch for (80 if the probe found none): the pipelined GEMM
// picks a smaller tile when a big one would leave most of them idle, and split-K (GEMM and the
// convolution's weight gradient) sizes its slices for them.
inline int sm_count() {
  const int n = runtime::cuda_sm_count();
  return n > 0 ? n : 80;
}

// The blocks of `kernel` this GPU holds at once with `threads` threads and `smem` bytes of dynamic
// shared memory each: its SMs times the blocks one SM holds (registers and shared memory decide), at
// least one per SM. A kernel above 48 KiB of dynamic shared memory must have been allowed it first
// (cudaFuncAttributeMaxDynamicSharedMemorySize). The split-K rules count waves of these
// (kernels/wave_split.h).
template <class Kernel>
int64_t blocks_at_once(Kernel* kernel, int threads, size_t smem) {
  int per_sm = 0;
  HL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return static_cast<int64_t>(sm_count()) * std::max(per_sm, 1);
}

// First index and stride of a 1-D grid-stride loop, in 64 bits (tensors may exceed 2^31 elements).
// The virtual architecture (ptxVersion: 80, 90, ...) of the code the driver loaded for `kernel` on
// this GPU; 0 when unknown (no GPU, or no loadable image, which the launch then reports). A rung whose
// body is compiled only for newer architectures checks it: a build without such code would run the
// empty version by JIT and leave its output unwritten.
template <class Kernel>
int loaded_ptx_version(Kernel* kernel) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();  // clear it: the launch, if any, will report the problem
    return 0;
  }
  return attr.ptxVersion;
}

__device__ __forceinline__ int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_thread_count() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// ---- typed conversions, for kernels templated on the storage type (softmax rungs, batch norm) -----

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// ---- loads: element i of a buffer of dtype t, widened to the compute type --------------------------

__device__ __forceinline__ float load_float(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::f64: return static_cast<float>(static_cast<const double*>(p)[i]);
    case DType::i32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
  }
  return 0.0f;
}

// Exact for every dtype: f16, f32 and i32 all fit in a double.
__device__ __forceinline__ double load_double(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::i32: return static_cast<const int32_t*>(p)[i];
  }
  return 0.0;
}

// ---- stores: round the compute value into dtype t (RNE; float -> i32 truncates toward zero) --------

__device__ __forceinline__ void store_float(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; return;
    case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(v); return;
    case DType::f64: static_cast<double*>(p)[i] = v; return;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;
  }
}

// double -> half is one rounding (cvt.rn.f16.f64), not two via float, like hl::double_to_half_bits.
__device__ __forceinline__ void store_double(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DType::f16: static_cast<__half*>(p)[i] = __double2half(v); return;
    case DType::f64: static_cast<double*>(p)[i] = v; return;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;
  }
}

// The same pair, selected by compute type C (float or double), for kernels templated on C.
template <class C>
__device__ __forceinline__ C load_as(const void* p, DType t, int64_t i) {
  if constexpr (sizeof(C) == sizeof(double)) {
    return load_double(p, t, i);
  } else {
    return load_float(p, t, i);
  }
}
template <class C>
__device__ __forceinline__ void store_as(void* p, DType t, int64_t i, C v) {
  if constexpr (sizeof(C) == sizeof(double)) {
    store_double(p, t, i, v);
  } else {
    store_float(p, t, i, v);
  }
}

// ---- math: single precision for float (expf, not a silent promotion to double), and the accurate
// library versions rather than the fast intrinsics (__expf), like the CPU reference --------------------
__device__ __forceinline__ float math_exp(float x) { return expf(x); }
__device__ __forceinline__ double math_exp(double x) { return exp(x); }
__device__ __forceinline__ float math_log(float x) { return logf(x); }
__device__ __forceinline__ double math_log(double x) { return log(x); }
__device__ __forceinline__ float math_pow(float x, float s) { return powf(x, s); }
__device__ __forceinline__ double math_pow(double x, double s) { return pow(x, s); }

// ---- warp and block reductions (shuffles, then one value per warp through shared memory) -----------

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  return v;
}

// Every thread of the block gets op over all threads' v. blockDim.x must be a multiple of 32 and at
// most 1024; `identity` is the neutral element (0 for sums, -inf for max). `scratch` is 32 values of
// shared memory, which may be reused by the next call: the leading barrier protects it.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? scratch[lane] : identity;
    v = warp_reduce(v, op);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
// fmax ignores a NaN operand; callers that must propagate NaN check for it separately.
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
};

// One block per row for row-wise kernels: enough threads to cover short rows, at most 256.
inline int row_block_size(int64_t cols) {
  int block = 32;
  while (block < 256 && block < cols) block *= 2;
  return block;
}

inline void check_floating(DType t, const char* op) {
  HL_CHECK(is_floating(t), op, ": needs a floating dtype, got ", dtype_name(t));
}

}  // namespace hl::kernels::cuda
