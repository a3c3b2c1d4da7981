#include "framework/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>

#include "framework/autograd.h"
#include "framework/ops.h"
#include "kernels/elementwise.h"

namespace hl::optim {

namespace {

// "momentum.3" -> {"momentum", 3}. The index must be written the way state() writes it (decimal
// digits, no sign, no leading zero): "master.01", "master.+1" or "master. 1" would otherwise name
// parameter 1 a second time. Any other name gives index -1, which load_state refuses.
std::pair<std::string, int64_t> split_indexed(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {name, -1};
  const std::string digits = name.substr(dot + 1);
  const bool canonical = !digits.empty() && digits.size() <= 18 &&
                         digits.find_first_not_of("0123456789") == std::string::npos &&
                         (digits.size() == 1 || digits[0] != '0');
  return {name.substr(0, dot), canonical ? std::stoll(digits) : -1};
}

Tensor int64_tensor(int64_t v, Device dev) { return detail::raw_tensor(&v, sizeof v, dev); }

double meta_double(const Optimizer::State& s, const std::string& key, const std::string& who) {
  auto it = s.meta.find(key);
  HL_CHECK(it != s.meta.end(), who, "::load_state: the state has no '", key, "'");
  return detail::parse_double(it->second, who + "::load_state: '" + key + "'");
}

}  // namespace

// ---- Optimizer ---------------------------------------------------------------------------------------

Optimizer::Optimizer(std::vector<Tensor> params, bool master_weights)
    : params_(std::move(params)), use_masters_(master_weights) {
  HL_CHECK(!params_.empty(), "Optimizer: no parameters to optimize");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    HL_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), "Optimizer: parameter ", i, " (",
             p.defined() ? p.describe() : "undefined", ") must be a leaf tensor with requires_grad");
    HL_CHECK(p.device() == params_[0].device(), "Optimizer: parameters on different devices: ", params_[0].describe(),
             " and ", p.describe());
  }
  check_no_shared_memory();
  masters_.resize(params_.size());
  grads_.resize(params_.size());
  applied_ = int64_tensor(0, params_[0].device());
  if (use_masters_) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      masters_[i] = Tensor::empty(params_[i].shape(), state_dtype(i), params_[i].device());
      masters_[i].copy_(params_[i]);
    }
  }
  note_param_versions();
}

// Two parameters whose elements share memory (the same tensor listed twice, or views of one storage that
// overlap) would be updated twice per step: in turn on the CPU, and at once on the GPU, where one
// multi-tensor launch gives each its own threads, which then race on the shared elements (a result that
// changes from run to run). Module::parameters() lists a shared (tied) parameter once; a list built by
// hand may not, so it is refused here, naming both. All are on one device, so their bytes are ranges of
// one address space: sorted by address, any two that overlap include a pair of neighbours that do.
void Optimizer::check_no_shared_memory() const {
  std::vector<size_t> order;  // the parameters with elements (an empty one shares none)
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].numel() > 0) order.push_back(i);
  const auto address = [&](size_t i) { return reinterpret_cast<uintptr_t>(params_[i].data_ptr()); };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return address(a) < address(b); });
  for (size_t k = 1; k < order.size(); ++k) {
    const Tensor &a = params_[order[k - 1]], &b = params_[order[k]];
    if (!bytes_overlap(a.data_ptr(), a.nbytes(), b.data_ptr(), b.nbytes())) continue;
    const size_t i = std::min(order[k - 1], order[k]), j = std::max(order[k - 1], order[k]);
    const bool same = a.data_ptr() == b.data_ptr() && a.nbytes() == b.nbytes();
    throw Error(detail::concat("Optimizer: parameters ", i, " (", params_[i].describe(), ") and ", j, " (",
                               params_[j].describe(), ") share memory (",
                               same ? "the same elements listed twice" : "overlapping views of one storage",
                               "): each step would update those elements twice, and on the GPU the two updates "
                               "would race. List each parameter once (Module::parameters() does)"));
  }
}

void Optimizer::note_param_versions() {
  param_versions_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) param_versions_[i] = params_[i].impl()->storage->version();
}

// A parameter written through copy_ or fill_ since the masters were last in step with it: the update
// would overwrite the new values with the old master's, silently (found by review, 2026-11-29: weights
// loaded into the model after the optimizer was built were gone after one step at lr 0). Its master is
// re-read from it, on the device, in the stream's order; nothing is read back to the host.
void Optimizer::reread_written_masters() {
  if (!use_masters_) return;
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const uint64_t v = params_[i].impl()->storage->version();
    if (v == param_versions_[i]) continue;
    masters_[i].copy_(params_[i]);
    param_versions_[i] = v;
  }
}

bool Optimizer::param_written_since_master(size_t i) const {
  HL_CHECK(i < params_.size(), "Optimizer::param_written_since_master: index ", i, " of ", params_.size(),
           " parameters");
  return use_masters_ && params_[i].impl()->storage->version() != param_versions_[i];
}

DType Optimizer::state_dtype(size_t i) const { return params_[i].dtype() == DType::f64 ? DType::f64 : DType::f32; }

Tensor& Optimizer::buffer(const std::string& name, size_t i) {
  auto& list = buffers_[name];
  list.resize(params_.size());
  if (!list[i].defined()) list[i] = Tensor::zeros(params_[i].shape(), state_dtype(i), params_[i].device());
  return list[i];
}

int64_t* Optimizer::applied_steps_device() { return static_cast<int64_t*>(applied_.data_ptr()); }

int64_t Optimizer::steps() const {
  int64_t n = 0;
  detail::read_raw(applied_, &n, sizeof n);  // a synchronization on CUDA: between steps only
  return n;
}

int32_t* Optimizer::started_flag(size_t i) {
  if (!started_.defined())
    started_ = Tensor::zeros({static_cast<int64_t>(params_.size())}, DType::i32, params_[0].device());
  return started_.data<int32_t>() + i;
}

const std::vector<Tensor>& Optimizer::state_buffers(const std::string& name) const {
  static const std::vector<Tensor> none;
  auto it = buffers_.find(name);
  return it == buffers_.end() ? none : it->second;
}

void Optimizer::set_lr(double lr) {
  HL_CHECK(lr >= 0.0 && std::isfinite(lr), type(), ": learning rate must be finite and >= 0, got ", lr);
  lr_ = lr;
}

void Optimizer::unscale_grads(float inv_scale, int32_t* found_inf) { unscale_impl(inv_scale, nullptr, found_inf); }

void Optimizer::unscale_grads_by(const double* scale, int32_t* found_inf) {
  HL_CHECK(scale != nullptr, type(), "::unscale_grads_by: needs the scale's device address");
  unscale_impl(1.0f, scale, found_inf);
}

// `model->to(Device::cuda)` after the optimizer was made replaces the parameters' data in place, so
// the optimizer sees them move, but its state (master weights, moments, the step counter) was made
// on the old device; the update kernels would get host addresses. PyTorch allows this order (its
// state is made lazily, on the first step), so the state follows the parameters here, before any
// kernel is queued. Parameters split across devices are an error.
//
// The same for the dtype: `model->to(DType::f64)` after some steps leaves moments, masters and FP32
// gradient buffers made for f32 parameters, which the f64 update would read and write as doubles, past
// their end (and f64 state made for f64 parameters would be read as floats after `to(f32)`). Each
// converts to the parameter's state dtype: exactly from f32 to f64, rounded once from f64 to f32.
// f32 <-> f16 changes nothing here: both keep f32 state (so masters taken before `to(f16)` keep their
// values, the mixed-precision order of docs/amp.md).
void Optimizer::follow_params() {
  const Device d = params_[0].device();
  for (const Tensor& p : params_)
    HL_CHECK(p.device() == d, type(), ": parameters on different devices: ", params_[0].describe(), " and ",
             p.describe(), " (move the whole model with model->to(device))");
  NoGradGuard no_grad;  // a few device and dtype comparisons per step when nothing moved
  const auto move = [d](Tensor& t) {
    if (t.defined() && t.device() != d) t = t.to(d);
  };
  move(applied_);
  move(started_);
  move(scratch_flag_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto follow = [&](std::vector<Tensor>& list) {
      if (i < list.size() && list[i].defined()) list[i] = as_param_state(i, list[i]);
    };
    follow(masters_);
    follow(grads_);
    for (auto& [name, list] : buffers_) follow(list);
  }
}

Tensor Optimizer::as_param_state(size_t i, const Tensor& t) const {
  NoGradGuard no_grad;
  const Tensor on = t.device() == params_[i].device() ? t : t.to(params_[i].device());
  return on.dtype() == state_dtype(i) ? on : on.to(state_dtype(i));
}

void Optimizer::unscale_impl(float inv_scale, const double* scale, int32_t* found_inf) {
  follow_params();
  HL_CHECK(!unscaled_, type(), "::unscale_grads: the gradients were already unscaled this step "
                               "(unscale once, then step() or skip_step())");
  std::vector<kernels::GradSlot> slots;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (!g.defined()) {
      grads_[i] = Tensor();
      continue;
    }
    const DType st = state_dtype(i);
    // An FP32 gradient is unscaled in place; an FP16 one into a kept FP32 buffer.
    if (g.dtype() == st) {
      grads_[i] = g;
    } else if (!grads_[i].defined()) {  // a buffer made here always has dtype st: kept across steps
      grads_[i] = Tensor::empty(g.shape(), st, g.device());
    }
    slots.push_back({g.data_ptr(), g.dtype(), grads_[i].data_ptr(), st, g.numel()});
  }
  if (found_inf == nullptr) {
    if (!scratch_flag_.defined()) scratch_flag_ = Tensor::zeros({}, DType::i32, params_[0].device());
    found_inf = scratch_flag_.data<int32_t>();
  }
  kernels::unscale_grads(params_[0].device(), slots, inv_scale, found_inf, scale);
  unscaled_ = true;
}

void Optimizer::skip_step() { unscaled_ = false; }

Tensor Optimizer::clip_grad_norm(double max_norm) {
  HL_CHECK(max_norm >= 0.0, type(), "::clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  if (!unscaled_) unscale_grads(1.0f, nullptr);
  std::vector<kernels::ConstSpan> spans;
  std::vector<kernels::Span> targets;
  for (const Tensor& g : grads_) {
    if (!g.defined()) continue;
    spans.push_back({g.data_ptr(), g.dtype(), g.numel()});
    targets.push_back({g.data_ptr(), g.dtype(), g.numel()});
  }
  const Device dev = params_[0].device();
  Tensor sq = Tensor::empty({}, DType::f32, dev);
  kernels::sum_of_squares(dev, spans, sq.data<float>());
  // PyTorch's rule, on the device: scale by max_norm / (norm + 1e-6) when that is below 1.
  Tensor norm = Tensor::empty({}, DType::f64, dev);
  kernels::clip_by_norm(dev, targets, sq.data<float>(), max_norm, norm.data<double>());
  return norm;
}

void Optimizer::step() { step_unless(nullptr); }

void Optimizer::step_unless(const int32_t* skip) {
  follow_params();
  reread_written_masters();
  if (!unscaled_) unscale_grads(1.0f, nullptr);
  std::vector<kernels::ParamSlot> slots;
  std::vector<size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads_[i].defined()) continue;
    const Tensor& p = params_[i];
    HL_CHECK(grads_[i].shape() == p.shape(), type(), ": gradient ", grads_[i].describe(), " does not match parameter '",
             p.name(), "' ", p.describe());
    kernels::ParamSlot s;
    s.param = p.data_ptr();
    s.param_type = p.dtype();
    s.master = masters_[i].defined() ? masters_[i].data_ptr() : nullptr;
    s.grad = grads_[i].data_ptr();
    s.state_type = state_dtype(i);
    s.n = p.numel();
    slots.push_back(s);
    index.push_back(i);
  }
  const std::vector<int32_t*> marks = update(slots, index, skip);
  // The update is a write to each parameter it touched, as copy_ is: a graph that saved one of them
  // (recorded before this step, backpropagated after it) is refused by backward() instead of computing
  // the old weights' gradients with the new weights (autograd.h). Counted whether or not the device then skips the
  // step; the masters are in step with what was counted.
  for (size_t i : index) params_[i].impl()->storage->bump_version();
  note_param_versions();  // after every bump: two parameters may share a storage
  // Count the step (and mark SGD's momentum buffers started) on the device, unless it was skipped.
  kernels::optim_finish(params_[0].device(), skip, applied_steps_device(), marks);
  unscaled_ = false;
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

Optimizer::State Optimizer::state() const {
  State s;
  s.meta["type"] = type();
  s.meta["steps"] = std::to_string(steps());  // reads the device counter (between steps)
  s.meta["lr"] = detail::exact(lr_);
  s.meta["master_weights"] = use_masters_ ? "1" : "0";
  // As the parameters are now: state made before a Module::to since the last step is converted here
  // (follow_params converts the optimizer's own copy only at the next unscale or step), so a checkpoint
  // saved right after the move holds what the next step would use.
  for (size_t i = 0; i < masters_.size(); ++i)
    if (masters_[i].defined())
      s.tensors.emplace_back("master." + std::to_string(i), as_param_state(i, masters_[i]));
  // A momentum buffer made for a step that was then skipped has not started (the next applied step
  // sets it to the gradient): leave it out, as before it existed.
  std::vector<int32_t> started;
  if (started_.defined()) started = started_.to_int();
  for (const auto& [name, list] : buffers_)
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].defined()) continue;
      if (name == "momentum" && (started.empty() || started[i] == 0)) continue;
      s.tensors.emplace_back(name + "." + std::to_string(i), as_param_state(i, list[i]));
    }
  return s;
}

void Optimizer::load_state(const State& s) {
  auto it = s.meta.find("type");
  HL_CHECK(it != s.meta.end() && it->second == type(), "load_state: a state of optimizer '",
           it == s.meta.end() ? std::string("?") : it->second, "' cannot be loaded into ", type());
  auto st = s.meta.find("steps");
  HL_CHECK(st != s.meta.end(), "load_state: the ", type(), " state has no 'steps'");
  const int64_t steps = detail::parse_int64(st->second, type() + "::load_state: 'steps'");
  HL_CHECK(steps >= 0, type(), "::load_state: 'steps' must be >= 0, got ", steps);
  const double lr = meta_double(s, "lr", type());
  HL_CHECK(std::isfinite(lr) && lr >= 0.0, type(), "::load_state: 'lr' must be finite and >= 0, got ", lr);
  const auto mw = s.meta.find("master_weights");
  HL_CHECK(mw == s.meta.end() || (mw->second == "1") == use_masters_, "load_state: the state ",
           mw != s.meta.end() && mw->second == "1" ? "has" : "has no", " master weights, this ", type(),
           use_masters_ ? " keeps them" : " does not");
  // Validate everything before changing anything: a bad state leaves the optimizer as it was.
  std::map<std::string, std::vector<Tensor>> restored;
  std::vector<Tensor> masters(params_.size());
  for (const auto& [name, t] : s.tensors) {
    const auto [prefix, i] = split_indexed(name);
    HL_CHECK(i >= 0 && i < static_cast<int64_t>(params_.size()), "load_state: unexpected state tensor '", name,
             "' (this ", type(), " has ", params_.size(), " parameters)");
    const size_t k = static_cast<size_t>(i);
    HL_CHECK(t.shape() == params_[k].shape(), "load_state: '", name, "' is ", t.describe(), " but parameter ", i,
             " is ", params_[k].describe());
    Tensor copy = Tensor::empty(params_[k].shape(), state_dtype(k), params_[k].device());
    copy.copy_(t);
    if (prefix == "master") {
      HL_CHECK(use_masters_, "load_state: the state has master weights, this ", type(), " does not keep them");
      masters[k] = copy;
    } else {
      const std::vector<std::string> names = buffer_names();
      if (std::find(names.begin(), names.end(), prefix) == names.end()) {
        std::string kept;
        for (const std::string& b : names) kept += (kept.empty() ? "" : ", ") + b;
        throw Error("load_state: unexpected state tensor '" + name + "' (this " + type() + " keeps " +
                    (kept.empty() ? std::string("no per-parameter buffers") : kept) + ")");
      }
      auto& list = restored[prefix];
      list.resize(params_.size());
      list[k] = copy;
    }
  }
  // A parameter's buffers come all together or not at all: Adam's m without its v would resume with a
  // v of zeros, and a first step far too large.
  for (size_t i = 0; i < params_.size(); ++i) {
    std::vector<std::string> have, lack;
    for (const std::string& b : buffer_names()) {
      auto found = restored.find(b);
      (found != restored.end() && found->second[i].defined() ? have : lack).push_back(b);
    }
    HL_CHECK(have.empty() || lack.empty(), "load_state: parameter ", i, " has '", have.front(), "' but not '",
             lack.front(), "' (", type(), " keeps them together)");
  }
  if (use_masters_) {
    for (size_t i = 0; i < params_.size(); ++i)
      HL_CHECK(masters[i].defined(), "load_state: the state lacks master weights for parameter ", i);
    masters_ = masters;
    note_param_versions();  // the restored masters are the parameters' (load_checkpoint copies those first)
  }
  buffers_ = restored;
  applied_ = int64_tensor(steps, params_[0].device());
  // A restored momentum buffer has started; any other has not.
  started_ = Tensor();
  auto mom = buffers_.find("momentum");
  if (mom != buffers_.end()) {
    std::vector<int32_t> flags(params_.size(), 0);
    for (size_t i = 0; i < mom->second.size(); ++i) flags[i] = mom->second[i].defined() ? 1 : 0;
    started_ = Tensor::from_vector(flags, {static_cast<int64_t>(flags.size())}, params_[0].device());
  }
  lr_ = lr;
  unscaled_ = false;
}

// ---- SGD ------------------------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, Options opt) : Optimizer(std::move(params), opt.master_weights), opt_(opt) {
  HL_CHECK(opt.momentum >= 0.0, "SGD: momentum must be >= 0, got ", opt.momentum);
  HL_CHECK(opt.weight_decay >= 0.0, "SGD: weight_decay must be >= 0, got ", opt.weight_decay);
  HL_CHECK(!opt.nesterov || (opt.momentum > 0.0 && opt.dampening == 0.0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening 0");
  set_lr(opt.lr);  // validates it
}

std::vector<int32_t*> SGD::update(std::vector<kernels::ParamSlot>& slots, const std::vector<size_t>& index,
                                  const int32_t* skip) {
  std::vector<int32_t*> marks;
  if (opt_.momentum != 0.0) {
    for (size_t j = 0; j < slots.size(); ++j) {
      slots[j].buf1 = buffer("momentum", index[j]).data_ptr();
      // PyTorch: the buffer starts as the gradient of the first APPLIED update. Whether earlier steps
      // were applied is known on the device only, so the kernel reads the flag there.
      int32_t* flag = started_flag(index[j]);
      slots[j].initialized = flag;
      marks.push_back(flag);
    }
  }
  kernels::SgdParams p;
  p.lr = lr_;
  p.momentum = opt_.momentum;
  p.weight_decay = opt_.weight_decay;
  p.dampening = opt_.dampening;
  p.nesterov = opt_.nesterov;
  p.skip = skip;
  kernels::sgd_update(params_[0].device(), slots, p);
  return marks;
}


std::vector<std::string> SGD::buffer_names() const {
  return opt_.momentum != 0.0 ? std::vector<std::string>{"momentum"} : std::vector<std::string>{};
}

// ---- Adam / AdamW ----------------------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, Options opt) : Optimizer(std::move(params), opt.master_weights), opt_(opt) {
  HL_CHECK(opt.beta1 >= 0.0 && opt.beta1 < 1.0 && opt.beta2 >= 0.0 && opt.beta2 < 1.0, type(),
           ": betas must be in [0, 1), got ", opt.beta1, ", ", opt.beta2);
  HL_CHECK(opt.eps > 0.0, type(), ": eps must be positive, got ", opt.eps);
  HL_CHECK(opt.weight_decay >= 0.0, type(), ": weight_decay must be >= 0, got ", opt.weight_decay);
  set_lr(opt.lr);  // validates it
}

int64_t* Adam::group_counter(size_t g) {
  return g == 0 ? applied_steps_device() : static_cast<int64_t*>(counters_[g].data_ptr());
}

std::vector<int32_t*> Adam::update(std::vector<kernels::ParamSlot>& slots, const std::vector<size_t>& index,
                                   const int32_t* skip) {
  const Device dev = params_[0].device();
  if (group_of_.empty()) {
    group_of_.assign(params_.size(), 0);
    counters_.assign(1, Tensor());
  }
  for (Tensor& c : counters_)  // the model moved (Optimizer::follow_params moves the base's state)
    if (c.defined() && c.device() != dev) c = c.to(dev);
  // The parameters of a group without a gradient this step leave it together, with its count so far.
  std::vector<char> present(params_.size(), 0);
  for (size_t i : index) present[i] = 1;
  std::vector<char> some_present(counters_.size(), 0), some_absent(counters_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) (present[i] ? some_present : some_absent)[group_of_[i]] = 1;
  std::vector<size_t> split_to(counters_.size(), 0);
  for (size_t g = 0; g < split_to.size(); ++g) {
    if (!some_present[g] || !some_absent[g]) continue;
    Tensor c = Tensor::empty({}, DType::f64, dev);
    copy_bytes(c.data_ptr(), dev, group_counter(g), dev, sizeof(int64_t));  // queued before this step's count
    counters_.push_back(c);
    split_to[g] = counters_.size() - 1;
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (!present[i] && split_to[group_of_[i]] != 0) group_of_[i] = split_to[group_of_[i]];

  std::map<size_t, std::vector<kernels::ParamSlot>> by_group;
  for (size_t j = 0; j < slots.size(); ++j) {
    slots[j].buf1 = buffer("exp_avg", index[j]).data_ptr();
    slots[j].buf2 = buffer("exp_avg_sq", index[j]).data_ptr();
    by_group[group_of_[index[j]]].push_back(slots[j]);
  }
  kernels::AdamParams p;
  p.lr = lr_;
  p.beta1 = opt_.beta1;
  p.beta2 = opt_.beta2;
  p.eps = opt_.eps;
  p.weight_decay = opt_.weight_decay;
  p.decoupled = opt_.decoupled;
  p.skip = skip;
  for (auto& [g, group] : by_group) {
    // Step t = (updates applied to the group so far) + 1, read by the kernel from the group's counter.
    p.applied_steps = group_counter(g);
    kernels::adam_update(dev, group, p);
  }
  // Group 0's count is the optimizer's own, which step_unless advances; the others', here, unless skipped.
  for (auto& [g, group] : by_group)
    if (g != 0) kernels::optim_finish(dev, skip, group_counter(g), {});
  return {};
}

std::vector<int64_t> Adam::param_steps() const {
  // One read per group (a synchronization on CUDA: between steps only), not one per parameter.
  const int64_t all = steps();  // group 0's count
  std::vector<int64_t> count(counters_.size(), all);
  for (size_t g = 1; g < counters_.size(); ++g) detail::read_raw(counters_[g], &count[g], sizeof count[g]);
  std::vector<int64_t> out(params_.size(), all);
  for (size_t i = 0; i < group_of_.size(); ++i) out[i] = count[group_of_[i]];
  return out;
}

Optimizer::State Adam::state() const {
  State s = Optimizer::state();
  const std::vector<int64_t> t = param_steps();
  const int64_t all = steps();
  if (std::any_of(t.begin(), t.end(), [all](int64_t v) { return v != all; })) {
    std::string list;
    for (int64_t v : t) list += (list.empty() ? "" : ",") + std::to_string(v);
    s.meta["param_steps"] = list;
  }
  return s;
}

void Adam::load_state(const State& s) {
  // Checked before the base changes anything; applied after it accepted the rest.
  std::vector<int64_t> t;
  auto it = s.meta.find("param_steps");
  auto steps_it = s.meta.find("steps");
  if (it != s.meta.end() && steps_it != s.meta.end()) {  // without 'steps' the base refuses the state
    const int64_t all = detail::parse_int64(steps_it->second, type() + "::load_state: 'steps'");
    std::stringstream ss(it->second);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const int64_t v = detail::parse_int64(item, type() + "::load_state: 'param_steps'");
      HL_CHECK(v >= 0 && v <= all, type(), "::load_state: 'param_steps' has ", v, ", outside [0, steps = ", all, "]");
      t.push_back(v);
    }
    HL_CHECK(t.size() == params_.size(), type(), "::load_state: 'param_steps' has ", t.size(),
             " counts for ", params_.size(), " parameters");
  }
  Optimizer::load_state(s);
  group_of_.clear();
  counters_.clear();
  if (t.empty()) return;
  const int64_t all = steps();
  group_of_.assign(params_.size(), 0);
  counters_.assign(1, Tensor());
  std::map<int64_t, size_t> group_with;  // a count other than steps() -> its group
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == all) continue;
    auto [g, fresh] = group_with.try_emplace(t[i], counters_.size());
    if (fresh) counters_.push_back(int64_tensor(t[i], params_[0].device()));
    group_of_[i] = g->second;
  }
}


}  // namespace hl::optim
