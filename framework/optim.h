// Optimizers. They update parameters in place (under NoGradGuard) through the kernels/ API.
#pragma once
#include <vector>

#include "framework/tensor.h"
#include "kernels/optim.h"

namespace hl::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // Drop every parameter's gradient (the next backward() starts them fresh).
  void zero_grad();
  const std::vector<Tensor>& params() const { return params_; }
  int64_t steps() const { return steps_; }

 protected:
  std::vector<Tensor> params_;
  int64_t steps_ = 0;
};

// Stochastic gradient descent with PyTorch's semantics (momentum buffer starts as the first
// gradient; weight decay added to the gradient; optional Nesterov and dampening).
class SGD : public Optimizer {
 public:
  struct Options {
    double lr = 0.01;
    double momentum = 0.0;
    double weight_decay = 0.0;
    double dampening = 0.0;
    bool nesterov = false;
  };
  SGD(std::vector<Tensor> params, Options opt);
  void step() override;
  double lr() const { return opt_.lr; }
  void set_lr(double lr) { opt_.lr = lr; }
  const std::vector<Tensor>& momentum_buffers() const { return momentum_; }

 private:
  Options opt_;
  std::vector<Tensor> momentum_;  // undefined until the parameter's first update
};

}  // namespace hl::optim
