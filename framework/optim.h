// Optimizers. They update parameters in place (under NoGradGuard) through the kernels/ API.
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
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // Drop every parameter's gradient (the next backward() starts them fresh).
  void zero_grad();
  const std::vector<Tensor>& params() const { return params_; }
  int64_t steps() const { return steps_; }

  // Everything needed to resume exactly (checkpoints): named state tensors (e.g. "momentum.3" for
  // the momentum buffer of parameter 3; absent when not created yet) and scalar settings as strings.
  struct State {
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> meta;
  };
  virtual State state() const;
  // Restore a state produced by state() of the same optimizer type over the same parameters
  // (copies the values; checks names, shapes and the optimizer type; throws hl::Error otherwise).
  virtual void load_state(const State& s);
  virtual std::string type() const = 0;

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
  std::string type() const override { return "SGD"; }
  State state() const override;
  void load_state(const State& s) override;
  double lr() const { return opt_.lr; }
  void set_lr(double lr) { opt_.lr = lr; }
  const std::vector<Tensor>& momentum_buffers() const { return momentum_; }

 private:
  Options opt_;
  std::vector<Tensor> momentum_;  // undefined until the parameter's first update
};

}  // namespace hl::optim
