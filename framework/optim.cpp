#include "framework/optim.h"

#include <cmath>
#include <cstdio>

#include "framework/autograd.h"
#include "framework/ops.h"
#include "kernels/elementwise.h"

namespace hl::optim {

namespace {

// "momentum.3" -> 3 when name has the form <prefix>.<i>, else -1.
int64_t indexed(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix + ".", 0) != 0) return -1;
  try {
    size_t used = 0;
    const std::string rest = name.substr(prefix.size() + 1);
    const int64_t i = std::stoll(rest, &used);
    return used == rest.size() ? i : -1;
  } catch (...) {
    return -1;
  }
}

double meta_double(const Optimizer::State& s, const std::string& key, const std::string& who) {
  auto it = s.meta.find(key);
  HL_CHECK(it != s.meta.end(), who, "::load_state: the state has no '", key, "'");
  return std::stod(it->second);
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
  masters_.resize(params_.size());
  grads_.resize(params_.size());
  if (use_masters_) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      masters_[i] = Tensor::empty(params_[i].shape(), state_dtype(i), params_[i].device());
      masters_[i].copy_(params_[i]);
    }
  }
}

DType Optimizer::state_dtype(size_t i) const { return params_[i].dtype() == DType::f64 ? DType::f64 : DType::f32; }

Tensor& Optimizer::buffer(const std::string& name, size_t i, bool* created) {
  auto& list = buffers_[name];
  list.resize(params_.size());
  if (created) *created = false;
  if (!list[i].defined()) {
    list[i] = Tensor::zeros(params_[i].shape(), state_dtype(i), params_[i].device());
    if (created) *created = true;
  }
  return list[i];
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

void Optimizer::unscale_grads(float inv_scale, int32_t* found_inf) {
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
  kernels::unscale_grads(params_[0].device(), slots, inv_scale, found_inf);
  unscaled_ = true;
}

void Optimizer::skip_step() { unscaled_ = false; }

double Optimizer::clip_grad_norm(double max_norm) {
  HL_CHECK(max_norm > 0.0, type(), "::clip_grad_norm: max_norm must be positive, got ", max_norm);
  if (!unscaled_) unscale_grads(1.0f, nullptr);
  std::vector<kernels::ConstSpan> spans;
  std::vector<Tensor> present;
  for (const Tensor& g : grads_) {
    if (!g.defined()) continue;
    spans.push_back({g.data_ptr(), g.dtype(), g.numel()});
    present.push_back(g);
  }
  Tensor sq = Tensor::empty({}, DType::f32, params_[0].device());
  kernels::sum_of_squares(params_[0].device(), spans, sq.data<float>());
  const double norm = std::sqrt(sq.item());
  // PyTorch's rule: scale by max_norm / (norm + 1e-6) when that is below 1.
  const double factor = max_norm / (norm + 1e-6);
  if (factor < 1.0) {
    for (Tensor& g : present)
      kernels::scalar(g.device(), kernels::ScalarOp::mul, g.numel(), g.data_ptr(), factor, g.data_ptr(), g.dtype());
  }
  return norm;
}

void Optimizer::step() {
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
  update(slots, index);
  unscaled_ = false;
  ++steps_;
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

Optimizer::State Optimizer::state() const {
  State s;
  s.meta["type"] = type();
  s.meta["steps"] = std::to_string(steps_);
  s.meta["lr"] = detail::exact(lr_);
  s.meta["master_weights"] = use_masters_ ? "1" : "0";
  for (size_t i = 0; i < masters_.size(); ++i)
    if (masters_[i].defined()) s.tensors.emplace_back("master." + std::to_string(i), masters_[i]);
  for (const auto& [name, list] : buffers_)
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].defined()) s.tensors.emplace_back(name + "." + std::to_string(i), list[i]);
  return s;
}

void Optimizer::load_state(const State& s) {
  auto it = s.meta.find("type");
  HL_CHECK(it != s.meta.end() && it->second == type(), "load_state: a state of optimizer '",
           it == s.meta.end() ? std::string("?") : it->second, "' cannot be loaded into ", type());
  auto st = s.meta.find("steps");
  HL_CHECK(st != s.meta.end(), "load_state: the ", type(), " state has no 'steps'");
  const auto mw = s.meta.find("master_weights");
  HL_CHECK(mw == s.meta.end() || (mw->second == "1") == use_masters_, "load_state: the state ",
           mw != s.meta.end() && mw->second == "1" ? "has" : "has no", " master weights, this ", type(),
           use_masters_ ? " keeps them" : " does not");
  // Validate everything before changing anything: a bad state leaves the optimizer as it was.
  std::map<std::string, std::vector<Tensor>> restored;
  std::vector<Tensor> masters(params_.size());
  for (const auto& [name, t] : s.tensors) {
    const size_t dot = name.rfind('.');
    const std::string prefix = dot == std::string::npos ? name : name.substr(0, dot);
    const int64_t i = indexed(name, prefix);
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
      auto& list = restored[prefix];
      list.resize(params_.size());
      list[k] = copy;
    }
  }
  if (use_masters_) {
    for (size_t i = 0; i < params_.size(); ++i)
      HL_CHECK(masters[i].defined(), "load_state: the state lacks master weights for parameter ", i);
    masters_ = masters;
  }
  buffers_ = restored;
  steps_ = std::stoll(st->second);
  lr_ = meta_double(s, "lr", type());
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

void SGD::update(std::vector<kernels::ParamSlot>& slots, const std::vector<size_t>& index) {
  if (opt_.momentum != 0.0) {
    for (size_t j = 0; j < slots.size(); ++j) {
      bool created = false;
      slots[j].buf1 = buffer("momentum", index[j], &created).data_ptr();
      slots[j].first_step = created;  // PyTorch: the buffer starts as the first gradient
    }
  }
  kernels::SgdParams p;
  p.lr = lr_;
  p.momentum = opt_.momentum;
  p.weight_decay = opt_.weight_decay;
  p.dampening = opt_.dampening;
  p.nesterov = opt_.nesterov;
  kernels::sgd_update(params_[0].device(), slots, p);
}


// ---- Adam / AdamW ----------------------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, Options opt) : Optimizer(std::move(params), opt.master_weights), opt_(opt) {
  HL_CHECK(opt.beta1 >= 0.0 && opt.beta1 < 1.0 && opt.beta2 >= 0.0 && opt.beta2 < 1.0, type(),
           ": betas must be in [0, 1), got ", opt.beta1, ", ", opt.beta2);
  HL_CHECK(opt.eps > 0.0, type(), ": eps must be positive, got ", opt.eps);
  HL_CHECK(opt.weight_decay >= 0.0, type(), ": weight_decay must be >= 0, got ", opt.weight_decay);
  set_lr(opt.lr);  // validates it
}

void Adam::update(std::vector<kernels::ParamSlot>& slots, const std::vector<size_t>& index) {
  for (size_t j = 0; j < slots.size(); ++j) {
    slots[j].buf1 = buffer("exp_avg", index[j]).data_ptr();
    slots[j].buf2 = buffer("exp_avg_sq", index[j]).data_ptr();
  }
  kernels::AdamParams p;
  p.lr = lr_;
  p.beta1 = opt_.beta1;
  p.beta2 = opt_.beta2;
  p.eps = opt_.eps;
  p.weight_decay = opt_.weight_decay;
  p.decoupled = opt_.decoupled;
  p.step = steps_ + 1;  // this update is step t = steps_ + 1
  kernels::adam_update(params_[0].device(), slots, p);
}


}  // namespace hl::optim
