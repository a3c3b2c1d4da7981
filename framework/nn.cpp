#include "framework/nn.h"

#include <cmath>
#include <sstream>

#include "framework/autograd.h"

namespace hl::nn {

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out = params_;
  for (const auto& [cname, child] : children_)
    for (auto& [pname, p] : child->named_parameters()) out.emplace_back(cname + "." + pname, p);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

namespace {
// Replace a parameter's contents in place, so every handle to it sees the new storage.
void replace_data(Tensor& p, const Tensor& data) {
  TensorImpl* impl = p.impl();
  impl->storage = data.impl()->storage;
  impl->offset = data.impl()->offset;
  impl->dtype = data.dtype();
  impl->grad.reset();
}
}  // namespace

void Module::to(Device d) {
  NoGradGuard no_grad;
  for (auto& [n, p] : params_)
    if (p.device() != d) replace_data(p, p.detach().to(d));
  for (auto& [n, c] : children_) c->to(d);
}

void Module::to(DType t) {
  NoGradGuard no_grad;
  for (auto& [n, p] : params_)
    if (p.dtype() != t) replace_data(p, cast(p.detach(), t));
  for (auto& [n, c] : children_) c->to(t);
}

std::string Module::summary() const {
  std::ostringstream os;
  os << name() << " (" << num_parameters() << " parameters)\n";
  for (const auto& [cname, child] : children_)
    os << "  (" << cname << ") " << child->name() << "  " << child->num_parameters() << "\n";
  return os.str();
}

Tensor& Module::register_parameter(const std::string& pname, Tensor t) {
  t.set_name(pname);
  t.requires_grad_(true);
  params_.emplace_back(pname, t);
  return params_.back().second;
}

void Module::register_module(const std::string& mname, std::shared_ptr<Module> m) {
  HL_CHECK(m != nullptr, "register_module: module '", mname, "' is null");
  children_.emplace_back(mname, std::move(m));
}

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool with_bias)
    : in_(in_features), out_(out_features) {
  HL_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got ", in_features, " -> ",
           out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", Tensor::uniform({out_features, in_features}, gen, -bound, bound));
  if (with_bias) bias = register_parameter("bias", Tensor::uniform({out_features}, gen, -bound, bound));
}

Tensor Linear::forward(const Tensor& x) {
  HL_CHECK(x.defined() && x.dim() == 2 && x.size(1) == in_, "Linear(", in_, " -> ", out_, "): expected input [N, ",
           in_, "], got ", x.describe());
  return linear(x, weight, bias, fused_relu);
}

std::string Linear::name() const {
  return "Linear(" + std::to_string(in_) + " -> " + std::to_string(out_) + (bias.defined() ? "" : ", no bias") + ")";
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) {
  for (auto& l : layers) add(std::move(l));
}

void Sequential::add(std::shared_ptr<Module> m) { register_module(std::to_string(children().size()), std::move(m)); }

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  const auto& layers = children();
  for (size_t i = 0; i < layers.size(); ++i) {
    auto* lin = dynamic_cast<Linear*>(layers[i].second.get());
    const bool fuse = fuse_ && lin != nullptr && i + 1 < layers.size() &&
                      dynamic_cast<ReLU*>(layers[i + 1].second.get()) != nullptr;
    if (lin != nullptr) lin->fused_relu = fuse;
    h = layers[i].second->forward(h);
    if (fuse) ++i;  // the ReLU already ran in the GEMM epilogue
  }
  return h;
}

std::shared_ptr<Sequential> mlp512(Generator& gen) {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Flatten>());
  m->add(std::make_shared<Linear>(784, 512, gen));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(512, 512, gen));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(512, 10, gen));
  return m;
}

}  // namespace hl::nn
