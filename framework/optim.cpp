#include "framework/optim.h"

#include <cstdio>

#include "framework/autograd.h"

namespace hl::optim {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    HL_CHECK(params_[i].defined() && params_[i].is_leaf() && params_[i].requires_grad(), "Optimizer: parameter ", i,
             " (", params_[i].describe(), ") must be a leaf tensor with requires_grad");
  }
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

Optimizer::State Optimizer::state() const {
  State s;
  s.meta["type"] = type();
  s.meta["steps"] = std::to_string(steps_);
  return s;
}

void Optimizer::load_state(const State& s) {
  auto it = s.meta.find("type");
  HL_CHECK(it != s.meta.end() && it->second == type(), "load_state: state of optimizer '",
           it == s.meta.end() ? std::string("?") : it->second, "' cannot be loaded into ", type());
  auto st = s.meta.find("steps");
  HL_CHECK(st != s.meta.end(), "load_state: ", type(), " state has no 'steps'");
  steps_ = std::stoll(st->second);
}

namespace {
// Every bit of a double, as text (17 significant digits round-trip exactly).
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Parse "momentum.<i>" into i, or -1.
int64_t indexed(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix + ".", 0) != 0) return -1;
  try {
    return std::stoll(name.substr(prefix.size() + 1));
  } catch (...) {
    return -1;
  }
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, Options opt) : Optimizer(std::move(params)), opt_(opt) {
  HL_CHECK(opt.lr >= 0.0, "SGD: learning rate must be >= 0, got ", opt.lr);
  HL_CHECK(opt.momentum >= 0.0, "SGD: momentum must be >= 0, got ", opt.momentum);
  HL_CHECK(opt.weight_decay >= 0.0, "SGD: weight_decay must be >= 0, got ", opt.weight_decay);
  HL_CHECK(!opt.nesterov || (opt.momentum > 0.0 && opt.dampening == 0.0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening 0");
  momentum_.resize(params_.size());
}

Optimizer::State SGD::state() const {
  State s = Optimizer::state();
  for (size_t i = 0; i < momentum_.size(); ++i)
    if (momentum_[i].defined()) s.tensors.emplace_back("momentum." + std::to_string(i), momentum_[i]);
  s.meta["lr"] = exact(opt_.lr);
  return s;
}

void SGD::load_state(const State& s) {
  Optimizer::load_state(s);
  std::vector<Tensor> restored(params_.size());
  for (const auto& [name, t] : s.tensors) {
    const int64_t i = indexed(name, "momentum");
    HL_CHECK(i >= 0 && i < static_cast<int64_t>(params_.size()), "SGD::load_state: unexpected state tensor '", name,
             "' (this optimizer has ", params_.size(), " parameters)");
    const Tensor& p = params_[static_cast<size_t>(i)];
    HL_CHECK(t.shape() == p.shape(), "SGD::load_state: '", name, "' is ", t.describe(), " but parameter ", i, " is ",
             p.describe());
    restored[static_cast<size_t>(i)] = Tensor::empty(p.shape(), p.dtype(), p.device());
    restored[static_cast<size_t>(i)].copy_(t);
  }
  momentum_ = std::move(restored);
  if (auto it = s.meta.find("lr"); it != s.meta.end()) opt_.lr = std::stod(it->second);
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;  // a parameter the loss did not reach
    HL_CHECK(g.dtype() == p.dtype() && g.device() == p.device() && g.shape() == p.shape(), "SGD: gradient ",
             g.describe(), " does not match parameter '", p.name(), "' ", p.describe());
    kernels::SgdParams sp;
    sp.lr = opt_.lr;
    sp.momentum = opt_.momentum;
    sp.weight_decay = opt_.weight_decay;
    sp.dampening = opt_.dampening;
    sp.nesterov = opt_.nesterov;
    if (opt_.momentum != 0.0 && !momentum_[i].defined()) {
      momentum_[i] = Tensor::empty(p.shape(), p.dtype(), p.device());
      sp.first_step = true;
    }
    kernels::sgd_step(p.device(), p.numel(), p.data_ptr(), g.data_ptr(),
                      momentum_[i].defined() ? momentum_[i].data_ptr() : nullptr, p.dtype(), sp);
  }
  ++steps_;
}

}  // namespace hl::optim
