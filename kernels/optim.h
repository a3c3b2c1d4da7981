// Optimizer kernels: the fused, multi-tensor passes of mixed-precision training (paper §3.1, §3.2).
//
// One call covers every parameter of the model:
//  - unscale_grads: g32 = g * (1/S) for all gradients at once, raising one found-inf flag;
//  - sgd_update / adam_update: the update applied to the FP32 master weights, and the FP16 working
//    copy rewritten from them in the same pass (no second kernel, no second read of the masters).
// Moments (momentum, Adam's m and v) are always FP32. Each pass checks every slot before it writes any:
// a bad slot throws and leaves every tensor as it was, on the CPU as on the GPU.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/scaler_rule.h"

namespace hl::kernels {

// One parameter's update. master, grad, buf1 and buf2 all have dtype state_type: f32, or f64 for
// f64 parameters (CPU only; used by exact-arithmetic tests).
struct ParamSlot {
  void* param = nullptr;  // the model's weights: f32, f16 (the working copy) or f64
  DType param_type = DType::f32;
  void* master = nullptr;       // FP32 master weights (mixed precision), or null: update `param` directly
  const void* grad = nullptr;   // the unscaled gradient
  void* buf1 = nullptr;         // SGD momentum / Adam first moment (null when unused)
  void* buf2 = nullptr;         // Adam second moment
  DType state_type = DType::f32;
  int64_t n = 0;
  bool first_step = false;  // SGD momentum: the buffer starts as the gradient (PyTorch semantics)
  // When set, an i32 in device memory that replaces first_step: the update is the buffer's first
  // when *initialized == 0. Kept on the device because whether an earlier step was applied is only
  // known there (the loss scaler's skip); optim_finish() sets it after an applied update.
  const int32_t* initialized = nullptr;
};

struct SgdParams {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // When set (an i32 in device memory, normally the loss scaler's found-inf flag) and nonzero, the
  // update writes nothing: the step is skipped without the host reading the flag.
  const int32_t* skip = nullptr;
};

struct AdamParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;  // AdamW: decay the weights directly instead of adding wd*w to the gradient
  int64_t step = 1;        // t, counted from 1, for the bias corrections
  // When set, device memory replacing `step`: t = *applied_steps + 1 (the updates really applied,
  // which only the device knows when steps may be skipped); and the skip flag as for SGD.
  const int64_t* applied_steps = nullptr;
  const int32_t* skip = nullptr;
};

// PyTorch's SGD on every slot: g = grad + wd*w; buf = first ? g : momentum*buf + (1-dampening)*g;
// g = nesterov ? g + momentum*buf : buf; w -= lr*g. w is the master when present (then param is
// rewritten from it), else param itself; the arithmetic is f32 (f64 for f64 params).
void sgd_update(DeviceType dev, const std::vector<ParamSlot>& slots, const SgdParams& p);

// PyTorch's Adam / AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps); AdamW first multiplies w by (1 - lr*wd).
void adam_update(DeviceType dev, const std::vector<ParamSlot>& slots, const AdamParams& p);

// One gradient to unscale: out[i] = grad[i] * inv_scale, computed in the dtype of out (f32, or f64
// for f64 gradients). out may alias grad when the dtypes match.
struct GradSlot {
  const void* grad = nullptr;
  DType grad_type = DType::f32;
  void* out = nullptr;
  DType out_type = DType::f32;
  int64_t n = 0;
};
// The loss scaler's fused pass: unscale every gradient and set *found_inf (an i32 on the device,
// not cleared here) to 1 if any input is inf or NaN. When `scale` (a double in device memory) is
// given, inv_scale is ignored and the kernel uses float(1.0 / *scale): the scale never visits the host.
void unscale_grads(DeviceType dev, const std::vector<GradSlot>& slots, float inv_scale, int32_t* found_inf,
                   const double* scale = nullptr);

// A read-only view of one tensor's elements.
struct ConstSpan {
  const void* data = nullptr;
  DType type = DType::f32;
  int64_t n = 0;
};
// *out (an f32 on the device) = sum over all tensors of x^2, for gradient clipping by global norm.
void sum_of_squares(DeviceType dev, const std::vector<ConstSpan>& tensors, float* out);

// A writable view of one tensor's elements.
struct Span {
  void* data = nullptr;
  DType type = DType::f32;
  int64_t n = 0;
};
// Gradient clipping by global norm without a host round trip: *norm_out (an f64 on the device) =
// sqrt(*sum_sq), and when factor = max_norm / (norm + 1e-6) is below 1, every element is multiplied
// by it (in the tensor's dtype, as a scalar multiply would). An infinite norm zeroes the finite
// gradients (inf * 0 = NaN stays non-finite), as PyTorch does. A NaN norm leaves the gradients alone,
// where PyTorch multiplies them all by NaN (its clamp keeps a NaN factor): a NaN gradient is there
// either way, and the loss scaler's flag, raised before clipping, skips such a step.
void clip_by_norm(DeviceType dev, const std::vector<Span>& grads, const float* sum_sq, double max_norm,
                  double* norm_out);

// After an update that may have been skipped: unless *skip (when given) is nonzero, add one to
// *applied_steps (an i64 in device memory; null: no count) and set every flag in `mark` to 1 (SGD's "momentum
// buffer initialized"). A separate launch so that no multi-block update kernel both reads and
// writes these.
void optim_finish(DeviceType dev, const int32_t* skip, int64_t* applied_steps, const std::vector<int32_t*>& mark);

// The loss scaler's update on the device: *history_slot = the scale in force, then
// scaler_rule(rule, *state, found_inf && *found_inf) (kernels/scaler_rule.h), then
// *scale_f32 = float(new scale) (what scale(loss) multiplies by). found_inf may be null (no check).
void scaler_update(DeviceType dev, const ScalerRule& rule, ScalerState* state, const int32_t* found_inf,
                   float* scale_f32, double* history_slot);

// Whether one CUDA launch of the passes above covers many tensors (on, the default: every tensor, in
// batches of as many as the kernel argument holds) or one launch runs per tensor (off), as a framework
// without multi-tensor kernels would do. Off exists to measure what batching saves (bench/train
// --no-multi-tensor; docs/performance.md); the results are the same bits either way. The CPU passes
// loop over the tensors in any case and ignore it. Process-wide, for the calls that start after it.
void set_multi_tensor(bool on);
bool multi_tensor();

}  // namespace hl::kernels
