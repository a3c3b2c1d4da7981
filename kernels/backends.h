// The per-backend entry points behind the public kernel API (elementwise.h, reduce.h, softmax.h,
// optim.h). The public functions take a DeviceType and dispatch here (kernels/dispatch.cpp);
// GEMM and the softmax family dispatch through their variant registries instead (kernels/gemm.h,
// kernels/softmax.h).
//
// hl::kernels::cpu is implemented in kernels/cpu/*.cpp (the reference semantics: f16 emulated
// bit-exactly as f16 storage, f32 math, round-to-nearest-even on store).
// hl::kernels::cuda is implemented in kernels/cuda/*.cu and exists only in CUDA builds
// (HALFLING_WITH_CUDA); every function there launches on the halfling stream and checks the launch.
// Note for .cu files: CCCL (CUB, Thrust) owns a top-level namespace ::cuda, so never write
// `using namespace hl::kernels;` at global scope there: `cuda::` would become ambiguous.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/optim.h"
#include "kernels/reduce.h"

#define HL_DECLARE_BACKEND_KERNELS                                                                        \
  void binary(BinaryOp op, const BroadcastIndex& ix, const void* a, DType ta, const void* b, DType tb,     \
              void* out, DType tout);                                                                     \
  void unary(UnaryOp op, int64_t n, const void* x, DType tx, void* out, DType tout);                      \
  void relu_backward(int64_t n, const void* x, const void* grad_out, void* grad_in, DType t);             \
  void scalar(ScalarOp op, int64_t n, const void* x, double s, void* out, DType t);                       \
  void cast(int64_t n, const void* x, DType tx, void* out, DType tout);                                   \
  void fill(int64_t n, void* out, DType t, double value);                                                 \
  void reduce_sum(const ReduceIndex& ix, const void* x, DType tx, void* out, DType tout, double scale);   \
  void argmax_rows(int64_t rows, int64_t cols, const void* x, DType tx, int32_t* out);                    \
  void count_equal(int64_t n, const int32_t* a, const int32_t* b, int32_t* count);                        \
  void any_nonfinite(int64_t n, const void* x, DType tx, int32_t* flag);                                  \
  void nll_forward(int64_t rows, int64_t cols, const void* logp, DType t, const int32_t* labels,          \
                   void* loss);                                                                           \
  void nll_backward(int64_t rows, int64_t cols, const int32_t* labels, const void* gloss, void* glogp,    \
                    DType t);                                                                             \
  void sgd_update(const std::vector<ParamSlot>& slots, const SgdParams& p);                                \
  void adam_update(const std::vector<ParamSlot>& slots, const AdamParams& p);                              \
  void unscale_grads(const std::vector<GradSlot>& slots, float inv_scale, int32_t* found_inf,             \
                     const double* scale);                                                                 \
  void sum_of_squares(const std::vector<ConstSpan>& tensors, float* out);                                 \
  void clip_by_norm(const std::vector<Span>& grads, const float* sum_sq, double max_norm, double* norm_out);  \
  void optim_finish(const int32_t* skip, int64_t* applied_steps, const std::vector<int32_t*>& mark);      \
  void scaler_update(const ScalerRule& rule, ScalerState* state, const int32_t* found_inf, float* scale_f32, \
                     double* history_slot);

namespace hl::kernels::cpu {
HL_DECLARE_BACKEND_KERNELS
}  // namespace hl::kernels::cpu

#if defined(HALFLING_WITH_CUDA)
namespace hl::kernels::cuda {
HL_DECLARE_BACKEND_KERNELS
}  // namespace hl::kernels::cuda
#endif
