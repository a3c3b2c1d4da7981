// The halfling side of tests/python/pytorch_parity.py: every differentiable op, the modules'
// initializers, the optimizers and the canonical models, run on the CPU on fresh random inputs, with
// what they gave written to one safetensors file, so that the script can recompute each case with
// PyTorch (in float64, from the same inputs) and compare. Not a tutorial: a test helper.
//
//   parity_cases <seed> <out.safetensors> [cuda]
//
// With `cuda`, every op case and optimizer runs on the GPU (the inputs drawn on the CPU as without it,
// then copied), and the file is checked by `pytorch_parity.py --file`, on the GPU machine (whose python3
// has PyTorch) and again at home (scripts/gpu_check.sh short's step parity-cuda). The modules' initial
// values (drawn on the host, the same on both) and the canonical models (see models()) are left out.
//
// What the file holds, per case (its name is the case's):
//   <case>/in/<k>      the inputs, as the op got them (f16 inputs already rounded)
//   <case>/out         the op's output
//   <case>/seed        d(loss)/d(out), random, for the backward pass
//   <case>/grad/<k>    d(loss)/d(input k), for each input that requires grad
//   <case>/extra/<x>   what else the op changed (batch norm's running statistics)
// and, for the optimizer cases, <case>/p0/<i>, <case>/g/<step>/<i> (absent: no gradient that step),
// <case>/p/<i> (after the last step), <case>/master/<i>, <case>/norm/<step>; for the models,
// <case>/param/<i>, <case>/buffer/<i>, <case>/x, <case>/y, <case>/logits, <case>/loss, <case>/grad/<i>,
// <case>/buffer_after/<i>. The metadata key "cases" is a JSON list describing each case (its op and
// settings, or the error that stopped it) in order; the script reads the settings from it, so the two
// sides cannot drift apart silently.
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/autograd.h"
#include "framework/checkpoint.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/ops_cnn.h"
#include "framework/optim.h"
#include "kernels/runtime.h"

using namespace hl;
using json = nlohmann::ordered_json;

namespace {

// What an op case hands back: its output and anything else it changed.
struct Result {
  Tensor out;
  NamedTensors extra;
};

struct OpCase {
  json spec;                   // {"name", "op", settings...}
  std::vector<Tensor> inputs;  // leaves; those that require grad get a gradient
  std::function<Result(const std::vector<Tensor>&)> run;
};

// Record one case: body(spec) computes it and returns its entries of the file, which are appended only
// when all of it ran. A case that throws (an op a device does not support) is listed with its error, for
// the script to report, and the other cases still run.
void record_case(NamedTensors& file, json& list, json spec, const std::function<NamedTensors(json&)>& body) {
  try {
    const NamedTensors entries = body(spec);
    file.insert(file.end(), entries.begin(), entries.end());
  } catch (const std::exception& e) {
    spec["error"] = e.what();
  }
  list.push_back(spec);
}

class Cases {
 public:
  Cases(uint64_t seed, Device dev) : gen_(seed), dev_(dev) {}
  Device device() const { return dev_; }
  // A tensor made on the host, on the cases' device (a leaf: what the op cases take).
  Tensor on(const Tensor& host) const { return host.to(dev_); }

  // Random inputs that require grad: normal values (never zeros), uniform ones for ops with a
  // restricted domain; and labels.
  Tensor normal(const Shape& s, DType t = DType::f32, double std = 1.0) {
    Tensor x = on(Tensor::randn(s, gen_, t, Device::cpu, 0.0, std));
    x.requires_grad_();
    return x;
  }
  Tensor positive(const Shape& s, DType t = DType::f32, double lo = 0.5, double hi = 2.0) {
    Tensor x = on(Tensor::uniform(s, gen_, lo, hi, t));
    x.requires_grad_();
    return x;
  }
  Tensor labels(int64_t n, int64_t classes) {
    std::vector<int32_t> y(static_cast<size_t>(n));
    for (auto& v : y) v = static_cast<int32_t>(gen_.below(static_cast<uint64_t>(classes)));
    return on(Tensor::from_vector(y, {n}));
  }
  Generator& gen() { return gen_; }

  // A case: f(inputs) returns the output (a Tensor) or the output and what else changed (a Result).
  template <class F>
  void op(json spec, std::vector<Tensor> inputs, F f) {
    if constexpr (std::is_same_v<std::invoke_result_t<F, const std::vector<Tensor>&>, Result>) {
      ops_.push_back({std::move(spec), std::move(inputs), f});
    } else {
      ops_.push_back({std::move(spec), std::move(inputs), [f](const std::vector<Tensor>& in) {
                        return Result{f(in), {}};
                      }});
    }
  }

  // Run every op case: forward, backward from a random seed, and record it all (record_case).
  void run_ops(NamedTensors& file, json& list) {
    for (auto& c : ops_) record_case(file, list, c.spec, [&](json&) { return run_one(c, c.spec.at("name")); });
  }

 private:
  // One case's entries of the file.
  NamedTensors run_one(OpCase& c, const std::string& name) {
    NamedTensors out;
    Result r = c.run(c.inputs);
    for (size_t k = 0; k < c.inputs.size(); ++k) out.push_back({name + "/in/" + std::to_string(k), c.inputs[k]});
    out.push_back({name + "/out", r.out.detach()});
    for (auto& [key, t] : r.extra) out.push_back({name + "/extra/" + key, t});
    bool wants_grad = false;
    for (const Tensor& x : c.inputs) wants_grad = wants_grad || x.requires_grad();
    if (!wants_grad) return out;
    // An output cut from the graph would leave the script nothing to compare the gradients with.
    if (!r.out.requires_grad()) throw Error("parity_cases: " + name + ": the output has no gradient");
    Tensor seed = on(Tensor::randn(r.out.shape(), gen_, r.out.dtype()));
    r.out.backward(seed);
    out.push_back({name + "/seed", seed});
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      if (!c.inputs[k].requires_grad()) continue;
      if (!c.inputs[k].grad().defined())
        throw Error("parity_cases: " + name + ": no gradient for input " + std::to_string(k));
      out.push_back({name + "/grad/" + std::to_string(k), c.inputs[k].grad()});
    }
    return out;
  }

  Generator gen_;
  Device dev_;
  std::vector<OpCase> ops_;
};

// ---- the op cases ---------------------------------------------------------------------------------

// An exponent in a case's name: "2", "0.5", "-2.5".
std::string num(double e) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", e);
  return buf;
}

void elementwise(Cases& c) {
  for (DType t : {DType::f32, DType::f16}) {
    const std::string d = dtype_name(t);
    c.op({{"name", "add_broadcast_" + d}, {"op", "add"}}, {c.normal({2, 3, 4}, t), c.normal({3, 1}, t)},
         [](const std::vector<Tensor>& x) { return add(x[0], x[1]); });
    c.op({{"name", "sub_broadcast_" + d}, {"op", "sub"}}, {c.normal({3, 1}, t), c.normal({2, 1, 5}, t)},
         [](const std::vector<Tensor>& x) { return sub(x[0], x[1]); });
    c.op({{"name", "mul_broadcast_" + d}, {"op", "mul"}}, {c.normal({2, 3, 4}, t), c.normal({4}, t)},
         [](const std::vector<Tensor>& x) { return mul(x[0], x[1]); });
    c.op({{"name", "div_broadcast_" + d}, {"op", "div"}}, {c.normal({2, 3, 4}, t), c.positive({1, 3, 1}, t)},
         [](const std::vector<Tensor>& x) { return div(x[0], x[1]); });
    c.op({{"name", "add_scalar_" + d}, {"op", "add_scalar"}, {"s", 0.3}}, {c.normal({5, 6}, t)},
         [](const std::vector<Tensor>& x) { return add(x[0], 0.3); });
    c.op({{"name", "mul_scalar_" + d}, {"op", "mul_scalar"}, {"s", -1.7}}, {c.normal({5, 6}, t)},
         [](const std::vector<Tensor>& x) { return mul(x[0], -1.7); });
    c.op({{"name", "div_scalar_" + d}, {"op", "div_scalar"}, {"s", 3.0}}, {c.normal({5, 6}, t)},
         [](const std::vector<Tensor>& x) { return x[0] / 3.0; });
    c.op({{"name", "rsub_" + d}, {"op", "rsub"}, {"s", 2.5}}, {c.normal({5, 6}, t)},
         [](const std::vector<Tensor>& x) { return rsub(2.5, x[0]); });
    c.op({{"name", "rdiv_" + d}, {"op", "rdiv"}, {"s", 1.5}}, {c.positive({5, 6}, t)},
         [](const std::vector<Tensor>& x) { return rdiv(1.5, x[0]); });
    c.op({{"name", "neg_" + d}, {"op", "neg"}}, {c.normal({5, 6}, t)},
         [](const std::vector<Tensor>& x) { return neg(x[0]); });
    c.op({{"name", "exp_" + d}, {"op", "exp"}}, {c.normal({5, 6}, t, 1.5)},
         [](const std::vector<Tensor>& x) { return exp(x[0]); });
    c.op({{"name", "log_" + d}, {"op", "log"}}, {c.positive({5, 6}, t, 0.01, 50.0)},
         [](const std::vector<Tensor>& x) { return log(x[0]); });
    for (double e : {2.0, 3.0, 0.5, -1.0, 1.5, -2.5}) {
      c.op({{"name", "pow_" + num(e) + "_" + d}, {"op", "pow"}, {"exponent", e}},
           {c.positive({4, 5}, t, 0.2, 3.0)}, [e](const std::vector<Tensor>& x) { return pow(x[0], e); });
    }
    // Integer exponents on negative bases, and 0, whose gradient is 0 everywhere (PyTorch's, also at 0).
    for (double e : {2.0, 3.0, 0.0}) {
      Tensor x = c.on(Tensor::from_vector(std::vector<float>{-2.5f, -1.0f, -0.5f, 0.0f, 0.75f, 1.25f}, {2, 3}, t));
      x.requires_grad_();
      c.op({{"name", "pow_signed_" + num(e) + "_" + d}, {"op", "pow"}, {"exponent", e}}, {x},
           [e](const std::vector<Tensor>& in) { return pow(in[0], e); });
    }
    // ReLU at exact zeros: the gradient there is 0, as PyTorch's.
    Tensor r = c.on(Tensor::from_vector(std::vector<float>{-1.5f, 0.0f, 2.0f, -0.0f, 0.5f, -3.0f, 0.0f, 1.0f},
                                        {2, 4}, t));
    r.requires_grad_();
    c.op({{"name", "relu_zeros_" + d}, {"op", "relu"}}, {r}, [](const std::vector<Tensor>& x) { return relu(x[0]); });
    c.op({{"name", "relu_" + d}, {"op", "relu"}}, {c.normal({6, 7}, t)},
         [](const std::vector<Tensor>& x) { return relu(x[0]); });
  }
  // Mixed dtypes promote to f32 (docs/precision.md), as PyTorch's type promotion does.
  c.op({{"name", "add_promote_f16_f32"}, {"op", "add"}}, {c.normal({3, 4}, DType::f16), c.normal({4}, DType::f32)},
       [](const std::vector<Tensor>& x) { return add(x[0], x[1]); });
  c.op({{"name", "mul_promote_f32_f16"}, {"op", "mul"}}, {c.normal({3, 4}, DType::f32), c.normal({3, 1}, DType::f16)},
       [](const std::vector<Tensor>& x) { return mul(x[0], x[1]); });
  // cast is differentiable; its gradient is cast back (PyTorch's .to(dtype)).
  c.op({{"name", "cast_f32_to_f16"}, {"op", "cast"}, {"to", "f16"}}, {c.normal({4, 5}, DType::f32, 3.0)},
       [](const std::vector<Tensor>& x) { return cast(x[0], DType::f16); });
  c.op({{"name", "cast_f16_to_f32"}, {"op", "cast"}, {"to", "f32"}}, {c.normal({4, 5}, DType::f16)},
       [](const std::vector<Tensor>& x) { return cast(x[0], DType::f32); });
}

void reductions_and_shapes(Cases& c) {
  for (DType t : {DType::f32, DType::f16}) {
    const std::string d = dtype_name(t);
    c.op({{"name", "sum_all_" + d}, {"op", "sum"}}, {c.normal({3, 4, 5}, t)},
         [](const std::vector<Tensor>& x) { return sum(x[0]); });
    c.op({{"name", "sum_dims_" + d}, {"op", "sum"}, {"dims", {0, 2}}, {"keepdim", false}}, {c.normal({3, 4, 5}, t)},
         [](const std::vector<Tensor>& x) { return sum(x[0], {0, 2}); });
    c.op({{"name", "sum_last_keepdim_" + d}, {"op", "sum"}, {"dims", {-1}}, {"keepdim", true}},
         {c.normal({3, 4, 5}, t)}, [](const std::vector<Tensor>& x) { return sum(x[0], {-1}, true); });
    c.op({{"name", "mean_all_" + d}, {"op", "mean"}}, {c.normal({3, 4, 5}, t)},
         [](const std::vector<Tensor>& x) { return mean(x[0]); });
    c.op({{"name", "mean_dims_keepdim_" + d}, {"op", "mean"}, {"dims", {1, -1}}, {"keepdim", true}},
         {c.normal({3, 4, 5}, t)}, [](const std::vector<Tensor>& x) { return mean(x[0], {1, -1}, true); });
  }
  c.op({{"name", "reshape"}, {"op", "reshape"}, {"shape", {4, -1}}}, {c.normal({2, 3, 4})},
       [](const std::vector<Tensor>& x) { return reshape(x[0], {4, -1}); });
  c.op({{"name", "flatten"}, {"op", "flatten"}, {"start_dim", 1}}, {c.normal({2, 3, 4, 5})},
       [](const std::vector<Tensor>& x) { return flatten(x[0], 1); });
}

void linear_algebra(Cases& c) {
  for (DType t : {DType::f32, DType::f16}) {
    const std::string d = dtype_name(t);
    // [M, K] x [K, N] with M = 9, K = 70, N = 13, each operand stored transposed or not.
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        Shape sa = ta ? Shape{70, 9} : Shape{9, 70}, sb = tb ? Shape{13, 70} : Shape{70, 13};
        c.op({{"name", "matmul_" + std::to_string(ta) + std::to_string(tb) + "_" + d},
              {"op", "matmul"},
              {"trans_a", ta == 1},
              {"trans_b", tb == 1}},
             {c.normal(sa, t), c.normal(sb, t)},
             [ta, tb](const std::vector<Tensor>& x) { return matmul(x[0], x[1], ta == 1, tb == 1); });
      }
    }
    c.op({{"name", "linear_bias_" + d}, {"op", "linear"}, {"relu", false}},
         {c.normal({6, 20}, t), c.normal({11, 20}, t, 0.3), c.normal({11}, t)},
         [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); });
    c.op({{"name", "linear_relu_" + d}, {"op", "linear"}, {"relu", true}},
         {c.normal({6, 20}, t), c.normal({11, 20}, t, 0.3), c.normal({11}, t)},
         [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2], true); });
    c.op({{"name", "linear_nobias_" + d}, {"op", "linear"}, {"relu", false}},
         {c.normal({6, 20}, t), c.normal({11, 20}, t, 0.3)},
         [](const std::vector<Tensor>& x) { return linear(x[0], x[1]); });
  }
}

void classification(Cases& c) {
  for (DType t : {DType::f32, DType::f16}) {
    const std::string d = dtype_name(t);
    c.op({{"name", "log_softmax_" + d}, {"op", "log_softmax"}}, {c.normal({7, 10}, t, 3.0)},
         [](const std::vector<Tensor>& x) { return log_softmax(x[0]); });
    c.op({{"name", "cross_entropy_" + d}, {"op", "cross_entropy"}}, {c.normal({9, 10}, t, 3.0), c.labels(9, 10)},
         [](const std::vector<Tensor>& x) { return cross_entropy(x[0], x[1]); });
    c.op({{"name", "cross_entropy_unfused_" + d}, {"op", "cross_entropy"}},
         {c.normal({9, 10}, t, 3.0), c.labels(9, 10)},
         [](const std::vector<Tensor>& x) { return cross_entropy_unfused(x[0], x[1]); });
  }
  // Logits far beyond exp's range: only a max-subtracting softmax survives them.
  c.op({{"name", "cross_entropy_large_logits"}, {"op", "cross_entropy"}}, {c.normal({8, 5}, DType::f32, 40.0),
       c.labels(8, 5)}, [](const std::vector<Tensor>& x) { return cross_entropy(x[0], x[1]); });
  // A masked (-inf) entry that is not the label: probability 0, gradient 0 there.
  {
    std::vector<float> v(4 * 6);
    for (auto& e : v) e = static_cast<float>(c.gen().normal());
    v[1 * 6 + 2] = -INFINITY;
    v[3 * 6 + 0] = -INFINITY;
    Tensor x = c.on(Tensor::from_vector(v, {4, 6}));
    x.requires_grad_();
    Tensor y = c.on(Tensor::from_vector(std::vector<int32_t>{1, 4, 5, 2}, {4}));
    c.op({{"name", "cross_entropy_masked"}, {"op", "cross_entropy"}}, {x, y},
         [](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); });
  }
  Tensor logp = c.on(log_softmax(Tensor::randn({8, 6}, c.gen())).detach());
  logp.requires_grad_();
  c.op({{"name", "nll_loss"}, {"op", "nll_loss"}}, {logp, c.labels(8, 6)},
       [](const std::vector<Tensor>& x) { return nll_loss(x[0], x[1]); });
}

void convolution(Cases& c) {
  struct Conv {
    const char* name;
    int64_t n, ch, h, w, k, r, s;
    Size2 stride, pad;
    bool bias, relu;
    DType t;
  };
  const Conv convs[] = {
      {"conv_3x3_pad1", 2, 3, 7, 6, 4, 3, 3, {1, 1}, {1, 1}, true, false, DType::f32},
      {"conv_5x5_stride2_c1", 2, 1, 9, 9, 5, 5, 5, {2, 2}, {0, 0}, false, false, DType::f32},
      {"conv_1x1", 1, 6, 5, 4, 3, 1, 1, {1, 1}, {0, 0}, true, false, DType::f32},
      {"conv_3x3_stride2_pad2", 3, 2, 8, 7, 5, 3, 3, {2, 2}, {2, 2}, true, false, DType::f32},
      {"conv_relu", 2, 3, 6, 6, 4, 3, 3, {1, 1}, {1, 1}, true, true, DType::f32},
      {"conv_rect_stride_pad", 2, 2, 7, 9, 3, 3, 2, {2, 1}, {1, 0}, true, false, DType::f32},
      {"conv_3x3_f16", 2, 8, 6, 5, 16, 3, 3, {1, 1}, {1, 1}, true, false, DType::f16},
      {"conv_5x5_relu_f16", 2, 3, 9, 8, 7, 5, 5, {1, 1}, {2, 2}, true, true, DType::f16},
  };
  for (const Conv& v : convs) {
    Tensor x = c.normal({v.n, v.ch, v.h, v.w}, v.t), w = c.normal({v.k, v.ch, v.r, v.s}, v.t, 0.3);
    std::vector<Tensor> in = v.bias ? std::vector<Tensor>{x, w, c.normal({v.k}, v.t)} : std::vector<Tensor>{x, w};
    c.op({{"name", v.name},
          {"op", "conv2d"},
          {"stride", {v.stride[0], v.stride[1]}},
          {"padding", {v.pad[0], v.pad[1]}},
          {"relu", v.relu}},
         in,
         [v](const std::vector<Tensor>& a) {
           return conv2d(a[0], a[1], v.bias ? a[2] : Tensor(), v.stride, v.pad, v.relu);
         });
  }
}

void pooling_and_norm(Cases& c) {
  struct Pool {
    const char* name;
    bool max;
    Size2 kernel, stride, pad;
    Shape input;
  };
  const Pool pools[] = {
      {"max_pool_2x2", true, {2, 2}, {2, 2}, {0, 0}, {2, 3, 6, 7}},
      {"max_pool_3x3_s2_p1", true, {3, 3}, {2, 2}, {1, 1}, {2, 3, 7, 8}},  // overlapping, padded windows
      {"max_pool_3x2_s1x2", true, {3, 2}, {1, 2}, {0, 0}, {2, 2, 6, 7}},
      {"avg_pool_2x2", false, {2, 2}, {2, 2}, {0, 0}, {2, 3, 6, 7}},
      {"avg_pool_3x3_s2_p1", false, {3, 3}, {2, 2}, {1, 1}, {2, 3, 7, 8}},  // padding counts in the divisor
  };
  for (DType t : {DType::f32, DType::f16}) {
    const std::string d = dtype_name(t);
    for (const Pool& p : pools) {
      c.op({{"name", p.name + std::string("_") + d},
            {"op", p.max ? "max_pool2d" : "avg_pool2d"},
            {"kernel", {p.kernel[0], p.kernel[1]}},
            {"stride", {p.stride[0], p.stride[1]}},
            {"padding", {p.pad[0], p.pad[1]}}},
           {c.normal(p.input, t)}, [p](const std::vector<Tensor>& x) {
             return p.max ? max_pool2d(x[0], p.kernel, p.stride, p.pad) : avg_pool2d(x[0], p.kernel, p.stride, p.pad);
           });
    }
    c.op({{"name", "global_avg_pool_" + d}, {"op", "global_avg_pool2d"}}, {c.normal({3, 4, 5, 6}, t)},
         [](const std::vector<Tensor>& x) { return global_avg_pool2d(x[0]); });
  }

  // Batch norm, training: the output, the gradients, and the running statistics after the update
  // (PyTorch's: the unbiased batch variance, weighted by the momentum).
  for (auto [name, t, momentum] : {std::tuple{"batch_norm_train", DType::f32, 0.1},
                                   std::tuple{"batch_norm_train_momentum", DType::f32, 0.3},
                                   std::tuple{"batch_norm_train_f16", DType::f16, 0.1}}) {
    Tensor mean0 = c.on(Tensor::randn({4}, c.gen(), DType::f32, Device::cpu, 0.0, 0.2));
    Tensor var0 = c.on(Tensor::uniform({4}, c.gen(), 0.5, 1.5));
    c.op({{"name", name}, {"op", "batch_norm2d"}, {"training", true}, {"momentum", momentum}, {"eps", 1e-5}},
         {c.normal({5, 4, 3, 3}, t, 2.0), c.positive({4}), c.normal({4}), mean0, var0},
         [momentum = momentum](const std::vector<Tensor>& x) {
           Tensor rm = x[3].clone(), rv = x[4].clone();
           Tensor y = batch_norm2d(x[0], x[1], x[2], rm, rv, true, momentum, 1e-5);
           return Result{y, {{"running_mean", rm}, {"running_var", rv}}};
         });
  }
  {
    Tensor mean0 = c.on(Tensor::randn({3}, c.gen(), DType::f32, Device::cpu, 0.0, 0.5));
    Tensor var0 = c.on(Tensor::uniform({3}, c.gen(), 0.5, 2.0));
    c.op({{"name", "batch_norm_eval"}, {"op", "batch_norm2d"}, {"training", false}, {"momentum", 0.1},
          {"eps", 1e-5}}, {c.normal({4, 3, 5, 2}), c.positive({3}), c.normal({3}), mean0, var0},
         [](const std::vector<Tensor>& x) { return batch_norm2d(x[0], x[1], x[2], x[3], x[4], false); });
  }
  // Dropout: no reference can draw halfling's mask, so the script checks the rule instead: each
  // output is 0 or x / (1 - p), the gradient follows the same mask, and about p of them are dropped.
  c.op({{"name", "dropout"}, {"op", "dropout"}, {"p", 0.3}}, {c.normal({64, 50})},
       [seed = c.gen().next_u64()](const std::vector<Tensor>& x) { return dropout(x[0], 0.3, true, seed); });
  // p = 1 needs no mask: x * 0, which PyTorch computes too.
  c.op({{"name", "dropout_all"}, {"op", "dropout"}, {"p", 1.0}}, {c.normal({4, 5})},
       [](const std::vector<Tensor>& x) { return dropout(x[0], 1.0, true, uint64_t{1}); });
}

// ---- the canonical models ------------------------------------------------------------------------

// MLP-512, LeNet and VGG-small (DESIGN.md §4) on a batch of 4 in training mode: the logits, the
// cross-entropy loss, every parameter's gradient and batch norm's running statistics after the pass,
// which the script recomputes with bench/pytorch/train.py's models loaded with the same weights. In f64,
// where the two computations take the same discrete decisions (which input a max-pool window routes its
// gradient to, which side of 0 a ReLU input is), so that everything must agree to rounding; and converted
// to f16 as `mixed` runs them (batch norm stays f32; an f16 input), where rounding flips some of those
// decisions, so the script compares the forward pass only. On the CPU only (the GPU kernels take no f64;
// the files would be too large to bring back).
void models(Cases& c, NamedTensors& file, json& list) {
  struct Model {
    const char* name;
    std::shared_ptr<nn::Sequential> (*make)(Generator&);
    Shape input;
  };
  const Model models[] = {{"mlp512", nn::mlp512, {4, 1, 28, 28}},
                          {"lenet", nn::lenet, {4, 1, 28, 28}},
                          {"vgg_small", nn::vgg_small, {4, 3, 32, 32}}};
  for (const Model& m : models) {
    for (DType t : {DType::f64, DType::f16}) {
      const std::string name = std::string("model_") + m.name + "_" + dtype_name(t);
      record_case(file, list, {{"name", name}, {"op", "model"}, {"model", m.name}}, [&](json& spec) {
        NamedTensors out;
        Generator g(c.gen().next_u64());
        auto model = m.make(g);
        model->to(t);
        const std::vector<Tensor> params = model->parameters();
        const auto buffers = model->named_buffers();
        const auto key = [&](const char* what, size_t i) { return name + "/" + what + "/" + std::to_string(i); };
        for (size_t i = 0; i < params.size(); ++i) out.push_back({key("param", i), params[i].clone()});
        for (size_t i = 0; i < buffers.size(); ++i) out.push_back({key("buffer", i), buffers[i].second.clone()});
        const Tensor x = c.on(Tensor::randn(m.input, c.gen(), t)), y = c.labels(m.input[0], 10);
        const Tensor logits = (*model)(x);
        const Tensor loss = cross_entropy(logits, y);
        loss.backward();
        out.push_back({name + "/x", x});
        out.push_back({name + "/y", y});
        out.push_back({name + "/logits", logits.detach()});
        out.push_back({name + "/loss", loss.detach()});
        for (size_t i = 0; i < params.size(); ++i) out.push_back({key("grad", i), params[i].grad()});
        for (size_t i = 0; i < buffers.size(); ++i) out.push_back({key("buffer_after", i), buffers[i].second});
        spec["params"] = params.size();
        spec["buffers"] = buffers.size();
        return out;
      });
    }
  }
}

// ---- the modules' initial values -----------------------------------------------------------------

void initializers(Cases& c, NamedTensors& file, json& list) {
  nn::Linear lin(300, 200, c.gen());
  nn::Conv2d conv(16, 24, 3, c.gen());
  nn::BatchNorm2d bn(7);
  file.push_back({"init_linear/weight", lin.weight.detach()});
  file.push_back({"init_linear/bias", lin.bias.detach()});
  file.push_back({"init_conv/weight", conv.weight.detach()});
  file.push_back({"init_conv/bias", conv.bias.detach()});
  for (auto& [n, p] : bn.named_parameters()) file.push_back({"init_bn/" + n, p.detach()});
  file.push_back({"init_bn/running_mean", bn.running_mean});
  file.push_back({"init_bn/running_var", bn.running_var});
  list.push_back({{"name", "init_linear"}, {"op", "init"}, {"fan_in", 300}});
  list.push_back({{"name", "init_conv"}, {"op", "init"}, {"fan_in", 16 * 3 * 3}});
  list.push_back({{"name", "init_bn"}, {"op", "init_bn"}});
}

// ---- the optimizers --------------------------------------------------------------------------------

// `steps` updates of the parameters from random gradients. has_grad(step, i) false leaves parameter
// i without a gradient at that step (PyTorch's p.grad = None). clip >= 0: clip_grad_norm(clip) before
// each update, its norm recorded.
void optimizer_case(Cases& c, NamedTensors& file, json& list, json spec, DType t,
                    const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make, int steps,
                    const std::function<bool(int, size_t)>& has_grad, double clip = -1.0) {
  const std::string name = spec.at("name");
  spec["op"] = "optimizer";
  spec["steps"] = steps;
  spec["clip"] = clip;
  record_case(file, list, spec, [&](json& recorded) {
    NamedTensors out;
    std::vector<Tensor> params = {c.normal({5, 4}, t), c.normal({4}, t), c.normal({3, 2, 2}, t)};
    recorded["params"] = params.size();
    for (size_t i = 0; i < params.size(); ++i) out.push_back({name + "/p0/" + std::to_string(i), params[i].clone()});
    auto opt = make(params);
    for (int step = 0; step < steps; ++step) {
      opt->zero_grad();
      Tensor loss;
      for (size_t i = 0; i < params.size(); ++i) {
        if (!has_grad(step, i)) continue;
        // d(sum(p * g))/dp = g exactly.
        Tensor g = c.on(Tensor::randn(params[i].shape(), c.gen(), t));
        out.push_back({name + "/g/" + std::to_string(step) + "/" + std::to_string(i), g});
        Tensor term = sum(mul(params[i], g));
        loss = loss.defined() ? add(loss, term) : term;
      }
      loss.backward();
      if (clip >= 0) out.push_back({name + "/norm/" + std::to_string(step), opt->clip_grad_norm(clip)});
      opt->step();
    }
    for (size_t i = 0; i < params.size(); ++i) {
      out.push_back({name + "/p/" + std::to_string(i), params[i].detach()});
      if (opt->has_master_weights()) out.push_back({name + "/master/" + std::to_string(i), opt->master_weights()[i]});
    }
    return out;
  });
}

void optimizers(Cases& c, NamedTensors& file, json& list) {
  auto always = [](int, size_t) { return true; };
  // Parameter 1 has no gradient at steps 0 and 3, parameter 2 none at step 2.
  auto gaps = [](int step, size_t i) { return !((i == 1 && (step == 0 || step == 3)) || (i == 2 && step == 2)); };
  struct Sgd {
    const char* name;
    optim::SGD::Options o;
    bool gaps;
  };
  const Sgd sgds[] = {
      {"sgd_plain", {.lr = 0.1}, false},
      {"sgd_momentum", {.lr = 0.05, .momentum = 0.9}, false},
      {"sgd_dampening_decay", {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.01, .dampening = 0.1}, false},
      {"sgd_nesterov", {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}, false},
      {"sgd_momentum_gaps", {.lr = 0.05, .momentum = 0.9}, true},
  };
  for (const Sgd& s : sgds) {
    json spec = {{"name", s.name}, {"optimizer", "SGD"}, {"lr", s.o.lr}, {"momentum", s.o.momentum},
                 {"weight_decay", s.o.weight_decay}, {"dampening", s.o.dampening}, {"nesterov", s.o.nesterov}};
    optimizer_case(c, file, list, spec, DType::f32,
                   [o = s.o](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(std::move(p), o); }, 5,
                   s.gaps ? std::function<bool(int, size_t)>(gaps) : always);
  }
  struct AdamCase {
    const char* name;
    optim::Adam::Options o;
    bool gaps;
    DType t;
  };
  const AdamCase adams[] = {
      {"adam", {.lr = 0.01}, false, DType::f32},
      {"adam_betas_eps", {.lr = 0.02, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-3}, false, DType::f32},
      // 1 - beta2 = 1e-5: computed in f32 from f32(beta2), it would be 1.0014e-5, and every early step
      // 0.07% too small (PyTorch computes 1 - beta2 in double).
      {"adam_beta2_near_1", {.lr = 0.05, .beta1 = 0.5, .beta2 = 0.99999}, false, DType::f32},
      {"adam_l2", {.lr = 0.01, .weight_decay = 0.05}, false, DType::f32},
      {"adamw", {.lr = 0.01, .weight_decay = 0.05, .decoupled = true}, false, DType::f32},
      {"adam_gaps", {.lr = 0.01}, true, DType::f32},
      // Mixed precision: f16 parameters, f32 masters (paper §3.1); the f16 copy is the rounded master.
      {"adam_masters_f16", {.lr = 0.01, .master_weights = true}, false, DType::f16},
  };
  for (const AdamCase& a : adams) {
    json spec = {{"name", a.name},       {"optimizer", a.o.decoupled ? "AdamW" : "Adam"},
                 {"lr", a.o.lr},         {"betas", {a.o.beta1, a.o.beta2}},
                 {"eps", a.o.eps},       {"weight_decay", a.o.weight_decay},
                 {"dtype", dtype_name(a.t)}};
    optimizer_case(c, file, list, spec, a.t,
                   [o = a.o](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), o); }, 5,
                   a.gaps ? std::function<bool(int, size_t)>(gaps) : always);
  }
  // Gradient clipping by the global norm (torch.nn.utils.clip_grad_norm_), then plain SGD: the step
  // shows the clipped gradients. A max_norm above the norm leaves them alone; 0 zeroes them.
  for (auto [name, max_norm] : {std::pair{"clip_then_sgd", 0.5}, std::pair{"clip_above_norm", 1e3},
                                std::pair{"clip_to_zero", 0.0}}) {
    json spec = {{"name", name}, {"optimizer", "SGD"}, {"lr", 0.1}, {"momentum", 0.0}, {"weight_decay", 0.0},
                 {"dampening", 0.0}, {"nesterov", false}};
    const auto sgd = [](std::vector<Tensor> p) {
      return std::make_unique<optim::SGD>(std::move(p), optim::SGD::Options{.lr = 0.1});
    };
    optimizer_case(c, file, list, spec, DType::f32, sgd, 3, always, max_norm);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool usage = argc < 3 || argc > 4 || (argc == 4 && std::string(argv[3]) != "cuda");
  if (usage) {
    std::fprintf(stderr, "usage: parity_cases <seed> <out.safetensors> [cuda]\n");
    return 2;
  }
  try {
    const Device dev = argc == 4 ? Device::cuda : Device::cpu;
    Cases c(std::stoull(argv[1]), dev);
    elementwise(c);
    reductions_and_shapes(c);
    linear_algebra(c);
    classification(c);
    convolution(c);
    pooling_and_norm(c);
    NamedTensors file;
    json list = json::array();
    c.run_ops(file, list);
    if (dev == Device::cpu) initializers(c, file, list);
    optimizers(c, file, list);
    if (dev == Device::cpu) models(c, file, list);
    const std::string device_name = dev == Device::cuda ? runtime::cuda_device_description() : "cpu";
    save_safetensors(argv[2], file, {{"cases", list.dump()}, {"device", argc == 4 ? "cuda" : "cpu"},
                                     {"seed", argv[1]}, {"device_name", device_name}});
    std::printf("%zu cases on %s, %zu tensors written to %s\n", list.size(), argc == 4 ? "cuda" : "cpu",
                file.size(), argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity_cases: %s\n", e.what());
    return 1;
  }
  return 0;
}
