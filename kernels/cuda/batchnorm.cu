// CUDA batch norm (kernels/batchnorm.h has the semantics and the two variants; kernels/cpu/batchnorm_cpu.cpp
// is the reference). Paper §3.3 and DESIGN.md §3: batch-norm statistics in FP32, whatever the
// activations' dtype, so FP16 activations whose variance exceeds 65504 still give finite statistics.
// The statistics use two passes over the data — the mean, then the mean squared deviation from it —
// instead of E[x^2] - E[x]^2, whose cancellation loses every digit when the mean is large next to the
// spread. The CPU reference sums in double; the tests bound the difference.
// The same cancellation is why the normalization is y = (x - mean) * scale + beta and not the folded
// x * scale + (beta - mean * scale): when a channel's spread is small next to sqrt(eps), scale =
// gamma * invstd reaches a few hundred, x * scale a few thousand, and the folded form's two roundings
// of that product leave an absolute error near 1e-4 in an output of a few hundredths (ten FP16 ulps;
// seen on an H200, 2026-11-26, in CudaBatchNorm.ChannelsPastOneGridOfThreads). x - mean is exact or
// nearly so, and the one fma rounds a value the size of y.
//
// Two registry variants (HALFLING_BN, --bn):
//
// `per_channel`: one block per channel. The block's threads stride over the channel's N*H*W values,
// reduce in f32 registers, then combine through shared memory (block_reduce, kernels/cuda/common.cuh);
// the same block then normalizes. One launch per pass, easy to read, but only C blocks run.
//
// `split`: what per_channel leaves on the table. VGG-small's first layers have C = 64 channels of
// 131,072 values each: 64 blocks on a 132-SM GPU, each one streaming its 256 KiB alone, with a 64-bit
// division per value to find it and 2-byte loads. split cuts every channel into S slices
// (plan_batch_norm_split): S x C blocks each reduce one slice to a partial sum; a one-thread-per-
// channel kernel adds the S partials in slice order (so the result does not depend on scheduling);
// the elementwise pass runs over the whole tensor. Values are read 16 bytes at a time (8 f16 or 4 f32)
// whenever H*W is a multiple of that and the pointers are aligned, and located with one division per
// vector. Launches: 4 for the forward (sums, deviations, statistics, normalize), 3 for the backward.
#include <cmath>

#include "kernels/batchnorm.h"
#include "kernels/cnn_backends.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.cuh"

namespace hl::kernels::cuda {

namespace {

constexpr int kBnBlock = 256;

// Element j of channel c, with j = n*HW + i running over the channel's M = N*HW values.
__device__ __forceinline__ int64_t channel_index(const BatchNormShape& s, int64_t c, int64_t j) {
  const int64_t n = j / s.HW, i = j % s.HW;
  return (n * s.C + c) * s.HW + i;
}

// A channel's statistics from its mean and its sum of squared deviations `ssd` over M values, the
// same in both variants: the biased variance normalizes (channel_invstd); the unbiased one,
// ssd / (M - 1), goes into the running variance, as in PyTorch (save_channel_stats).
__device__ __forceinline__ float channel_invstd(float ssd, int64_t M, float eps) {
  const float var = ssd / static_cast<float>(M);
  return 1.0f / sqrtf(var + eps);
}

__device__ __forceinline__ void save_channel_stats(int64_t c, float mean, float inv, float ssd, int64_t M,
                                                   float* running_mean, float* running_var, float* save_mean,
                                                   float* save_invstd, float momentum) {
  save_mean[c] = mean;
  save_invstd[c] = inv;
  if (running_mean != nullptr) {
    const float unbiased = ssd / static_cast<float>(M - 1);
    running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean;
    running_var[c] = (1.0f - momentum) * running_var[c] + momentum * unbiased;
  }
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
  const float inv = channel_invstd(ssd, M, eps);
  if (threadIdx.x == 0)
    save_channel_stats(c, mean, inv, ssd, M, running_mean, running_var, save_mean, save_invstd, momentum);
  const float scale = gamma[c] * inv, b = beta[c];
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t o = channel_index(s, c, j);
    store_float(y, t, o, fmaf(load_float(x, t, o) - mean, scale, b));
  }
}

__global__ void bn_forward_eval_kernel(BatchNormShape s, const void* x, void* y, DType t, const float* gamma,
                                       const float* beta, const float* running_mean, const float* running_var,
                                       float eps) {
  const int64_t total = s.N * s.C * s.HW;
  for (int64_t o = global_thread_index(); o < total; o += global_thread_count()) {
    const int64_t c = (o / s.HW) % s.C;
    const float scale = gamma[c] / sqrtf(running_var[c] + eps);
    store_float(y, t, o, fmaf(load_float(x, t, o) - running_mean[c], scale, beta[c]));
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

// ---- split: S blocks per channel ---------------------------------------------------------------

// V consecutive elements starting at element o (a multiple of V; 16 bytes when V > 1), widened to f32.
template <class T, int V>
__device__ __forceinline__ void load_vec(const T* p, int64_t o, float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = to_f32(p[o]);
  } else {
    static_assert(V * sizeof(T) == 16, "a vector is 16 bytes");
    const uint4 raw = *reinterpret_cast<const uint4*>(p + o);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = to_f32(e[k]);
  }
}

template <class T, int V>
__device__ __forceinline__ void store_vec(T* p, int64_t o, const float (&v)[V]) {
  if constexpr (V == 1) {
    p[o] = from_f32<T>(v[0]);
  } else {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int k = 0; k < V; ++k) e[k] = from_f32<T>(v[k]);
    *reinterpret_cast<uint4*>(p + o) = raw;
  }
}

// The channel's mean from its S partial sums, added in slice order: every block (and the statistics
// kernel) that computes it gets the same float.
__device__ __forceinline__ float split_mean(const float* sums, int64_t c, int64_t S, int64_t M) {
  float t = 0.0f;
  for (int64_t k = 0; k < S; ++k) t += sums[c * S + k];
  return t / static_cast<float>(M);
}

// Block (c, slice): the partial sum of x over the slice (kDeviations = false), or of (x - mean)^2
// with the mean from the first pass's partial sums (kDeviations = true).
template <class T, int V, bool kDeviations>
__global__ void bn_split_reduce_kernel(BatchNormShape s, BatchNormSplit p, const T* x, const float* sums, float* out) {
  __shared__ float scratch[32];
  __shared__ float mean_shared;
  const int64_t c = blockIdx.x, slice = blockIdx.y, S = p.blocks_per_channel;
  float mean = 0.0f;
  if constexpr (kDeviations) {
    if (threadIdx.x == 0) mean_shared = split_mean(sums, c, S, s.N * s.HW);
    __syncthreads();
    mean = mean_shared;
  }
  const int64_t begin = slice * p.chunk, end = min(begin + p.chunk, p.vectors);
  float acc = 0.0f;
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    float v[V];
    load_vec<T, V>(x, bn_channel_vector_offset(s, V, c, k), v);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if constexpr (kDeviations) {
        const float d = v[e] - mean;
        acc = fmaf(d, d, acc);
      } else {
        acc += v[e];
      }
    }
  }
  const float total = block_reduce(acc, SumOp{}, 0.0f, scratch);
  if (threadIdx.x == 0) out[c * S + slice] = total;
}

// One thread per channel (grid-stride: grid_for caps the grid at 65535 blocks, and C may exceed
// 65535 x 256): the statistics from the partial sums, the running statistics, and the per-channel
// scale, mean and beta the normalize pass applies (y = (x - mean) * scale + beta, the top of this file
// says why not a folded shift).
__global__ void bn_split_stats_kernel(BatchNormShape s, int64_t S, const float* sums, const float* ssds,
                                      const float* gamma, const float* beta, float* running_mean, float* running_var,
                                      float* save_mean, float* save_invstd, float* affine, float momentum,
                                      float eps) {
  const int64_t M = s.N * s.HW;
  for (int64_t c = global_thread_index(); c < s.C; c += global_thread_count()) {
    const float mean = split_mean(sums, c, S, M);
    float ssd = 0.0f;
    for (int64_t k = 0; k < S; ++k) ssd += ssds[c * S + k];
    const float inv = channel_invstd(ssd, M, eps);
    save_channel_stats(c, mean, inv, ssd, M, running_mean, running_var, save_mean, save_invstd, momentum);
    affine[3 * c] = gamma[c] * inv;
    affine[3 * c + 1] = mean;
    affine[3 * c + 2] = beta[c];
  }
}

// Over the whole tensor, vector k = element k*V (its channel: bn_vector_channel).
template <class T, int V>
__global__ void bn_split_normalize_kernel(BatchNormShape s, const T* x, T* y, const float* affine) {
  const int64_t total = s.N * s.C * (s.HW / V);
  for (int64_t k = global_thread_index(); k < total; k += global_thread_count()) {
    const int64_t c = bn_vector_channel(s, V, k);
    const float scale = affine[3 * c], mean = affine[3 * c + 1], b = affine[3 * c + 2];
    float v[V];
    load_vec<T, V>(x, k * V, v);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = fmaf(v[e] - mean, scale, b);
    store_vec<T, V>(y, k * V, v);
  }
}

// Block (c, slice) of the backward: partial sums of dy and of dy * xhat over the slice.
template <class T, int V>
__global__ void bn_split_grad_reduce_kernel(BatchNormShape s, BatchNormSplit p, const T* x, const T* dy,
                                            const float* save_mean, const float* save_invstd, float* sdy_out,
                                            float* sdyx_out) {
  __shared__ float scratch[32];
  const int64_t c = blockIdx.x, slice = blockIdx.y, S = p.blocks_per_channel;
  const float mean = save_mean[c], inv = save_invstd[c];
  const int64_t begin = slice * p.chunk, end = min(begin + p.chunk, p.vectors);
  float sdy = 0.0f, sdyx = 0.0f;
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
    const int64_t o = bn_channel_vector_offset(s, V, c, k);
    float xv[V], gv[V];
    load_vec<T, V>(x, o, xv);
    load_vec<T, V>(dy, o, gv);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      sdy += gv[e];
      sdyx = fmaf(gv[e], (xv[e] - mean) * inv, sdyx);
    }
  }
  sdy = block_reduce(sdy, SumOp{}, 0.0f, scratch);
  sdyx = block_reduce(sdyx, SumOp{}, 0.0f, scratch);
  if (threadIdx.x == 0) {
    sdy_out[c * S + slice] = sdy;
    sdyx_out[c * S + slice] = sdyx;
  }
}

// One thread per channel (grid-stride, as bn_split_stats_kernel): dbeta, dgamma, and the three
// coefficients of dx.
__global__ void bn_split_grad_stats_kernel(BatchNormShape s, int64_t S, const float* sdys, const float* sdyxs,
                                           const float* gamma, const float* save_invstd, float* dgamma, float* dbeta,
                                           float* coef) {
  const float M = static_cast<float>(s.N * s.HW);
  for (int64_t c = global_thread_index(); c < s.C; c += global_thread_count()) {
    float sdy = 0.0f, sdyx = 0.0f;
    for (int64_t k = 0; k < S; ++k) {
      sdy += sdys[c * S + k];
      sdyx += sdyxs[c * S + k];
    }
    dbeta[c] = sdy;
    dgamma[c] = sdyx;
    coef[3 * c] = gamma[c] * save_invstd[c];
    coef[3 * c + 1] = sdy / M;
    coef[3 * c + 2] = sdyx / M;
  }
}

template <class T, int V>
__global__ void bn_split_grad_input_kernel(BatchNormShape s, const T* x, const T* dy, T* dx, const float* save_mean,
                                           const float* save_invstd, const float* coef) {
  const int64_t total = s.N * s.C * (s.HW / V);
  for (int64_t k = global_thread_index(); k < total; k += global_thread_count()) {
    const int64_t c = bn_vector_channel(s, V, k);
    const float mean = save_mean[c], inv = save_invstd[c];
    const float kc = coef[3 * c], mdy = coef[3 * c + 1], mdyx = coef[3 * c + 2];
    float xv[V], gv[V], out[V];
    load_vec<T, V>(x, k * V, xv);
    load_vec<T, V>(dy, k * V, gv);
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = kc * (gv[e] - mdy - (xv[e] - mean) * inv * mdyx);
    store_vec<T, V>(dx, k * V, out);
  }
}

// The partial sums (2 x C x S floats) and the per-channel coefficients (3 x C) of a call.
Scratch& split_scratch() {
  static Scratch s;
  return s;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

BatchNormSplit split_plan(const BatchNormArgs& a) {
  const bool aligned = a.pass == BatchNormArgs::Pass::forward_train
                           ? aligned16(a.x) && aligned16(a.y)
                           : aligned16(a.x) && aligned16(a.dy) && aligned16(a.dx);
  return plan_batch_norm_split(a.s, a.t, sm_count(), kBnBlock, aligned);
}

template <class T, int V>
void split_forward(const BatchNormArgs& a, const BatchNormSplit& p, float* work) {
  const int64_t C = a.s.C, S = p.blocks_per_channel;
  float* sums = work;
  float* ssds = work + C * S;
  float* affine = work + 2 * C * S;
  const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(S));
  const T* x = static_cast<const T*>(a.x);
  bn_split_reduce_kernel<T, V, false><<<grid, kBnBlock, 0, stream()>>>(a.s, p, x, nullptr, sums);
  HL_LAUNCH_CHECK("bn_split_reduce_kernel (sums)");
  bn_split_reduce_kernel<T, V, true><<<grid, kBnBlock, 0, stream()>>>(a.s, p, x, sums, ssds);
  HL_LAUNCH_CHECK("bn_split_reduce_kernel (deviations)");
  bn_split_stats_kernel<<<grid_for(C), kBlock, 0, stream()>>>(a.s, S, sums, ssds, a.gamma, a.beta, a.running_mean,
                                                               a.running_var, a.save_mean, a.save_invstd,
                                                               affine, a.momentum, a.eps);
  HL_LAUNCH_CHECK("bn_split_stats_kernel");
  bn_split_normalize_kernel<T, V><<<grid_for(a.s.N * C * a.s.HW / V), kBlock, 0, stream()>>>(
      a.s, x, static_cast<T*>(a.y), affine);
  HL_LAUNCH_CHECK("bn_split_normalize_kernel");
}

template <class T, int V>
void split_backward(const BatchNormArgs& a, const BatchNormSplit& p, float* work) {
  const int64_t C = a.s.C, S = p.blocks_per_channel;
  float* sdys = work;
  float* sdyxs = work + C * S;
  float* coef = work + 2 * C * S;
  const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(S));
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  bn_split_grad_reduce_kernel<T, V><<<grid, kBnBlock, 0, stream()>>>(a.s, p, x, dy, a.save_mean, a.save_invstd, sdys,
                                                                       sdyxs);
  HL_LAUNCH_CHECK("bn_split_grad_reduce_kernel");
  bn_split_grad_stats_kernel<<<grid_for(C), kBlock, 0, stream()>>>(a.s, S, sdys, sdyxs, a.gamma, a.save_invstd,
                                                                    a.dgamma, a.dbeta, coef);
  HL_LAUNCH_CHECK("bn_split_grad_stats_kernel");
  bn_split_grad_input_kernel<T, V><<<grid_for(a.s.N * C * a.s.HW / V), kBlock, 0, stream()>>>(
      a.s, x, dy, static_cast<T*>(a.dx), a.save_mean, a.save_invstd, coef);
  HL_LAUNCH_CHECK("bn_split_grad_input_kernel");
}

void run_split(const BatchNormArgs& a) {
  const BatchNormSplit p = split_plan(a);
  Scratch& scratch = split_scratch();
  std::lock_guard<std::mutex> lock(scratch.mu);
  // 2 x C x S partial sums, then 3 floats per channel (the forward's scale, mean and beta; the
  // backward's three coefficients of dx).
  float* work = static_cast<float*>(scratch.reserve(static_cast<size_t>(a.s.C * (2 * p.blocks_per_channel + 3)) * 4));
  const bool half = a.t == DType::f16;
  if (a.pass == BatchNormArgs::Pass::forward_train) {
    if (half) (p.vec == 8 ? split_forward<__half, 8> : split_forward<__half, 1>)(a, p, work);
    else (p.vec == 4 ? split_forward<float, 4> : split_forward<float, 1>)(a, p, work);
  } else {
    if (half) (p.vec == 8 ? split_backward<__half, 8> : split_backward<__half, 1>)(a, p, work);
    else (p.vec == 4 ? split_backward<float, 4> : split_backward<float, 1>)(a, p, work);
  }
}

// gridDim.y (the slices) is at most 65535: plan_batch_norm_split asks for at most 4 x SMs per
// channel, so this holds on every GPU there is; the check keeps a future one honest.
const char* unsupported_split(const BatchNormArgs& a) {
  return split_plan(a).blocks_per_channel > 65535 ? "more than 65535 slices per channel" : nullptr;
}

// ---- per_channel: one block per channel (the kernels at the top of this file) --------------------

void run_per_channel(const BatchNormArgs& a) {
  if (a.pass == BatchNormArgs::Pass::forward_train) {
    bn_forward_train_kernel<<<channel_grid(a.s.C), kBnBlock, 0, stream()>>>(
        a.s, a.x, a.y, a.t, a.gamma, a.beta, a.running_mean, a.running_var, a.save_mean, a.save_invstd, a.momentum,
        a.eps);
    HL_LAUNCH_CHECK("bn_forward_train_kernel");
  } else {
    bn_backward_kernel<<<channel_grid(a.s.C), kBnBlock, 0, stream()>>>(a.s, a.x, a.dy, a.dx, a.t, a.gamma,
                                                                        a.save_mean, a.save_invstd, a.dgamma, a.dbeta);
    HL_LAUNCH_CHECK("bn_backward_kernel");
  }
}

// split was opt-in until its tests, the sanitizers and bn_bench ran on a GPU (registry.h): on an H200
// (2026-11-26, bench/results/gpu_short_nvidia_h200_2026-11-26.txt) VGG-small's six batch norms,
// forward and backward, took 228 us with split against 1996 us with per_channel (f16). It is the
// default since; per_channel stays as the readable rung.
HL_REGISTER_VARIANT(BatchNormArgs, {"per_channel", DeviceType::cuda, 10,
                                    "one block per channel reduces and normalizes (C blocks)", run_per_channel,
                                    nullptr});
HL_REGISTER_VARIANT(BatchNormArgs, {"split", DeviceType::cuda, 20,
                                    "S blocks per channel, partials combined in order, 16-byte loads, "
                                    "a separate elementwise pass",
                                    run_split, unsupported_split});

}  // namespace

void batch_norm_forward_train(const BatchNormShape& s, const void* x, void* y, DType t, const void* gamma,
                              const void* beta, void* running_mean, void* running_var, void* save_mean,
                              void* save_invstd, DType tp, double momentum, double eps) {
  check_gpu_types(t, tp, "batch_norm");
  BatchNormArgs a;
  a.pass = BatchNormArgs::Pass::forward_train;
  a.s = s;
  a.t = t;
  a.x = x;
  a.y = y;
  a.gamma = static_cast<const float*>(gamma);
  a.beta = static_cast<const float*>(beta);
  a.running_mean = static_cast<float*>(running_mean);
  a.running_var = static_cast<float*>(running_var);
  a.save_mean = static_cast<float*>(save_mean);
  a.save_invstd = static_cast<float*>(save_invstd);
  a.momentum = static_cast<float>(momentum);
  a.eps = static_cast<float>(eps);
  BatchNormRegistry::instance().select(a).run(a);
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
  BatchNormArgs a;
  a.pass = BatchNormArgs::Pass::backward;
  a.s = s;
  a.t = t;
  a.x = x;
  a.dy = dy;
  a.dx = dx;
  a.gamma = static_cast<const float*>(gamma);
  a.save_mean = static_cast<float*>(const_cast<void*>(save_mean));
  a.save_invstd = static_cast<float*>(const_cast<void*>(save_invstd));
  a.dgamma = static_cast<float*>(dgamma);
  a.dbeta = static_cast<float*>(dbeta);
  BatchNormRegistry::instance().select(a).run(a);
}

}  // namespace hl::kernels::cuda
