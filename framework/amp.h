// Automatic mixed precision: the precision modes and the loss scaler (paper §3.1, §3.2; DESIGN.md §3).
//
// A training step with loss scaling, as in PyTorch:
//
//   scaler.scale(loss).backward();   // the chain rule multiplies every gradient by S
//   scaler.unscale(opt);             // optional: one fused pass, g32 = g / S, raises one inf/NaN flag
//   opt.clip_grad_norm(1.0);         //   ...so that clipping sees true gradients
//   scaler.step(opt);                // opt.step(), or skip it if any gradient overflowed
//   scaler.update();                 // grow / back off the scale
//
// The scale lives on the host; reading the found-inf flag is the one host synchronization per step.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/optim.h"
#include "framework/tensor.h"

namespace hl::amp {

// What --precision means (DESIGN.md §3):
//   fp32   FP32 weights, FP32 update.
//   fp16   FP16 weights used and updated in place: no master copy (shows why §3.1 matters).
//   mixed  FP16 working copy for forward/backward, updates applied to FP32 master weights.
enum class Precision { fp32, fp16, mixed };
Precision parse_precision(const std::string& s);  // "fp32" | "fp16" | "mixed"; throws hl::Error otherwise
const char* precision_name(Precision p);
// The dtype of the weights and activations in forward/backward.
inline DType compute_dtype(Precision p) { return p == Precision::fp32 ? DType::f32 : DType::f16; }
inline bool uses_master_weights(Precision p) { return p == Precision::mixed; }

struct ScalerConfig {
  enum class Kind { none, fixed, dynamic };
  Kind kind = Kind::dynamic;
  // PyTorch GradScaler defaults.
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  // Beyond PyTorch: bounds, and DeepSpeed's hysteresis (this many overflows before one backoff;
  // `consecutive`: a clean step refills the count, so only consecutive overflows back off).
  double min_scale = 0.0;
  double max_scale = 3.4028234663852886e38;  // FLT_MAX
  int64_t hysteresis = 1;
  bool consecutive_hysteresis = false;

  // "none" | "static:S" | "dynamic[:key=value,...]" with keys init, growth, backoff, interval, min,
  // max, hysteresis and the flag consecutive, e.g. "dynamic:init=1024,hysteresis=2,consecutive".
  static ScalerConfig parse(const std::string& spec);
  std::string str() const;
};

class LossScaler {
 public:
  explicit LossScaler(ScalerConfig config = {});

  // loss * S (the loss itself for `none`).
  Tensor scale(const Tensor& loss) const;
  // Unscale opt's gradients into its FP32 buffers and record whether any was inf/NaN. At most once
  // per step: a second call before update() is an error (it would divide twice).
  void unscale(optim::Optimizer& opt);
  // Unscale if not done yet; then opt.step(), or opt.skip_step() when this step overflowed (never
  // with `none`, which checks nothing). Returns whether the update was applied. Twice before
  // update() is an error.
  bool step(optim::Optimizer& opt);
  // Adjust the scale for the next step (dynamic only) and end the step.
  void update();

  double get_scale() const { return scale_; }
  const ScalerConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }
  int64_t skipped_steps() const { return skipped_; }
  bool last_step_skipped() const { return last_skipped_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t hysteresis_left() const { return hysteresis_left_; }
  // The scale in force at each step, for plotting (one entry per update()).
  const std::vector<double>& scale_history() const { return history_; }

  // Checkpointing: every field that decides future scales, as exact strings.
  std::map<std::string, std::string> state() const;
  void load_state(const std::map<std::string, std::string>& s);

 private:
  enum class Stage { ready, unscaled, stepped };
  ScalerConfig config_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_left_;
  int64_t steps_ = 0, skipped_ = 0;
  bool last_skipped_ = false;
  bool found_inf_ = false;
  Stage stage_ = Stage::ready;
  optim::Optimizer* unscaled_opt_ = nullptr;
  Tensor flag_;  // the device-side found-inf flag (i32)
  std::vector<double> history_;
};

}  // namespace hl::amp
