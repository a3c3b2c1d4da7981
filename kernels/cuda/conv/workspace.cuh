// Scratch device memory for the convolution rungs that need it (im2col_gemm's X_col and FP32 GEMM
// results, implicit_gemm_wmma's split-K partial sums).
//
// The rungs share one grow-only buffer (kernels/cuda/scratch.cuh says why, and how it stays safe):
// the mutex is held while a call queues its kernels. cudaMallocAsync on the halfling stream would
// also be stream-ordered, but its pool hands memory back to the driver at synchronizations unless
// its release threshold is tuned; one cached buffer is simpler to reason about.
#pragma once
#include "kernels/cuda/scratch.cuh"

namespace hl::kernels::cuda::conv_detail {

// One instance for the whole library (an inline function's static). Never freed: destroying it at
// exit could run after the CUDA runtime has shut down.
inline Scratch& workspace() {
  static Scratch* ws = new Scratch();
  return *ws;
}

}  // namespace hl::kernels::cuda::conv_detail
