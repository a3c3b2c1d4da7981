// Optimizers, with what mixed precision needs (paper §3.1):
//  - optional FP32 master weights: the model's parameters may be FP16 working copies; the update is
//    applied to FP32 masters and the FP16 copy is rewritten from them in the same fused pass;
//  - FP32 gradients: before an update the parameters' gradients (FP16 in mixed precision) are
//    unscaled into FP32 buffers by one fused pass (see amp::LossScaler), where clipping happens;
//  - FP32 moments (momentum, Adam's m and v) whatever the parameter dtype.
// Every update is one multi-tensor kernel call over all parameters (kernels/optim.h;
// set_multi_tensor(false), bench/train --no-multi-tensor, makes it one launch per tensor, for comparison).
// No host synchronization inside a step: whether a step is applied may be decided on the device
// (step_unless, the loss scaler's found-inf flag), so the count of applied steps (Adam's t) and
// SGD's "momentum buffer initialized" flags live in device memory too; steps() and state() read them
// back (a synchronization, outside the step).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor.h"
#include "kernels/optim.h"

namespace hl::optim {

class Optimizer {
 public:
  // master_weights: keep an FP32 copy of every parameter (taken now, from the current values) and
  // apply updates to it. Use it for `mixed` precision; without it an FP16 parameter is updated in
  // place, and updates below half an FP16 ulp of the weight are lost (the `fp16` mode).
  // A parameter written after this through Tensor::copy_ or fill_ (load_checkpoint without this
  // optimizer, an initialization by hand) has its master re-read from it at the next step, as PyTorch's
  // optimizers, which keep no copy, see the new values; converting or moving the model in place
  // (nn::Module::to) is not such a write, so masters taken before `to(f16)` keep their FP32 values.
  // The state (masters, moments, the FP32 gradient buffers) follows the parameters when the model is
  // moved or converted after this (nn::Module::to): to their device, and to f64 for f64 parameters,
  // f32 for the others, at the next unscale or step (state() gives it so converted at once; the
  // accessors below show the optimizer's own copy as of the last step).
  // Every parameter must be a leaf with requires_grad, all on one device, and no two may share an
  // element (one tensor listed twice, overlapping views): each would be updated twice a step.
  Optimizer(std::vector<Tensor> params, bool master_weights);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Apply one update from the current gradients (unscaling them with factor 1 if unscale_grads()
  // was not called this step). Parameters without a gradient are left alone.
  void step();
  // The same, unless *skip (an i32 in device memory, e.g. the loss scaler's found-inf flag) is
  // nonzero: then the kernels write nothing (parameters, masters, moments and the applied-step
  // count stay bit-identical). The host never reads the flag; null means step() unconditionally.
  void step_unless(const int32_t* skip);
  // Fill the FP32 gradient buffers: g32 = grad * inv_scale, in one fused pass over all parameters,
  // setting *found_inf (an i32 on the parameters' device, not cleared here) if any value is inf or
  // NaN. Throws if called twice before step()/skip_step().
  void unscale_grads(float inv_scale, int32_t* found_inf);
  // The same with the scale S in device memory (a double): g32 = grad * float(1.0 / S), computed by
  // the kernel, so the scale is never read back to the host.
  void unscale_grads_by(const double* scale, int32_t* found_inf);
  bool grads_unscaled() const { return unscaled_; }
  // End a step without updating anything (the loss scaler found an overflow): parameters, masters,
  // moments and the step counter stay bit-identical.
  void skip_step();
  // Scale the FP32 gradients so that their global L2 norm is at most max_norm (after unscaling;
  // unscales with factor 1 first if needed). Returns the norm before clipping as a one-element f64
  // tensor on the parameters' device, like PyTorch: the norm, the factor and the scaling are
  // computed there, so clipping reads nothing back to the host (call .item() to print it, which
  // synchronizes). An inf/NaN norm is left inf/NaN (the loss scaler still skips the step). max_norm 0
  // zeroes the gradients, as PyTorch's clip_grad_norm_ does; a negative or NaN max_norm is an error.
  Tensor clip_grad_norm(double max_norm);
  // Drop every parameter's gradient (the next backward() starts them fresh).
  void zero_grad();

  const std::vector<Tensor>& params() const { return params_; }
  // The FP32 master weights (undefined entries when the optimizer keeps none).
  const std::vector<Tensor>& master_weights() const { return masters_; }
  // Whether parameter i was written (copy_, fill_) since its master was last in step with it: its
  // master is then stale until the next step re-reads it. Code that reads the masters between steps
  // (tutorials/common/models.cpp, save_model_fp32) takes such a parameter's own value instead.
  bool param_written_since_master(size_t i) const;
  // The FP32 gradients of the last unscale (undefined before it).
  const std::vector<Tensor>& unscaled_grads() const { return grads_; }
  bool has_master_weights() const { return use_masters_; }
  // The per-parameter state buffers called `name` ("momentum", "exp_avg", "exp_avg_sq"); entries are
  // undefined until the parameter's first update attempt (empty when the buffer is not used at all).
  // A buffer made for a step that was then skipped on the device holds zeros; an SGD momentum buffer
  // counts as started only after an applied update (state() leaves out the others).
  const std::vector<Tensor>& state_buffers(const std::string& name) const;
  // The number of applied updates (skipped steps excluded). Reads the device counter: a host
  // synchronization on CUDA, so call it between steps, not inside one.
  int64_t steps() const;
  double lr() const { return lr_; }
  void set_lr(double lr);

  // Everything needed to resume exactly (checkpoints): named state tensors ("master.3",
  // "momentum.3", "exp_avg.3", ...; absent when not created yet) and settings as strings.
  struct State {
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> meta;
  };
  virtual State state() const;
  // Restore a state produced by state() of the same optimizer type over the same parameters.
  virtual void load_state(const State& s);
  virtual std::string type() const = 0;

 protected:
  // The optimizer-specific kernel call over every parameter that has a gradient, skipped on the
  // device when *skip is nonzero. Returns the device flags to set once the update is applied.
  virtual std::vector<int32_t*> update(std::vector<kernels::ParamSlot>& slots, const std::vector<size_t>& index,
                                       const int32_t* skip) = 0;
  // The per-parameter state buffers this optimizer keeps ("momentum"; "exp_avg", "exp_avg_sq"): what
  // load_state accepts besides "master", and all of them or none for each parameter.
  virtual std::vector<std::string> buffer_names() const = 0;
  // The count of applied updates, in device memory (an int64 stored in a one-element f64 tensor).
  int64_t* applied_steps_device();
  // Per-parameter i32 flags in device memory (SGD: "momentum buffer initialized").
  int32_t* started_flag(size_t i);
  // The FP32 (f64 for f64 parameters) buffer `name` of parameter i, created zero-filled on first use.
  Tensor& buffer(const std::string& name, size_t i);
  DType state_dtype(size_t i) const;

  std::vector<Tensor> params_;
  std::vector<Tensor> masters_;
  std::vector<Tensor> grads_;
  std::map<std::string, std::vector<Tensor>> buffers_;  // name -> per-parameter buffer
  double lr_ = 0.0;

 private:
  void unscale_impl(float inv_scale, const double* scale, int32_t* found_inf);
  // The parameters' storage versions as of the masters (Storage::version), and the re-read of the
  // masters of parameters written since.
  void note_param_versions();
  void reread_written_masters();
  void check_no_shared_memory() const;  // two parameters on the same elements are refused
  std::vector<uint64_t> param_versions_;
  // Moves the state to the parameters' device, and converts it to their state dtype, if they moved or
  // were converted since it was made (see optim.cpp).
  void follow_params();
  // Parameter i's state tensor t as the parameter is now: on its device, in its state dtype (t itself
  // when it already is). Used by follow_params and by state().
  Tensor as_param_state(size_t i, const Tensor& t) const;
  bool use_masters_;
  bool unscaled_ = false;
  Tensor scratch_flag_;  // found-inf target when nobody asked for one
  Tensor applied_;       // int64 count of applied updates, on the device
  Tensor started_;       // i32 per parameter, on the device (created when first needed)
};

// Stochastic gradient descent with PyTorch's semantics (the momentum buffer starts as the first
// gradient; weight decay added to the gradient; optional Nesterov and dampening).
class SGD : public Optimizer {
 public:
  struct Options {
    double lr = 0.01;
    double momentum = 0.0;
    double weight_decay = 0.0;
    double dampening = 0.0;
    bool nesterov = false;
    bool master_weights = false;
  };
  SGD(std::vector<Tensor> params, Options opt);
  std::string type() const override { return "SGD"; }
  const std::vector<Tensor>& momentum_buffers() const { return state_buffers("momentum"); }

 protected:
  std::vector<int32_t*> update(std::vector<kernels::ParamSlot>& slots, const std::vector<size_t>& index,
                               const int32_t* skip) override;
  std::vector<std::string> buffer_names() const override;

 private:
  Options opt_;
};

// Adam (Kingma & Ba) and AdamW (decoupled weight decay, Loshchilov & Hutter), PyTorch's semantics,
// including its step t per parameter: the number of updates applied to that parameter, so a parameter
// whose first gradient comes at step 11 takes its first step with t = 1.
class Adam : public Optimizer {
 public:
  struct Options {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
    bool decoupled = false;  // true: AdamW
    bool master_weights = false;
  };
  Adam(std::vector<Tensor> params, Options opt);
  std::string type() const override { return opt_.decoupled ? "AdamW" : "Adam"; }
  // Each parameter's t so far (updates applied to it). Reads device counters: between steps only.
  std::vector<int64_t> param_steps() const;
  // state() adds "param_steps" (comma-separated, one per parameter) when they differ from steps().
  State state() const override;
  void load_state(const State& s) override;

 protected:
  std::vector<int32_t*> update(std::vector<kernels::ParamSlot>& slots, const std::vector<size_t>& index,
                               const int32_t* skip) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  // The parameters in groups with the same history (present at the same steps), each counting its t on
  // one device counter, so that one launch still updates a whole group. Group 0 counts with the
  // optimizer's applied steps: its parameters had a gradient at every step so far (the common case:
  // one group). At a step, the parameters of a group that have no gradient leave it together for a new
  // group, whose counter starts from the group's count before the step (a copy on the device).
  int64_t* group_counter(size_t g);
  std::vector<size_t> group_of_;  // per parameter; empty: all in group 0
  std::vector<Tensor> counters_;  // [g] for g >= 1 (an i64 in a one-element f64, as the base's count)
  Options opt_;
};

// AdamW with PyTorch's default weight decay (0.01).
inline Adam::Options adamw_options(double lr = 1e-3, double weight_decay = 1e-2) {
  Adam::Options o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.decoupled = true;
  return o;
}

}  // namespace hl::optim
