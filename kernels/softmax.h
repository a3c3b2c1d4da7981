// Softmax, log-softmax and cross-entropy over the last dimension of a [rows, cols] matrix, plus the
// negative log-likelihood pick used by the unfused loss path.
//
// Paper §3.3: these reductions compute in f32 even when the logits are f16. Inputs are f16 or f32
// (f64 on the CPU and in the CUDA `naive` rung, for gradient checks); outputs are f32 or f16 (f64 for
// f64 inputs). The softmax family has a variant registry (kernels/registry.h, family "softmax",
// environment variable HALFLING_SOFTMAX, tutorial flag --softmax): the CPU `reference` defines the
// results, the CUDA ladder lives in kernels/cuda/softmax/ (see its README.md).
//
// Conventions every variant follows (docs/softmax.md):
//   - the row maximum is subtracted before exp(), so no finite logit overflows;
//   - a row without a finite maximum (every entry -inf, or any entry +inf) gives NaN everywhere in
//     that row (softmax, log-softmax, loss and gradient), as PyTorch does for an all -inf row; a NaN
//     logit makes its row NaN. Masked (-inf) entries in a row with a finite maximum give probability
//     0, log-probability -inf and gradient 0 (softmax) / exactly the upstream gradient (log-softmax);
//     cross-entropy's gradient is 0 there too, except at the label's own entry when the label is
//     masked: -multiplier * grad_scale[0], with a loss of +inf (a finite gradient row, as in PyTorch);
//   - cross-entropy with a label outside [0, cols) gives a NaN loss and a NaN gradient row, so that a
//     bad label is seen by the loss scaler's inf/NaN check instead of training silently (the framework
//     rejects such labels on the CPU before calling the kernels).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "kernels/registry.h"

namespace hl::kernels {

enum class SoftmaxOp : uint8_t {
  softmax,               // y = exp(x - max) / sum(exp(x - max))
  log_softmax,           // y = (x - max) - log(sum(exp(x - max)))
  log_softmax_backward,  // y: the log_softmax output, dy its gradient -> dx = dy - exp(y) * sum(dy)
  xent_forward,          // per-row loss = log(sum(exp(x))) - x[label], and the row statistics
  xent_backward,         // dx = (softmax(x) - onehot(label)) * multiplier * (*grad_scale), from the statistics
  xent_fused,            // both in one pass over the logits (loss, statistics if wanted, and dx)
};
const char* softmax_op_name(SoftmaxOp op);

struct SoftmaxArgs {
  static constexpr const char* family = "softmax";
  static constexpr const char* env_var = "HALFLING_SOFTMAX";

  DeviceType device = DeviceType::cpu;
  SoftmaxOp op = SoftmaxOp::softmax;
  int64_t rows = 0, cols = 0;
  // softmax, log_softmax, xent_*: the logits. log_softmax_backward: y, the saved log_softmax output.
  const void* x = nullptr;
  DType x_type = DType::f32;
  // log_softmax_backward only: dy, the gradient of y (same dtype as x).
  const void* dy = nullptr;
  // softmax / log_softmax: the output. log_softmax_backward, xent_backward, xent_fused: dx.
  // xent_fused refuses a y that overlaps x: its loss reads the row after the gradient is written.
  void* y = nullptr;
  DType y_type = DType::f32;
  // Cross-entropy. labels: i32 [rows]. loss: [rows] per-row losses. stats: [rows, 2] = (row max,
  // log(sum(exp(x - max)))) per row, written by xent_forward (and xent_fused, if not null) and read by
  // xent_backward. loss, stats and grad_scale have dtype stat_type: f32, or f64 for f64 logits.
  const int32_t* labels = nullptr;
  void* loss = nullptr;
  void* stats = nullptr;
  DType stat_type = DType::f32;
  // The gradient multiplier: dx = (softmax - onehot) * multiplier * grad_scale[0]. grad_scale is a
  // scalar in device memory (the upstream gradient of the loss, e.g. the loss scale S from
  // scaler.scale(loss).backward()), read by the kernel so that the host never waits for it; nullptr
  // means 1. multiplier is a host constant (1/batch for a mean).
  const void* grad_scale = nullptr;
  double multiplier = 1.0;

  // "log_softmax 128x10 f16->f32 on cuda": used in every error message.
  std::string describe() const;
};

using SoftmaxRegistry = Registry<SoftmaxArgs>;

// Checks the arguments and runs `variant` if given, else the registry's choice: a pinned default
// (--softmax / set_default), else HALFLING_SOFTMAX, else, on the GPU, the rung this shape runs fastest
// on (kernels/softmax.cpp, auto_cuda_variants: warp_row up to 32 columns, register_warp to 1024,
// register_row to 16384, packed_online then packed_row for FP16 rows to 65536, block_row for what
// they decline up to 65536, online beyond; fused_xent for cross-entropy), else the highest-priority
// variant that supports the arguments.
void softmax(const SoftmaxArgs& args, const std::string& variant = "");

// Would softmax(args) find a variant (honouring a pinned default or HALFLING_SOFTMAX)? The framework's
// cross_entropy asks this to fall back to log_softmax + nll when a pinned rung has no fused loss.
bool softmax_can_run(const SoftmaxArgs& args);

// The name softmax(args) would run (same rules and selection errors as softmax(); the pointers are only
// looked at for their alignment, and null counts as aligned, so a probe with only the op, sizes and
// dtypes filled in will do).
std::string softmax_variant_for(const SoftmaxArgs& args);

// ---- convenience wrappers (the framework's entry points) ----------------------------------------------
// y = softmax(x) row-wise.
void softmax_forward(DeviceType dev, int64_t rows, int64_t cols, const void* x, DType tx, void* y, DType ty);
// y[r, c] = x[r, c] - max_r - log(sum_c exp(x[r, c] - max_r)).
void log_softmax_forward(DeviceType dev, int64_t rows, int64_t cols, const void* x, DType tx, void* y,
                         DType ty);
// gx[r, c] = gy[r, c] - exp(y[r, c]) * sum_c gy[r, c]. y, gy have dtype ty; gx has dtype tgx.
void log_softmax_backward(DeviceType dev, int64_t rows, int64_t cols, const void* y, const void* gy,
                          DType ty, void* gx, DType tgx);

// loss[r] = -logp[r, label[r]]. A label outside [0, cols) gives NaN (the framework refuses such labels
// on the CPU, and on the GPU under set_detect_anomaly; otherwise the NaN is how the GPU reports them).
void nll_forward(DeviceType dev, int64_t rows, int64_t cols, const void* logp, DType t,
                 const int32_t* labels, void* loss);
// glogp[r, c] = (c == label[r]) ? -gloss[r] : 0, and a NaN row for a label outside [0, cols), as
// cross-entropy's fused gradient gives: the loss scaler's inf/NaN check reads gradients, not the loss.
void nll_backward(DeviceType dev, int64_t rows, int64_t cols, const int32_t* labels, const void* gloss,
                  void* glogp, DType t);

}  // namespace hl::kernels
