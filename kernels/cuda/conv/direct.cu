// Convolution ladder, rung 1: "direct" — one thread per output element, FP32 accumulation.
//
// The first GPU convolution anyone writes, kept as the readable GPU reference every faster rung
// (im2col_gemm, implicit_gemm_wmma) is measured against. It is the CPU reference's loops moved onto
// threads: each thread owns one element of the pass's output (y, dx or dw), walks the taps that feed
// it, multiplies FP16 (or FP32) inputs and accumulates in FP32 (paper §3.3), and rounds once on the
// store after the epilogue (beta, bias, ReLU with NaN passing through).
//
// What makes it slow is the lesson for the next rungs: every input value is read from global memory
// once per output element that uses it (R*S*K times for x in the forward pass), with no reuse through
// shared memory or registers, and no Tensor Cores. The backward-weight pass is worse still: each
// thread sums N*P*Q products alone, so a 3x3 layer at batch 128 gives only K*C*9 threads of very long
// loops. Seeing every pass as a GEMM (kernels/conv.h) is what the next rungs build on.
#include <cuda_fp16.h>

#include "kernels/conv.h"
#include "kernels/cuda/common.cuh"

namespace hl::kernels::cuda {

namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// out[i] = act(v + beta*out[i] + bias[k]), rounded once. With beta == 0 out is never read (it may
// hold NaN).
__device__ __forceinline__ void finish(const ConvArgs& a, void* out, int64_t i, float v, int64_t k) {
  if (a.beta != 0.0f) v += a.beta * load_float(out, a.out_type, i);
  if (a.bias != nullptr) v += load_float(a.bias, a.bias_type, k);
  if (a.relu) v = v > 0.0f || v != v ? v : 0.0f;  // NaN stays NaN: an overflow must stay visible
  store_float(out, a.out_type, i, v);
}

// Consecutive threads own consecutive output elements (q fastest), so stores are coalesced and the
// reads of neighbouring threads land on neighbouring input columns.
template <class T>
__global__ void conv_direct_forward(ConvArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const int64_t P = a.P(), Q = a.Q(), total = a.N * a.K * P * Q;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t q = i % Q, p = (i / Q) % P, k = (i / (P * Q)) % a.K, n = i / (P * Q * a.K);
    float acc = 0.0f;
    for (int64_t c = 0; c < a.C; ++c) {
      const T* xc = x + (n * a.C + c) * a.H * a.W;
      const T* wc = w + (k * a.C + c) * a.R * a.S;
      for (int64_t r = 0; r < a.R; ++r) {
        const int64_t h = p * a.stride_h - a.pad_h + r;
        if (h < 0 || h >= a.H) continue;  // zero padding
        for (int64_t s = 0; s < a.S; ++s) {
          const int64_t ww = q * a.stride_w - a.pad_w + s;
          if (ww < 0 || ww >= a.W) continue;
          acc = fmaf(to_float(xc[h * a.W + ww]), to_float(wc[r * a.S + s]), acc);
        }
      }
    }
    finish(a, a.y, i, acc, k);
  }
}

// dx[n,c,h,w] = sum over the (k, r, s) whose output position p = (h + pad - r) / stride is whole and
// in range. Gathering (rather than scattering dy into dx with atomics) keeps it deterministic.
template <class T>
__global__ void conv_direct_backward_data(ConvArgs a) {
  const T* dy = static_cast<const T*>(a.dy);
  const T* w = static_cast<const T*>(a.w);
  const int64_t P = a.P(), Q = a.Q(), total = a.N * a.C * a.H * a.W;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t ww = i % a.W, h = (i / a.W) % a.H, c = (i / (a.H * a.W)) % a.C, n = i / (a.H * a.W * a.C);
    float acc = 0.0f;
    for (int64_t k = 0; k < a.K; ++k) {
      const T* dyk = dy + (n * a.K + k) * P * Q;
      const T* wk = w + (k * a.C + c) * a.R * a.S;
      for (int64_t r = 0; r < a.R; ++r) {
        const int64_t ph = h + a.pad_h - r;
        if (ph < 0 || ph % a.stride_h != 0 || ph / a.stride_h >= P) continue;
        const int64_t p = ph / a.stride_h;
        for (int64_t s = 0; s < a.S; ++s) {
          const int64_t qw = ww + a.pad_w - s;
          if (qw < 0 || qw % a.stride_w != 0 || qw / a.stride_w >= Q) continue;
          acc = fmaf(to_float(dyk[p * Q + qw / a.stride_w]), to_float(wk[r * a.S + s]), acc);
        }
      }
    }
    finish(a, a.dx, i, acc, 0);
  }
}

// dw[k,c,r,s] = sum over n, p, q of dy[n,k,p,q] * x[n,c,h,w]: one long dot product per thread.
template <class T>
__global__ void conv_direct_backward_weight(ConvArgs a) {
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const int64_t P = a.P(), Q = a.Q(), total = a.K * a.C * a.R * a.S;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t s = i % a.S, r = (i / a.S) % a.R, c = (i / (a.S * a.R)) % a.C, k = i / (a.S * a.R * a.C);
    float acc = 0.0f;
    for (int64_t n = 0; n < a.N; ++n) {
      const T* dyk = dy + (n * a.K + k) * P * Q;
      const T* xc = x + (n * a.C + c) * a.H * a.W;
      for (int64_t p = 0; p < P; ++p) {
        const int64_t h = p * a.stride_h - a.pad_h + r;
        if (h < 0 || h >= a.H) continue;
        for (int64_t q = 0; q < Q; ++q) {
          const int64_t ww = q * a.stride_w - a.pad_w + s;
          if (ww < 0 || ww >= a.W) continue;
          acc = fmaf(to_float(dyk[p * Q + q]), to_float(xc[h * a.W + ww]), acc);
        }
      }
    }
    finish(a, a.dw, i, acc, 0);
  }
}

template <class T>
void launch(const ConvArgs& a) {
  const int64_t n = a.out_numel();
  switch (a.pass) {
    case ConvPass::forward:
      conv_direct_forward<T><<<grid_for(n), kBlock, 0, stream()>>>(a);
      HL_LAUNCH_CHECK("conv_direct_forward");
      return;
    case ConvPass::backward_data:
      conv_direct_backward_data<T><<<grid_for(n), kBlock, 0, stream()>>>(a);
      HL_LAUNCH_CHECK("conv_direct_backward_data");
      return;
    case ConvPass::backward_weight:
      conv_direct_backward_weight<T><<<grid_for(n), kBlock, 0, stream()>>>(a);
      HL_LAUNCH_CHECK("conv_direct_backward_weight");
      return;
  }
}

void run(const ConvArgs& a) {
  if (a.in_type == DType::f16) {
    launch<__half>(a);
  } else {
    launch<float>(a);
  }
}

const char* unsupported(const ConvArgs& a) {
  if (a.in_type != DType::f16 && a.in_type != DType::f32) {
    return "the CUDA kernels take f16 or f32 inputs (f64 convolutions run on the CPU, for gradient checks)";
  }
  if (a.out_type != DType::f16 && a.out_type != DType::f32) return "the output must be f16 or f32";
  if (a.bias != nullptr && a.bias_type != DType::f16 && a.bias_type != DType::f32) {
    return "the bias must be f16 or f32";
  }
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(ConvArgs, {"direct", DeviceType::cuda, 10,
                               "one thread per output element, FP32 accumulation, no data reuse", run, unsupported});

}  // namespace hl::kernels::cuda
