// 2-D pooling over NCHW activations: max pool, average pool, and global average pool (average pool
// whose window is the whole plane). Forward and backward, CPU and CUDA (kernels/cnn_backends.h).
//
// Semantics (PyTorch's, with ceil_mode=False and dilation 1):
//   P = (H + 2*pad_h - kh) / stride_h + 1, Q likewise; the window of output (p, q) covers rows
//   p*stride_h - pad_h .. +kh-1 and columns q*stride_w - pad_w .. +kw-1.
//   padding may be at most half the window (pad_h <= kh/2), so every window holds a real element.
//   max:  padding counts as -infinity. Ties: the FIRST maximum in row-major window order wins (a later
//         equal value does not replace it). NaN propagates: once a window meets a NaN, that NaN is the
//         result and its position the argmax (the first NaN wins), so an overflow stays visible to the
//         loss scaler (paper §3.2). argmax holds h*W + w, the position inside the input plane.
//   avg:  padding counts as 0 and the divisor is always kh*kw (PyTorch's count_include_pad=True). Both
//         backends multiply by 1/(kh*kw) rather than divide, as the mean does: exact for power-of-two
//         windows, and for others an f32 result can be one ulp from PyTorch's division.
// Dtypes: x, y, dy, dx share one dtype t (f16, f32; f64 on the CPU for gradient checks); the window
// arithmetic is f32 (f64 for f64) and each output is rounded once. Backward passes GATHER (each dx
// element sums the windows that contain it), so they are deterministic and need no atomics; they
// write every element of dx (no beta).
#pragma once
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/half.h"

namespace hl::kernels {

struct Pool2dShape {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  HL_HOST_DEVICE int64_t P() const { return (H + 2 * pad_h - kh) / stride_h + 1; }
  HL_HOST_DEVICE int64_t Q() const { return (W + 2 * pad_w - kw) / stride_w + 1; }
};

// Throws hl::Error naming `op` and the shape when the shape is not a valid pooling problem.
void check_pool2d_shape(const Pool2dShape& s, const char* op);

// y[N,C,P,Q] = window max; argmax[N,C,P,Q] (i32, on the same device) = h*W + w of the chosen element.
void max_pool2d_forward(DeviceType dev, const Pool2dShape& s, const void* x, void* y, int32_t* argmax, DType t);
// dx[n,c,h,w] = sum of dy over the windows whose argmax is (h, w).
void max_pool2d_backward(DeviceType dev, const Pool2dShape& s, const void* dy, const int32_t* argmax, void* dx,
                         DType t);
// y = window mean (divisor kh*kw).
void avg_pool2d_forward(DeviceType dev, const Pool2dShape& s, const void* x, void* y, DType t);
// dx[n,c,h,w] = sum over windows containing (h, w) of dy / (kh*kw).
void avg_pool2d_backward(DeviceType dev, const Pool2dShape& s, const void* dy, void* dx, DType t);

}  // namespace hl::kernels
