// Automatic mixed precision: the precision modes and the loss scaler (paper §3.1, §3.2; DESIGN.md §3).
//
// A training step with loss scaling, as in PyTorch:
//
//   scaler.scale(loss).backward();   // the chain rule multiplies every gradient by S
//   scaler.unscale(opt);             // optional: one fused pass, g32 = g / S, raises one inf/NaN flag
//   opt.clip_grad_norm(1.0);         //   ...so that clipping sees true gradients
//   scaler.step(opt);                // opt.step(), skipped on the device if any gradient overflowed
//   scaler.update();                 // grow / back off the scale, on the device
//
// No host synchronization inside a step: the scale, the found-inf flag and the scaler's counters live
// in device memory (kernels/scaler_rule.h holds the rule, shared by the CPU path and a one-thread CUDA
// kernel). The optimizer's kernels read the flag and write nothing when it is set; the host only
// queues work. It keeps the configuration, the unscale/step/update order checks and the number of
// steps. The getters below (get_scale, skipped_steps, ...) read the device state back: each is a
// host synchronization on CUDA, meant for printing between steps, not inside one.
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

// The smallest loss scale used: unscaling multiplies each gradient by float(1/S), and at S >= 2^-111 every
// finite FP16 gradient (|g| < 2^16) stays finite (< 2^127); below 2^-128, 1/S is not even a finite f32.
// The unscale flags only non-finite inputs, so an inf it made itself would reach the weights unseen
// (found by review, 2026-11-29: 144 overflows in a row took the default dynamic scaler there). A static or
// initial scale below it is refused, and the dynamic rule never backs off below it, whatever `min` says.
inline constexpr double kSmallestScale = 0x1p-111;

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
  // The dynamic rule's constants, as kernels/scaler_rule.h takes them.
  kernels::ScalerRule rule() const;
};

class LossScaler {
 public:
  explicit LossScaler(ScalerConfig config = {});
  // A copy is independent: it clones the device state (tensors are shared handles otherwise).
  LossScaler(const LossScaler& other);
  LossScaler& operator=(const LossScaler& other);
  LossScaler(LossScaler&&) = default;
  LossScaler& operator=(LossScaler&&) = default;

  // loss * S (the loss itself for `none`).
  Tensor scale(const Tensor& loss) const;
  // Unscale opt's gradients into its FP32 buffers and record whether any was inf/NaN. At most once
  // per step: a second call before update() is an error (it would divide twice).
  void unscale(optim::Optimizer& opt);
  // Unscale if not done yet; then opt.step_unless(found-inf flag): the optimizer's kernels read the
  // flag on the device and write nothing when this step overflowed (`none` checks nothing). Whether
  // the update was applied is known after update(), through last_step_skipped() (which
  // synchronizes). Twice before update() is an error.
  void step(optim::Optimizer& opt);
  // Record the step and adjust the scale for the next one (dynamic only), on the device, and end
  // the step.
  void update();

  // CUDA graphs (framework/cuda_graph.h; the trainer's TrainOptions::cuda_graph). A recording runs
  // nothing, so the host's part of update() (the step count, the history entry) must happen at each
  // replay instead. Between begin_recording() and end_recording(), update() writes the scale in force
  // to a slot of its own and counts nothing; after each replay of such a step, replayed_update()
  // appends the slot to the history (a device-to-device copy) and counts the step.
  void begin_recording(Device dev);
  void end_recording();
  void replayed_update();

  // The getters below read the device state: a host synchronization on CUDA (between steps only).
  double get_scale() const;
  const ScalerConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }  // host-known: the number of update() calls
  int64_t skipped_steps() const;
  bool last_step_skipped() const;
  int64_t growth_tracker() const;
  int64_t hysteresis_left() const;
  // The scale in force at each step, for plotting (one entry per update()). Reads the entries not
  // read yet from the device.
  const std::vector<double>& scale_history() const;

  // Checkpointing: every field that decides future scales, as exact strings (reads the device state).
  // last_step_skipped() is not one of them: after load_state() it is false until the next update().
  std::map<std::string, std::string> state() const;
  void load_state(const std::map<std::string, std::string>& s);

 private:
  enum class Stage { ready, unscaled, stepped };
  kernels::ScalerState read_state() const;  // a host synchronization on CUDA
  // Move the device state to `dev` (the first step, or a model moved to another device).
  void place_on(Device dev) const;
  double* scale_device() { return reinterpret_cast<double*>(state_.data_ptr()); }
  kernels::ScalerState* state_device() { return reinterpret_cast<kernels::ScalerState*>(state_.data_ptr()); }

  // Room in history_ for one more entry (a device-to-device copy when it grows).
  void reserve_history();

  ScalerConfig config_;
  bool recording_ = false;
  Tensor replay_slot_;  // f64 [1]: the scale in force, written by a recorded update()
  int64_t steps_ = 0;        // update() calls, including those before a load_state()
  int64_t history_len_ = 0;  // update() calls on this object: the entries of history_
  Stage stage_ = Stage::ready;
  optim::Optimizer* unscaled_opt_ = nullptr;
  // Device state, all on one device: the CPU until scale()/unscale() see the loss's or the
  // parameters' device (mutable: scale() is const and places it lazily).
  mutable Tensor state_;    // a kernels::ScalerState: scale, counters
  mutable Tensor scale32_;  // float(scale), f32: what scale(loss) multiplies by
  mutable Tensor flag_;     // the found-inf flag (i32)
  mutable Tensor history_;  // f64, capacity >= history_len_: the scale in force at each step
  mutable std::vector<double> history_cache_;  // the entries already read back
};

}  // namespace hl::amp
