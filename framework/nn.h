// Neural-network modules: parameters with names, train/eval mode, moving between devices.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/ops.h"
#include "framework/tensor.h"

namespace hl::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual std::string name() const = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Every parameter of this module and its children, named like PyTorch ("0.weight", "2.bias").
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  // Move (or convert) every parameter in place: handles held elsewhere (an optimizer) stay valid.
  // Gradients are dropped.
  void to(Device d);
  void to(DType t);

  // A one-line-per-layer summary with parameter counts.
  std::string summary() const;

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);
  void register_module(const std::string& name, std::shared_ptr<Module> m);
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// y = x W^T + b, W: [out, in]. Initialized like PyTorch: U(-1/sqrt(in), 1/sqrt(in)) for W and b.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  Tensor weight, bias;
  // Apply ReLU in the GEMM epilogue (set by Sequential when a ReLU follows; same result, one pass less).
  bool fused_relu = false;

 private:
  int64_t in_, out_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string name() const override { return "ReLU()"; }
};

// [N, d1, d2, ...] -> [N, d1*d2*...]
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return flatten(x, 1); }
  std::string name() const override { return "Flatten()"; }
};

class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);
  void add(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return children().size(); }
  Module& operator[](size_t i) const { return *children()[i].second; }
  // Fuse each Linear followed by a ReLU into one GEMM with a ReLU epilogue (the ReLU becomes a no-op).
  void fuse_linear_relu(bool on = true) { fuse_ = on; }

 private:
  bool fuse_ = false;
};

// MLP-512 from DESIGN.md §4: 784-512-512-10 with ReLU.
std::shared_ptr<Sequential> mlp512(Generator& gen);

}  // namespace hl::nn
