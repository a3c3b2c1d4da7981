// Convolution ladder, rung 2: "im2col_gemm" — unfold the input into a matrix, then call the GEMM.
//
// What changes from rung 1 (direct): the arithmetic moves out of this file. Every pass of a
// convolution is a matrix product (kernels/conv.h), so this rung only rearranges memory — an im2col
// kernel writes the input patches as the columns of X_col[(c,r,s), (n,p,q)] — and hands the product
// to the public kernels::gemm(), i.e. to whatever the GEMM registry ranks best on this GPU (the WMMA
// Tensor Core rungs of kernels/cuda/gemm/, FP16 products accumulated in FP32: paper §3.3). Nothing of
// the GEMM is copied here: as the GEMM ladder gets faster, so does this rung.
//
//   forward          Acc[k, npq]  = W[k, crs] * X_col[crs, npq]      gemm NN  M=K    N=nb*PQ  K=CRS
//                    then one epilogue kernel: y (NCHW) = act(Acc + bias[k] + beta*y)
//   backward_data    dX_col[crs, npq] = W^T[crs, k] * dY'[k, npq]    gemm TN  M=CRS  N=nb*PQ  K=K
//                    then col2im as a gather: one thread per dx element sums its R*S column entries
//   backward_weight  dW[k, crs] (+)= dY'[k, npq] * X_col^T[npq, crs] gemm NT  M=K    N=CRS    K=nb*PQ
//                    chunks accumulate through the GEMM's beta
//
// Design choices, each for a reason:
//   * Batching: X_col holds the columns of nb images side by side ([CRS, nb*PQ]), so one GEMM covers
//     nb images. One GEMM per image would have N = PQ = 64 columns on the 8x8 VGG layer: far too
//     few tiles to fill a GPU, and 128 launches per call. nb is as large as the workspace budget
//     allows: at batch 128, all the images of most benchmark layers; VGG-small's 64->64 layer
//     (32x32) takes two chunks in the backward data pass (107 images fit at f16) and in every f32 pass.
//   * The price of batching is layout: the GEMM produces [K, nb*PQ] but y is NCHW [nb, K, PQ]. The
//     forward GEMM therefore writes an FP32 scratch matrix, and a small epilogue kernel adds the bias,
//     applies beta and ReLU, rounds once and scatters into NCHW. The GEMM's own fused epilogue cannot
//     do the bias here anyway: GemmArgs' bias runs along N (columns), and ours runs along M (output
//     channels). Transposing the problem (Y^T[npq, k] = X_col^T * W^T) would put the bias along N, but
//     produce NHWC, not the NCHW the framework uses. The extra pass over y costs little next to X_col.
//   * dY is NCHW too, so backward_data and backward_weight first permute it into dY'[k, nb*PQ] (one
//     pass over dY, so that the GEMM's K (resp. N) dimension runs over all nb images).
//   * col2im is a gather (each thread owns one dx element and reads the <= R*S column entries that
//     came from it), not a scatter with atomicAdd: no atomics, and the summation order is fixed, so
//     results are bit-for-bit reproducible. dX_col is kept in FP32 so the R*S partial sums are not
//     rounded to FP16 before they are added: dx is rounded once, on the store.
//   * Workspace: the cached, grow-only buffer of kernels/cuda/conv/workspace.cuh (device memory from the
//     framework's allocator is out of reach of kernels/; that file says why a cached buffer rather
//     than cudaMallocAsync), held under its mutex while this call queues its kernels.
//   * Chunking: the images are processed nb at a time so that the workspace stays within the budget
//     (HALFLING_IM2COL_WORKSPACE_BYTES overrides it; the tests set it small to exercise chunking). One
//     image is the least a chunk can hold, so an image that needs more than the budget on its own (64
//     channels of 512x512 in f16 need 369 MB) still runs, and the grow-only workspace keeps that size.
//
// What stays slow is the lesson for rung 3 (implicit_gemm_wmma): X_col is C*R*S*P*Q values per image
// (9x the input for 3x3, 25x for 5x5), written to global memory and read back by the GEMM. The
// implicit GEMM computes those addresses inside the GEMM's tile loader instead.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "kernels/conv.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv/workspace.cuh"
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

// Default cap on the workspace (X_col, the permuted dY, the FP32 GEMM results of one chunk).
constexpr size_t kDefaultBudget = size_t{256} << 20;

size_t workspace_budget() {
  if (const char* env = std::getenv("HALFLING_IM2COL_WORKSPACE_BYTES")) {
    const long long v = std::atoll(env);
    if (v > 0) return static_cast<size_t>(v);
  }
  return kDefaultBudget;
}

constexpr size_t kAlign = 256;
size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// The problem sizes as the kernels need them (int64: NCHW tensors may exceed 2^31 elements).
struct Dims {
  int64_t C, H, W, K, R, S, P, Q, PQ, RS, CRS;
  int64_t sh, sw, ph, pw;
  int64_t n0, nb, cols, ld;  // this chunk: first image, images, columns (nb*PQ), row stride (>= cols)
};

Dims make_dims(const ConvArgs& a) {
  Dims d{};
  d.C = a.C, d.H = a.H, d.W = a.W, d.K = a.K, d.R = a.R, d.S = a.S, d.P = a.P(), d.Q = a.Q();
  d.PQ = d.P * d.Q, d.RS = d.R * d.S, d.CRS = d.C * d.RS;
  d.sh = a.stride_h, d.sw = a.stride_w, d.ph = a.pad_h, d.pw = a.pad_w;
  return d;
}

// X_col[crs, i*PQ + p*Q + q] = x[n0+i, c, p*sh - ph + r, q*sw - pw + s], 0 in the padding. One
// thread per element; consecutive threads write consecutive columns (coalesced stores, and the loads
// of a row walk along w).
template <class T>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ col, Dims d) {
  const int64_t total = d.CRS * d.cols;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t j = i % d.cols, row = i / d.cols;
    const int64_t img = j / d.PQ, pq = j % d.PQ, p = pq / d.Q, q = pq % d.Q;
    const int64_t c = row / d.RS, rs = row % d.RS, r = rs / d.S, s = rs % d.S;
    const int64_t h = p * d.sh - d.ph + r, w = q * d.sw - d.pw + s;
    T v = T(0.0f);
    if (h >= 0 && h < d.H && w >= 0 && w < d.W) v = x[(((d.n0 + img) * d.C + c) * d.H + h) * d.W + w];
    col[row * d.ld + j] = v;
  }
}

// dY'[k, i*PQ + pq] = dy[n0+i, k, pq]: the chunk's output gradient with the images side by side.
template <class T>
__global__ void permute_dy_kernel(const T* __restrict__ dy, T* __restrict__ dyp, Dims d) {
  const int64_t total = d.K * d.cols;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t j = i % d.cols, k = i / d.cols, img = j / d.PQ, pq = j % d.PQ;
    dyp[k * d.ld + j] = dy[((d.n0 + img) * d.K + k) * d.PQ + pq];
  }
}

// out[idx] = act(v + beta*out[idx] + bias[k]), rounded once. With beta == 0 out is never read.
__device__ __forceinline__ void finish(const ConvArgs& a, void* out, int64_t idx, float v, int64_t k) {
  if (a.beta != 0.0f) v += a.beta * load_float(out, a.out_type, idx);
  if (a.bias != nullptr) v += load_float(a.bias, a.bias_type, k);
  if (a.relu) v = v > 0.0f || v != v ? v : 0.0f;  // NaN stays NaN: an overflow must stay visible
  store_float(out, a.out_type, idx, v);
}

// Forward epilogue: Acc[k, i*PQ + pq] (FP32) -> y[n0+i, k, pq] (NCHW), one thread per y element in
// y's order, so the stores are coalesced and the loads run along Acc's rows.
__global__ void forward_epilogue_kernel(ConvArgs a, const float* __restrict__ acc, Dims d) {
  const int64_t total = d.nb * d.K * d.PQ;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t pq = i % d.PQ, k = (i / d.PQ) % d.K, img = i / (d.PQ * d.K);
    finish(a, a.y, d.n0 * d.K * d.PQ + i, acc[k * d.ld + img * d.PQ + pq], k);
  }
}

// col2im as a gather: dx[n0+i, c, h, w] = sum of dX_col[(c,r,s), (i,p,q)] over the taps (r, s) whose
// output position p = (h + ph - r) / sh, q = (w + pw - s) / sw is whole and inside the output.
// Deterministic: a fixed order per element and no atomics.
__global__ void col2im_kernel(ConvArgs a, const float* __restrict__ dcol, Dims d) {
  const int64_t total = d.nb * d.C * d.H * d.W;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t w = i % d.W, h = (i / d.W) % d.H, c = (i / (d.W * d.H)) % d.C, img = i / (d.W * d.H * d.C);
    float v = 0.0f;
    for (int64_t r = 0; r < d.R; ++r) {
      const int64_t ph = h + d.ph - r;
      if (ph < 0 || ph % d.sh != 0 || ph / d.sh >= d.P) continue;
      const int64_t p = ph / d.sh;
      for (int64_t s = 0; s < d.S; ++s) {
        const int64_t qw = w + d.pw - s;
        if (qw < 0 || qw % d.sw != 0 || qw / d.sw >= d.Q) continue;
        v += dcol[((c * d.R + r) * d.S + s) * d.ld + img * d.PQ + p * d.Q + qw / d.sw];
      }
    }
    finish(a, a.dx, d.n0 * d.C * d.H * d.W + i, v, 0);
  }
}

// Backward-weight epilogue when an FP16 dw is accumulated over several chunks in FP32:
// dw = acc + beta * dw, rounded once.
__global__ void weight_epilogue_kernel(ConvArgs a, const float* __restrict__ acc, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) finish(a, a.dw, i, acc[i], 0);
}

GemmArgs base_gemm(const ConvArgs& a) {
  GemmArgs g;
  g.device = DeviceType::cuda;
  g.ab_type = a.in_type;
  return g;
}

template <class T>
void run_typed(const ConvArgs& a) {
  Dims d = make_dims(a);
  const size_t es = sizeof(T);
  // Bytes one image adds to the workspace in this pass (the rounding of ld to 8 columns aside).
  size_t per_image = 0;
  switch (a.pass) {
    case ConvPass::forward: per_image = d.PQ * (d.CRS * es + d.K * 4); break;         // X_col + FP32 Acc
    case ConvPass::backward_data: per_image = d.PQ * (d.K * es + d.CRS * 4); break;   // dY' + FP32 dX_col
    case ConvPass::backward_weight: per_image = d.PQ * (d.CRS + d.K) * es; break;     // X_col + dY'
  }
  const int64_t nb_max =
      std::clamp<int64_t>(static_cast<int64_t>(workspace_budget() / std::max<size_t>(per_image, 1)), 1, a.N);
  const int64_t chunks = (a.N + nb_max - 1) / nb_max;
  // Row stride of X_col, dY' and the FP32 results: a multiple of 8 elements, so that the WMMA GEMM
  // rungs can move rows as 16-byte vectors.
  const int64_t ld = (nb_max * d.PQ + 7) / 8 * 8;
  // An FP16 dw accumulated over several chunks is summed in an FP32 buffer and rounded once at the end.
  const bool weight_acc = a.pass == ConvPass::backward_weight && a.out_type != DType::f32 && chunks > 1;

  size_t off_b = 0, off_c = 0, total = 0;
  switch (a.pass) {
    case ConvPass::forward:  // [0] X_col [CRS, ld] in T, [1] Acc [K, ld] in f32
      off_b = align_up(d.CRS * ld * es);
      total = off_b + align_up(d.K * ld * 4);
      break;
    case ConvPass::backward_data:  // [0] dY' [K, ld] in T, [1] dX_col [CRS, ld] in f32
      off_b = align_up(d.K * ld * es);
      total = off_b + align_up(d.CRS * ld * 4);
      break;
    case ConvPass::backward_weight:  // [0] X_col [CRS, ld], [1] dY' [K, ld] in T, [2] dW acc [K, CRS] f32
      off_b = align_up(d.CRS * ld * es);
      off_c = off_b + align_up(d.K * ld * es);
      total = off_c + (weight_acc ? align_up(d.K * d.CRS * 4) : 0);
      break;
  }

  Scratch& ws = conv_detail::workspace();
  const std::lock_guard<std::mutex> lock(ws.mu);  // held until every kernel of this call is queued
  char* base = static_cast<char*>(ws.reserve(total));
  T* buf0 = reinterpret_cast<T*>(base);
  void* buf1 = base + off_b;
  float* buf2 = reinterpret_cast<float*>(base + off_c);

  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  for (int64_t n0 = 0; n0 < a.N; n0 += nb_max) {
    d.n0 = n0;
    d.nb = std::min(nb_max, a.N - n0);
    d.cols = d.nb * d.PQ;
    d.ld = ld;
    GemmArgs g = base_gemm(a);
    switch (a.pass) {
      case ConvPass::forward: {
        im2col_kernel<T><<<grid_for(d.CRS * d.cols), kBlock, 0, stream()>>>(x, buf0, d);
        HL_LAUNCH_CHECK("im2col_kernel");
        g.op_a = Op::N, g.op_b = Op::N, g.M = d.K, g.N = d.cols, g.K = d.CRS;
        g.A = a.w, g.lda = d.CRS, g.B = buf0, g.ldb = ld, g.C = buf1, g.ldc = ld, g.c_type = DType::f32;
        gemm(g);
        forward_epilogue_kernel<<<grid_for(d.nb * d.K * d.PQ), kBlock, 0, stream()>>>(
            a, static_cast<const float*>(buf1), d);
        HL_LAUNCH_CHECK("forward_epilogue_kernel");
        break;
      }
      case ConvPass::backward_data: {
        permute_dy_kernel<T><<<grid_for(d.K * d.cols), kBlock, 0, stream()>>>(dy, buf0, d);
        HL_LAUNCH_CHECK("permute_dy_kernel");
        g.op_a = Op::T, g.op_b = Op::N, g.M = d.CRS, g.N = d.cols, g.K = d.K;
        g.A = a.w, g.lda = d.CRS, g.B = buf0, g.ldb = ld, g.C = buf1, g.ldc = ld, g.c_type = DType::f32;
        gemm(g);
        col2im_kernel<<<grid_for(d.nb * d.C * d.H * d.W), kBlock, 0, stream()>>>(a, static_cast<const float*>(buf1), d);
        HL_LAUNCH_CHECK("col2im_kernel");
        break;
      }
      case ConvPass::backward_weight: {
        im2col_kernel<T><<<grid_for(d.CRS * d.cols), kBlock, 0, stream()>>>(x, buf0, d);
        HL_LAUNCH_CHECK("im2col_kernel");
        permute_dy_kernel<T><<<grid_for(d.K * d.cols), kBlock, 0, stream()>>>(dy, static_cast<T*>(buf1), d);
        HL_LAUNCH_CHECK("permute_dy_kernel");
        g.op_a = Op::N, g.op_b = Op::T, g.M = d.K, g.N = d.CRS, g.K = d.cols;
        g.A = buf1, g.lda = ld, g.B = buf0, g.ldb = ld, g.ldc = d.CRS;
        // The first chunk applies the caller's beta, the later ones add to what is there (beta 1).
        if (weight_acc) {
          g.C = buf2, g.c_type = DType::f32, g.beta = n0 == 0 ? 0.0f : 1.0f;
        } else {
          g.C = a.dw, g.c_type = a.out_type, g.beta = n0 == 0 ? a.beta : 1.0f;
        }
        gemm(g);
        break;
      }
    }
  }
  if (weight_acc) {
    weight_epilogue_kernel<<<grid_for(d.K * d.CRS), kBlock, 0, stream()>>>(a, buf2, d.K * d.CRS);
    HL_LAUNCH_CHECK("weight_epilogue_kernel");
  }
}

void run(const ConvArgs& a) {
  if (a.in_type == DType::f16) {
    run_typed<__half>(a);
  } else {
    run_typed<float>(a);
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

HL_REGISTER_VARIANT(ConvArgs, {"im2col_gemm", DeviceType::cuda, 20,
                               "im2col into a cached workspace, then the registry's best CUDA GEMM", run, unsupported});

}  // namespace hl::kernels::cuda
