// Softmax ladder, the counter-example: "naive_fp16_nomax" — FP16 arithmetic and no max subtraction.
// Teaching only: its priority is below every other rung and it is never chosen unless asked for by
// name (--softmax naive_fp16_nomax, HALFLING_SOFTMAX, or a test).
//
// What changes from `naive`: two things every other rung does right are undone. exp(x) is taken of
// the raw logit, and the exponentials, their running sum and the quotient are all FP16 values. FP16's
// largest finite value is 65504 and exp(11.09) already reaches it: a logit of 12 gives exp(12) =
// 162754.8 -> inf, the sum is inf, and the row becomes inf / inf = NaN at that entry and 0 elsewhere.
// The FP32-math rungs give the exact answer for the same row (paper §3.3: softmax must run in FP32,
// and subtracting the maximum keeps every exp() in [0, 1]).
//
// Bit-for-bit, it follows the CPU emulation in kernels/cpu/softmax_cpu.cpp: the sum and the quotient
// are float operations on FP16 operands rounded once to FP16, which is the correctly rounded FP16
// operation (float carries more than twice FP16's 11 bits, so the double rounding is innocuous).
// exp() is expf rounded to FP16; CUDA's expf and the host's may differ by an FP32 ulp, which moves the
// FP16 result by one FP16 ulp in rare cases (the tests allow exactly that).
#include "kernels/cuda/softmax/softmax_common.cuh"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;

__global__ void naive_fp16_nomax_kernel(int64_t rows, int64_t cols, const __half* x, __half* y) {
  for (int64_t r = global_thread_index(); r < rows; r += global_thread_count()) {
    const __half* row = x + r * cols;
    __half sum = __float2half_rn(0.0f);
    for (int64_t c = 0; c < cols; ++c) {
      const __half e = __float2half_rn(expf(__half2float(row[c])));  // inf as soon as x > 11.09
      sum = __float2half_rn(__half2float(sum) + __half2float(e));
    }
    for (int64_t c = 0; c < cols; ++c) {
      const __half e = __float2half_rn(expf(__half2float(row[c])));
      y[r * cols + c] = __float2half_rn(__half2float(e) / __half2float(sum));  // inf / inf = NaN
    }
  }
}

void run(const SoftmaxArgs& a) {
  constexpr int kThreads = 128;
  naive_fp16_nomax_kernel<<<grid_for(a.rows, kThreads), kThreads, 0, stream()>>>(
      a.rows, a.cols, static_cast<const __half*>(a.x), static_cast<__half*>(a.y));
  HL_LAUNCH_CHECK("naive_fp16_nomax_kernel");
}

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax) return "the teaching variant computes the softmax forward only";
  if (a.x_type != DType::f16 || a.y_type != DType::f16) return "the teaching variant is FP16 in, FP16 out";
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(SoftmaxArgs, {"naive_fp16_nomax", DeviceType::cuda, -100,
                                  "teaching only: FP16 math, no max subtraction (overflows for a logit of 12)",
                                  run, unsupported});

}  // namespace hl::kernels::cuda
