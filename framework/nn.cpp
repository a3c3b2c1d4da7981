#include "framework/nn.h"

#include <cmath>
#include <sstream>
#include <unordered_set>

#include "framework/autograd.h"
#include "framework/profiler.h"

namespace hl::nn {

namespace {
// A tensor reached twice (a module added twice, tied weights) is listed once, under the first name, as
// PyTorch's named_parameters() does: an optimizer given it twice would update it twice.
std::vector<std::pair<std::string, Tensor>> first_of_each(std::vector<std::pair<std::string, Tensor>> all) {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& nt : all)
    if (seen.insert(nt.second.impl()).second) out.push_back(std::move(nt));
  return out;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out = params_;
  for (const auto& [cname, child] : children_)
    for (auto& [pname, p] : child->named_parameters()) out.emplace_back(cname + "." + pname, p);
  return first_of_each(std::move(out));
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out = buffers_;
  for (const auto& [cname, child] : children_)
    for (auto& [bname, b] : child->named_buffers()) out.emplace_back(cname + "." + bname, b);
  return first_of_each(std::move(out));
}

std::vector<std::pair<std::string, Tensor>> Module::named_state() const {
  std::vector<std::pair<std::string, Tensor>> out = named_parameters();
  for (auto& nb : named_buffers()) out.push_back(std::move(nb));
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
  data.impl()->storage->set_version(impl->storage->version());  // the same values: not a write (device.h)
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
  for (auto& [n, b] : buffers_)
    if (b.device() != d) replace_data(b, b.detach().to(d));
  for (auto& [n, c] : children_) c->to(d);
}

void Module::to(DType t) {
  HL_CHECK(is_floating(t), "Module::to: a model converts to a floating dtype (f16, f32 or f64), got ", dtype_name(t),
           " (", name(), ")");
  NoGradGuard no_grad;
  const DType mine = param_dtype(t);
  for (auto& [n, p] : params_)
    if (p.dtype() != mine) replace_data(p, cast(p.detach(), mine));
  for (auto& [n, b] : buffers_)
    if (b.dtype() != mine) replace_data(b, cast(b.detach(), mine));
  for (auto& [n, c] : children_) c->to(t);
}

std::string Module::summary() const {
  std::ostringstream os;
  os << name() << " (" << num_parameters() << " parameters)\n";
  for (const auto& [cname, child] : children_)
    os << "  (" << cname << ") " << child->name() << "  " << child->num_parameters() << "\n";
  return os.str();
}

void Module::check_new_name(const std::string& what, const std::string& n) const {
  const auto taken = [&](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == n) return true;
    return false;
  };
  HL_CHECK(!n.empty() && n.find('.') == std::string::npos, name(), ": ", what, " name '", n,
           "' must be non-empty and without a '.' (dots join the path: '2.weight')");
  HL_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), name(), ": the ", what, " name '", n,
           "' is taken already (a checkpoint would hold two tensors of one name)");
}

Tensor& Module::register_parameter(const std::string& pname, Tensor t) {
  check_new_name("parameter", pname);
  t.set_name(pname);
  t.requires_grad_(true);
  params_.emplace_back(pname, t);
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& bname, Tensor t) {
  check_new_name("buffer", bname);
  t.set_name(bname);
  buffers_.emplace_back(bname, t);
  return buffers_.back().second;
}

void Module::register_module(const std::string& mname, std::shared_ptr<Module> m) {
  HL_CHECK(m != nullptr, "register_module: module '", mname, "' is null");
  check_new_name("module", mname);
  // The child's parameters and buffers are named by their path from here ("2.weight"), which error
  // messages print: two layers' "weight"s told apart. A module added to a parent later is renamed from
  // the parent, so the names end up as in the outermost module's named_parameters(), with two
  // exceptions: a tensor this module holds already (a module added twice) keeps its first name, as
  // named_parameters() lists it; and a module does not know its parent, so a child added to a module
  // that is inside another one already is named from that module, not from the outermost.
  std::unordered_set<const TensorImpl*> held;
  for (const auto& [n, t] : named_state()) held.insert(t.impl());
  for (auto& [n, t] : m->named_state())
    if (held.count(t.impl()) == 0) t.set_name(mname + "." + n);
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

Tensor Linear::run(const Tensor& x, bool relu) {
  HL_CHECK(x.defined() && x.dim() == 2 && x.size(1) == in_, "Linear(", in_, " -> ", out_, "): expected input [N, ",
           in_, "], got ", x.describe());
  return linear(x, weight, bias, relu);
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
    auto* conv = dynamic_cast<Conv2d*>(layers[i].second.get());
    const bool fuse = fuse_ && (lin != nullptr || conv != nullptr) && i + 1 < layers.size() &&
                      dynamic_cast<ReLU*>(layers[i + 1].second.get()) != nullptr;
    // Named as summary() lists the layer, "(3) Conv2d(...)": two layers of one name (LeNet's pools) are
    // two rows, not one of two calls.
    profiler::Scope scope(profiler::enabled() ? "(" + layers[i].first + ") " + layers[i].second->name() +
                                                    (fuse ? "+ReLU" : "")
                                              : std::string());
    if (!fuse) {
      h = layers[i].second->forward(h);
      continue;
    }
    h = lin != nullptr ? lin->forward_relu(h) : conv->forward_relu(h);
    ++i;  // the ReLU already ran in the GEMM epilogue
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

// ---- convolutional networks ----

namespace {
std::string size2_str(Size2 s) { return std::to_string(s[0]) + "x" + std::to_string(s[1]); }
}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Generator& gen, Size2 stride, Size2 padding,
               bool with_bias)
    : in_(in_channels), out_(out_channels), kernel_(kernel), stride_(stride), padding_(padding) {
  HL_CHECK(in_channels > 0 && out_channels > 0 && kernel[0] > 0 && kernel[1] > 0, "Conv2d: channels and kernel "
           "must be positive, got ", in_channels, " -> ", out_channels, " kernel ", size2_str(kernel));
  HL_CHECK(stride[0] > 0 && stride[1] > 0 && padding[0] >= 0 && padding[1] >= 0, "Conv2d: stride ",
           size2_str(stride), " must be positive and padding ", size2_str(padding), " non-negative");
  // PyTorch: kaiming_uniform_(a=sqrt(5)) for the weight, which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel[0] * kernel[1]));
  weight = register_parameter("weight",
                              Tensor::uniform({out_channels, in_channels, kernel[0], kernel[1]}, gen, -bound, bound));
  if (with_bias) bias = register_parameter("bias", Tensor::uniform({out_channels}, gen, -bound, bound));
}

Tensor Conv2d::run(const Tensor& x, bool relu) {
  HL_CHECK(x.defined() && x.dim() == 4 && x.size(1) == in_, name(), ": expected input [N, ", in_, ", H, W], got ",
           x.defined() ? x.describe() : "an undefined tensor");
  return conv2d(x, weight, bias, stride_, padding_, relu);
}

std::string Conv2d::name() const {
  return "Conv2d(" + std::to_string(in_) + " -> " + std::to_string(out_) + ", " + size2_str(kernel_) +
         ", stride " + size2_str(stride_) + ", pad " + size2_str(padding_) + (bias.defined() ? "" : ", no bias") +
         ")";
}

namespace {
// "MaxPool2d(2x2)" for the usual pool (stride = kernel, no padding), else with the stride and padding.
std::string pool_name(const char* kind, Size2 kernel, Size2 stride, Size2 padding) {
  // A stride of 0 on a side is the kernel's on that side, as max_pool2d and avg_pool2d take it.
  const Size2 s{stride[0] == 0 ? kernel[0] : stride[0], stride[1] == 0 ? kernel[1] : stride[1]};
  std::string out = std::string(kind) + "(" + size2_str(kernel);
  if (s != kernel || padding != Size2{0, 0}) out += ", stride " + size2_str(s) + ", pad " + size2_str(padding);
  return out + ")";
}
}  // namespace

std::string MaxPool2d::name() const { return pool_name("MaxPool2d", kernel_, stride_, padding_); }
std::string AvgPool2d::name() const { return pool_name("AvgPool2d", kernel_, stride_, padding_); }

BatchNorm2d::BatchNorm2d(int64_t channels, double momentum, double eps)
    : channels_(channels), momentum_(momentum), eps_(eps) {
  HL_CHECK(channels > 0, "BatchNorm2d: channels must be positive, got ", channels);
  weight = register_parameter("weight", Tensor::ones({channels}));
  bias = register_parameter("bias", Tensor::zeros({channels}));
  running_mean = register_buffer("running_mean", Tensor::zeros({channels}));
  running_var = register_buffer("running_var", Tensor::ones({channels}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  HL_CHECK(x.defined() && x.dim() == 4 && x.size(1) == channels_, name(), ": expected input [N, ", channels_,
           ", H, W], got ", x.defined() ? x.describe() : "an undefined tensor");
  return batch_norm2d(x, weight, bias, running_mean, running_var, training(), momentum_, eps_);
}

std::string BatchNorm2d::name() const { return "BatchNorm2d(" + std::to_string(channels_) + ")"; }

Dropout::Dropout(double p, Generator& gen) : p_(p), gen_(gen.next_u64()) {
  HL_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}

std::string Dropout::name() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

std::shared_ptr<Sequential> lenet(Generator& gen) {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Conv2d>(1, 32, 5, gen, 1, 2));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<MaxPool2d>(2));
  m->add(std::make_shared<Conv2d>(32, 64, 5, gen, 1, 2));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<MaxPool2d>(2));
  m->add(std::make_shared<Flatten>());
  m->add(std::make_shared<Linear>(3136, 256, gen));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(256, 10, gen));
  return m;
}

std::shared_ptr<Sequential> vgg_small(Generator& gen) {
  auto m = std::make_shared<Sequential>();
  int64_t in = 3;
  for (int64_t width : {64, 128, 256}) {
    for (int rep = 0; rep < 2; ++rep) {
      m->add(std::make_shared<Conv2d>(in, width, 3, gen, 1, 1, /*bias=*/false));
      m->add(std::make_shared<BatchNorm2d>(width));
      m->add(std::make_shared<ReLU>());
      in = width;
    }
    m->add(std::make_shared<MaxPool2d>(2));
  }
  m->add(std::make_shared<GlobalAvgPool2d>());
  m->add(std::make_shared<Linear>(256, 10, gen));
  return m;
}

}  // namespace hl::nn
