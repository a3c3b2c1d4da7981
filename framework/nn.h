// Neural-network modules: parameters with names, train/eval mode, moving between devices.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/ops.h"
#include "framework/ops_cnn.h"
#include "framework/tensor.h"

namespace hl::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual std::string name() const = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Every parameter of this module and its children, named like PyTorch ("0.weight", "2.bias"). A
  // parameter reached twice (a module added twice: tied weights) is listed once, under its first name.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // Buffers: state that is saved and moved with the module but not trained (BatchNorm2d's running
  // statistics), named like parameters ("1.running_mean").
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // Parameters, then buffers: everything a checkpoint saves (PyTorch's state_dict).
  std::vector<std::pair<std::string, Tensor>> named_state() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  // Move (or convert) every parameter and buffer in place: handles held elsewhere (an optimizer)
  // stay valid. Gradients are dropped. to(DType) converts each module's tensors to
  // param_dtype(t), which is t except where a module keeps its own precision (BatchNorm2d stays f32
  // under f16/mixed, DESIGN.md §3).
  void to(Device d);
  void to(DType t);

  // A one-line-per-layer summary with parameter counts.
  std::string summary() const;

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  // The dtype this module's own parameters and buffers take when the model is converted to t.
  virtual DType param_dtype(DType t) const { return t; }
  // Also names the child's parameters and buffers by their path from here ("2.weight"; Tensor::name),
  // as error messages print them.
  void register_module(const std::string& name, std::shared_ptr<Module> m);
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

 private:
  // A name for a new parameter, buffer or child: not empty, no '.', not taken in this module.
  void check_new_name(const std::string& what, const std::string& n) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// y = x W^T + b, W: [out, in]. Initialized like PyTorch: U(-1/sqrt(in), 1/sqrt(in)) for W and b.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) override { return run(x, false); }
  // relu(forward(x)) with the ReLU in the GEMM epilogue: the same result, one pass less. Sequential
  // calls it where a ReLU follows (the module itself keeps no flag: called alone, it is a Linear).
  Tensor forward_relu(const Tensor& x) { return run(x, true); }
  std::string name() const override;
  Tensor weight, bias;

 private:
  Tensor run(const Tensor& x, bool relu);
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
  // Fuse each Linear (or Conv2d) followed by a ReLU into one GEMM (convolution) with a ReLU epilogue
  // (the ReLU becomes a no-op).
  void fuse_linear_relu(bool on = true) { fuse_ = on; }

 private:
  bool fuse_ = false;
};

// ---- convolutional networks (framework/ops_cnn.h) ----

// y = conv2d(x, W) + b, W: [out, in, k, k]. Initialized like PyTorch: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// for W and b, fan_in = in * kh * kw.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Generator& gen, Size2 stride = {1, 1},
         Size2 padding = {0, 0}, bool with_bias = true);
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Generator& gen, int64_t stride = 1,
         int64_t padding = 0, bool with_bias = true)
      : Conv2d(in_channels, out_channels, Size2{kernel, kernel}, gen, Size2{stride, stride}, Size2{padding, padding},
               with_bias) {}
  Tensor forward(const Tensor& x) override { return run(x, false); }
  Tensor forward_relu(const Tensor& x) { return run(x, true); }  // the ReLU in the epilogue (as Linear's)
  std::string name() const override;
  Tensor weight, bias;

 private:
  Tensor run(const Tensor& x, bool relu);
  int64_t in_, out_;
  Size2 kernel_, stride_, padding_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel, Size2 stride = {0, 0}, Size2 padding = {0, 0})
      : kernel_(kernel), stride_(stride), padding_(padding) {}
  explicit MaxPool2d(int64_t kernel) : MaxPool2d(Size2{kernel, kernel}) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_); }
  std::string name() const override;

 private:
  Size2 kernel_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel, Size2 stride = {0, 0}, Size2 padding = {0, 0})
      : kernel_(kernel), stride_(stride), padding_(padding) {}
  explicit AvgPool2d(int64_t kernel) : AvgPool2d(Size2{kernel, kernel}) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_, stride_, padding_); }
  std::string name() const override;

 private:
  Size2 kernel_, stride_, padding_;
};

// [N, C, H, W] -> [N, C]
class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_avg_pool2d(x); }
  std::string name() const override { return "GlobalAvgPool2d()"; }
};

// Batch norm over the channels of NCHW input, PyTorch's defaults: weight (gamma) 1, bias (beta) 0,
// buffers running_mean 0 and running_var 1, momentum 0.1, eps 1e-5. Parameters and buffers stay f32
// when the model is converted to f16 (DESIGN.md §3: batch-norm parameters and statistics in FP32).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double momentum = 0.1, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  Tensor weight, bias, running_mean, running_var;

 protected:
  DType param_dtype(DType t) const override { return t == DType::f64 ? DType::f64 : DType::f32; }

 private:
  int64_t channels_;
  double momentum_, eps_;
};

// Inverted dropout (framework/ops_cnn.h); each forward in training mode draws a new seed from the
// module's own generator (seeded from `gen` at construction, so runs are reproducible). A checkpoint
// does not hold the generator (docs/checkpoints.md): a resumed run draws other masks.
class Dropout : public Module {
 public:
  Dropout(double p, Generator& gen);
  Tensor forward(const Tensor& x) override { return dropout(x, p_, training(), gen_); }
  std::string name() const override;

 private:
  double p_;
  Generator gen_;
};

// MLP-512 from DESIGN.md §4: 784-512-512-10 with ReLU.
std::shared_ptr<Sequential> mlp512(Generator& gen);

// LeNet from DESIGN.md §4 (MNIST, input [N, 1, 28, 28]): conv5x5(1->32, pad 2)-ReLU-maxpool2 ->
// conv5x5(32->64, pad 2)-ReLU-maxpool2 -> flatten -> linear(3136->256)-ReLU -> linear(256->10).
std::shared_ptr<Sequential> lenet(Generator& gen);

// VGG-small from DESIGN.md §4 (CIFAR-10, input [N, 3, 32, 32]): [conv3x3 64 (pad 1), BN, ReLU] x2,
// maxpool2 -> [128] x2, maxpool2 -> [256] x2, maxpool2 -> global average pool -> linear(256->10).
// The convolutions have no bias (the following batch norm's beta would cancel it), as is usual.
std::shared_ptr<Sequential> vgg_small(Generator& gen);

}  // namespace hl::nn
