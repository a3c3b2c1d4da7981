// 2-D convolution, the operation that made Tensor Cores matter for vision models (paper §3.3: FP16
// products accumulated in FP32, exactly like GEMM, because a convolution IS a GEMM in disguise).
//
// Layout: NCHW for activations, KCRS for weights (PyTorch's layout; docs/conv.md explains the
// choice and what it costs next to NHWC on Tensor Cores).
//
//   forward          y[n,k,p,q]  = act( sum_{c,r,s} x[n,c,h,w] * w[k,c,r,s] (+ beta*y) + bias[k] )
//   backward_data    dx[n,c,h,w] = sum_{k,r,s} dy[n,k,p,q] * w[k,c,r,s]                 (+ beta*dx)
//   backward_weight  dw[k,c,r,s] = sum_{n,p,q} dy[n,k,p,q] * x[n,c,h,w]                 (+ beta*dw)
//
// where h = p*stride_h - pad_h + r and w = q*stride_w - pad_w + s (taps outside the input read 0),
// P = (H + 2*pad_h - R) / stride_h + 1 and Q = (W + 2*pad_w - S) / stride_w + 1.
//
// Seen as GEMMs (what the im2col and implicit-GEMM rungs exploit), with the im2col matrix
// X_col[(c,r,s), (n,p,q)]:
//   forward          Y[k, npq]  = W[k, crs]   * X_col[crs, npq]      (M=K,   N=NPQ, K=CRS)
//   backward_data    dX_col     = W^T[crs, k] * dY[k, npq], then col2im (scatter-add)
//   backward_weight  dW[k, crs] = dY[k, npq]  * X_col^T[npq, crs]    (M=K,   N=CRS, K=NPQ)
//
// Dtypes, as for GEMM (kernels/gemm.h): the inputs of a pass (x, w, dy) share one dtype in_type
// (f16, f32, or f64 on the CPU for gradient checks); the output (y, dx or dw) is f16 or f32 for
// f16/f32 inputs and f64 exactly for f64 inputs. Accumulation is f32 (f64 for f64), and the output
// is rounded once, on the store. beta == 0 means the output is not read (it may hold NaN); beta != 0
// lets a weight gradient accumulate into an existing one. bias (length K, forward only, may be null)
// and relu (forward only; NaN passes through so that an overflow stays visible to the loss scaler)
// form the epilogue.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "kernels/registry.h"

namespace hl::kernels {

enum class ConvPass : uint8_t { forward, backward_data, backward_weight };

const char* conv_pass_name(ConvPass p);

struct ConvArgs {
  static constexpr const char* family = "conv";
  static constexpr const char* env_var = "HALFLING_CONV";

  DeviceType device = DeviceType::cpu;
  ConvPass pass = ConvPass::forward;

  // Problem size: x is [N, C, H, W], w is [K, C, R, S], y is [N, K, P(), Q()].
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t K = 0, R = 0, S = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;

  // Operands. Which ones a pass reads and writes:
  //   forward:          reads x, w (and bias)   writes y
  //   backward_data:    reads dy, w             writes dx
  //   backward_weight:  reads x, dy             writes dw
  // All dense, NCHW / KCRS, no padding between rows.
  const void* x = nullptr;
  const void* w = nullptr;
  const void* dy = nullptr;
  void* y = nullptr;
  void* dx = nullptr;
  void* dw = nullptr;
  DType in_type = DType::f32;   // dtype of x, w and dy
  DType out_type = DType::f32;  // dtype of y, dx or dw (the pass's output)

  float beta = 0.0f;           // out = result + beta * out (beta == 0: out is write-only)
  const void* bias = nullptr;  // forward only: length K, dtype bias_type
  DType bias_type = DType::f32;
  bool relu = false;  // forward only

  // Usable in device code too (HL_HOST_DEVICE, kernels/half.h): the CUDA kernels take ConvArgs by value.
  HL_HOST_DEVICE int64_t P() const { return (H + 2 * pad_h - R) / stride_h + 1; }
  HL_HOST_DEVICE int64_t Q() const { return (W + 2 * pad_w - S) / stride_w + 1; }

  // The pass's output pointer (y, dx or dw) and its element count.
  void* out() const;
  int64_t out_numel() const;
  // Multiply-adds of the pass (N*K*P*Q*C*R*S for every pass): benchmarks report 2*macs/time.
  HL_HOST_DEVICE int64_t macs() const { return N * K * P() * Q() * C * R * S; }

  // "conv forward N=128 C=1 H=28 W=28 K=32 R=5 S=5 stride=1x1 pad=2x2 -> P=28 Q=28 f16->f16 +bias relu
  // on cuda": used in every error message.
  std::string describe() const;
};

// Checks the arguments (sizes, output size >= 1, pointers of the pass, dtypes) and runs the selected
// variant: `variant` if given, else the registry's choice (kernels/registry.h; HALFLING_CONV).
void conv2d(const ConvArgs& args, const std::string& variant = "");

using ConvRegistry = Registry<ConvArgs>;

}  // namespace hl::kernels
