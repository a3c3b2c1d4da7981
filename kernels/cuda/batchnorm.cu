// CUDA batch norm (kernels/batchnorm.h has the semantics; kernels/cpu/batchnorm_cpu.cpp is the
// reference).
//
// One block per channel: the block's threads stride over the channel's N*H*W values, reduce in f32
// registers, then combine through shared memory (block_reduce, kernels/cuda/common.cuh). The
// statistics use two passes over the data — the mean, then the mean squared deviation from it —
// instead of E[x^2] - E[x]^2, whose cancellation loses every digit when the mean is large next to the
// spread. Everything is f32 (paper §3.3 and DESIGN.md §3: batch-norm statistics in FP32), so FP16
// activations whose variance exceeds 65504 still give finite statistics. The CPU reference sums in
// double; the tests bound the difference.
#include <cmath>

#include "kernels/cnn_backends.h"
#include "kernels/cuda/common.cuh"

namespace hl::kernels::cuda {

namespace {

constexpr int kBnBlock = 256;

// Element j of channel c, with j = n*HW + i running over the channel's M = N*HW values.
__device__ __forceinline__ int64_t channel_index(const BatchNormShape& s, int64_t c, int64_t j) {
  const int64_t n = j / s.HW, i = j % s.HW;
  return (n * s.C + c) * s.HW + i;
}

__global__ void bn_forward_train_kernel(BatchNormShape s, const void* x, void* y, DType t, const float* gamma,
                                        const float* beta, float* running_mean, float* running_var,
                                        float* save_mean, float* save_invstd, float momentum, float eps) {
  __shared__ float scratch[32];
  const int64_t c = blockIdx.x, M = s.N * s.HW;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) sum += load_float(x, t, channel_index(s, c, j));
  const float mean = block_reduce(sum, SumOp{}, 0.0f, scratch) / static_cast<float>(M);
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const float d = load_float(x, t, channel_index(s, c, j)) - mean;
    sq = fmaf(d, d, sq);
  }
  const float ssd = block_reduce(sq, SumOp{}, 0.0f, scratch);
  const float var = ssd / static_cast<float>(M);
  const float inv = 1.0f / sqrtf(var + eps);
  if (threadIdx.x == 0) {
    save_mean[c] = mean;
    save_invstd[c] = inv;
    if (running_mean != nullptr) {
      const float unbiased = ssd / static_cast<float>(M - 1);
      running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean;
      running_var[c] = (1.0f - momentum) * running_var[c] + momentum * unbiased;
    }
  }
  const float scale = gamma[c] * inv, shift = beta[c] - mean * scale;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t o = channel_index(s, c, j);
    store_float(y, t, o, load_float(x, t, o) * scale + shift);
  }
}

__global__ void bn_forward_eval_kernel(BatchNormShape s, const void* x, void* y, DType t, const float* gamma,
                                       const float* beta, const float* running_mean, const float* running_var,
                                       float eps) {
  const int64_t total = s.N * s.C * s.HW;
  for (int64_t o = global_thread_index(); o < total; o += global_thread_count()) {
    const int64_t c = (o / s.HW) % s.C;
    const float scale = gamma[c] / sqrtf(running_var[c] + eps);
    const float shift = beta[c] - running_mean[c] * scale;
    store_float(y, t, o, load_float(x, t, o) * scale + shift);
  }
}

__global__ void bn_backward_kernel(BatchNormShape s, const void* x, const void* dy, void* dx, DType t,
                                   const float* gamma, const float* save_mean, const float* save_invstd,
                                   float* dgamma, float* dbeta) {
  __shared__ float scratch[32];
  const int64_t c = blockIdx.x, M = s.N * s.HW;
  const float mean = save_mean[c], inv = save_invstd[c];
  float sdy = 0.0f, sdyx = 0.0f;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t o = channel_index(s, c, j);
    const float g = load_float(dy, t, o);
    sdy += g;
    sdyx = fmaf(g, (load_float(x, t, o) - mean) * inv, sdyx);
  }
  sdy = block_reduce(sdy, SumOp{}, 0.0f, scratch);
  sdyx = block_reduce(sdyx, SumOp{}, 0.0f, scratch);
  if (threadIdx.x == 0) {
    dbeta[c] = sdy;
    dgamma[c] = sdyx;
  }
  const float k = gamma[c] * inv, mdy = sdy / static_cast<float>(M), mdyx = sdyx / static_cast<float>(M);
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t o = channel_index(s, c, j);
    const float xhat = (load_float(x, t, o) - mean) * inv;
    store_float(dx, t, o, k * (load_float(dy, t, o) - mdy - xhat * mdyx));
  }
}

void check_gpu_types(DType t, DType tp, const char* op) {
  HL_CHECK(t == DType::f16 || t == DType::f32, op, ": the CUDA kernels take f16 or f32 data, got ", dtype_name(t),
           " (f64 runs on the CPU, for gradient checks)");
  HL_CHECK(tp == DType::f32, op, ": parameters and statistics must be f32 on the GPU, got ", dtype_name(tp));
}

// gridDim.x is at most 2^31-1, far beyond any channel count.
unsigned channel_grid(int64_t C) { return static_cast<unsigned>(C); }

}  // namespace

void batch_norm_forward_train(const BatchNormShape& s, const void* x, void* y, DType t, const void* gamma,
                              const void* beta, void* running_mean, void* running_var, void* save_mean,
                              void* save_invstd, DType tp, double momentum, double eps) {
  check_gpu_types(t, tp, "batch_norm");
  bn_forward_train_kernel<<<channel_grid(s.C), kBnBlock, 0, stream()>>>(
      s, x, y, t, static_cast<const float*>(gamma), static_cast<const float*>(beta),
      static_cast<float*>(running_mean), static_cast<float*>(running_var), static_cast<float*>(save_mean),
      static_cast<float*>(save_invstd), static_cast<float>(momentum), static_cast<float>(eps));
  HL_LAUNCH_CHECK("bn_forward_train_kernel");
}

void batch_norm_forward_eval(const BatchNormShape& s, const void* x, void* y, DType t, const void* gamma,
                             const void* beta, const void* running_mean, const void* running_var, DType tp,
                             double eps) {
  check_gpu_types(t, tp, "batch_norm (eval)");
  const int64_t n = s.N * s.C * s.HW;
  bn_forward_eval_kernel<<<grid_for(n), kBlock, 0, stream()>>>(
      s, x, y, t, static_cast<const float*>(gamma), static_cast<const float*>(beta),
      static_cast<const float*>(running_mean), static_cast<const float*>(running_var), static_cast<float>(eps));
  HL_LAUNCH_CHECK("bn_forward_eval_kernel");
}

void batch_norm_backward(const BatchNormShape& s, const void* x, const void* dy, void* dx, DType t,
                         const void* gamma, const void* save_mean, const void* save_invstd, void* dgamma,
                         void* dbeta, DType tp) {
  check_gpu_types(t, tp, "batch_norm_backward");
  bn_backward_kernel<<<channel_grid(s.C), kBnBlock, 0, stream()>>>(
      s, x, dy, dx, t, static_cast<const float*>(gamma), static_cast<const float*>(save_mean),
      static_cast<const float*>(save_invstd), static_cast<float*>(dgamma), static_cast<float*>(dbeta));
  HL_LAUNCH_CHECK("bn_backward_kernel");
}

}  // namespace hl::kernels::cuda
