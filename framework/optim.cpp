#include "framework/optim.h"

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

SGD::SGD(std::vector<Tensor> params, Options opt) : Optimizer(std::move(params)), opt_(opt) {
  HL_CHECK(opt.lr >= 0.0, "SGD: learning rate must be >= 0, got ", opt.lr);
  HL_CHECK(opt.momentum >= 0.0, "SGD: momentum must be >= 0, got ", opt.momentum);
  HL_CHECK(opt.weight_decay >= 0.0, "SGD: weight_decay must be >= 0, got ", opt.weight_decay);
  HL_CHECK(!opt.nesterov || (opt.momentum > 0.0 && opt.dampening == 0.0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening 0");
  momentum_.resize(params_.size());
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
