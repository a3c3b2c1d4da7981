#include "framework/ops_cnn.h"

#include <string>

#include "framework/autograd.h"
#include "framework/ops.h"
#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/pool.h"
#include "kernels/runtime.h"

namespace hl {

namespace k = hl::kernels;

namespace {

void require_float(const Tensor& t, const char* op, const char* what) {
  HL_CHECK(t.defined(), op, ": ", what, " is undefined");
  HL_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating, got ", t.describe());
}

void require_4d(const Tensor& x, const char* op) {
  require_float(x, op, "the input");
  HL_CHECK(x.dim() == 4, op, ": needs an NCHW input [N, C, H, W], got ", x.describe());
}

void require_device(const Tensor& a, const Tensor& b, const char* op) {
  HL_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.describe(), " and ", b.describe(),
           " (move one with .to(device))");
}

// The gradient arriving at an output, in the output's dtype (the kernels read one dtype).
Tensor as_dtype(const Tensor& g, DType t) { return g.dtype() == t ? g : cast(g, t); }

std::string size2(Size2 s) { return std::to_string(s[0]) + "x" + std::to_string(s[1]); }

// ---- conv ----

k::ConvArgs conv_args(const Tensor& x, const Tensor& w, Size2 stride, Size2 padding) {
  k::ConvArgs a;
  a.device = x.device();
  a.N = x.size(0), a.C = x.size(1), a.H = x.size(2), a.W = x.size(3);
  a.K = w.size(0), a.R = w.size(2), a.S = w.size(3);
  a.stride_h = stride[0], a.stride_w = stride[1];
  a.pad_h = padding[0], a.pad_w = padding[1];
  a.in_type = x.dtype();
  a.out_type = x.dtype();
  return a;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Size2 stride, Size2 padding, bool fused_relu) {
  const char* op = "conv2d";
  require_4d(x, op);
  require_float(w, op, "the weight");
  require_device(x, w, op);
  HL_CHECK(w.dim() == 4, op, ": the weight must be [K, C, R, S], got ", w.describe());
  HL_CHECK(x.dtype() == w.dtype(), op, ": input and weight must share a dtype, got ", x.describe(), " and ",
           w.describe(), " (under mixed precision both are f16)");
  HL_CHECK(x.size(1) == w.size(1), op, ": input ", x.describe(), " has ", x.size(1), " channels, the weight ",
           w.describe(), " expects ", w.size(1));
  HL_CHECK(stride[0] >= 1 && stride[1] >= 1, op, ": stride must be >= 1, got ", size2(stride));
  HL_CHECK(padding[0] >= 0 && padding[1] >= 0, op, ": padding must be >= 0, got ", size2(padding));
  HL_CHECK(w.size(2) <= x.size(2) + 2 * padding[0] && w.size(3) <= x.size(3) + 2 * padding[1], op, ": the ",
           w.size(2), "x", w.size(3), " kernel of ", w.describe(), " is larger than the input ", x.describe(),
           " padded by ", size2(padding));
  if (b.defined()) {
    require_float(b, op, "the bias");
    require_device(x, b, op);
    HL_CHECK(b.dim() == 1 && b.size(0) == w.size(0), op, ": bias ", b.describe(), " does not match weight ",
             w.describe(), " (needs [", w.size(0), "])");
  }
  HL_CHECK(x.numel() > 0, op, ": empty input ", x.describe());

  k::ConvArgs a = conv_args(x, w, stride, padding);
  Tensor y = Tensor::empty({a.N, a.K, a.P(), a.Q()}, x.dtype(), x.device());
  a.x = x.data_ptr();
  a.w = w.data_ptr();
  a.y = y.data_ptr();
  if (b.defined()) {
    a.bias = b.data_ptr();
    a.bias_type = b.dtype();
  }
  a.relu = fused_relu;
  k::conv2d(a);

  std::vector<Tensor> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  const Tensor yd = y.detach();
  // dx reads the weight, dw the input, the fused ReLU's backward the output; db only the gradient.
  // Which are needed is fixed now, as the graph's edges are (an input unfrozen before backward()
  // gets none).
  const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
  const Saved saved{{"input", need_w ? x : Tensor()}, {"weight", need_x ? w : Tensor()},
                    {"output", fused_relu ? yd : Tensor()}};
  return record(y, fused_relu ? "conv2d_relu" : "conv2d", inputs, saved,
                [x, w, b, stride, padding, fused_relu, need_x, need_w, need_b, y = yd](const Tensor& g_in) {
                  Tensor g = as_dtype(g_in, y.dtype());
                  if (fused_relu) {  // y = relu(z) > 0 exactly where z > 0
                    Tensor gz = Tensor::empty(y.shape(), y.dtype(), y.device());
                    k::relu_backward(y.device(), y.numel(), y.data_ptr(), g.data_ptr(), gz.data_ptr(), y.dtype());
                    g = gz;
                  }
                  std::vector<Tensor> grads(b.defined() ? 3 : 2);
                  k::ConvArgs a2 = conv_args(x, w, stride, padding);
                  a2.dy = g.data_ptr();
                  if (need_x) {  // dx = the "transposed convolution" of dy with w
                    Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
                    k::ConvArgs d = a2;
                    d.pass = k::ConvPass::backward_data;
                    d.w = w.data_ptr();
                    d.dx = gx.data_ptr();
                    k::conv2d(d);
                    grads[0] = gx;
                  }
                  if (need_w) {  // dw = correlation of x with dy
                    Tensor gw = Tensor::empty(w.shape(), w.dtype(), w.device());
                    k::ConvArgs d = a2;
                    d.pass = k::ConvPass::backward_weight;
                    d.x = x.data_ptr();
                    d.dw = gw.data_ptr();
                    k::conv2d(d);
                    grads[1] = gw;
                  }
                  if (need_b) {
                    Tensor gb = sum(g.detach(), {0, 2, 3});  // f32 sum for f16 (DESIGN.md §3)
                    grads[2] = gb.dtype() == b.dtype() ? gb : cast(gb, b.dtype());
                  }
                  return grads;
                });
}

// ---- pooling ----

namespace {

k::Pool2dShape pool_shape(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding, const char* op) {
  require_4d(x, op);
  // A window under 1x1 is refused by k::check_pool2d_shape below, in the same words and under the op's name.
  HL_CHECK(padding[0] >= 0 && padding[1] >= 0, op, ": padding must be >= 0, got ", size2(padding));
  k::Pool2dShape s;
  s.N = x.size(0), s.C = x.size(1), s.H = x.size(2), s.W = x.size(3);
  s.kh = kernel[0], s.kw = kernel[1];
  s.stride_h = stride[0] == 0 ? kernel[0] : stride[0];
  s.stride_w = stride[1] == 0 ? kernel[1] : stride[1];
  s.pad_h = padding[0], s.pad_w = padding[1];
  HL_CHECK(s.kh <= s.H + 2 * s.pad_h && s.kw <= s.W + 2 * s.pad_w, op, ": the ", size2(kernel),
           " window is larger than the input ", x.describe(), " padded by ", size2(padding));
  k::check_pool2d_shape(s, op);
  return s;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding) {
  const k::Pool2dShape s = pool_shape(x, kernel, stride, padding, "max_pool2d");
  Tensor y = Tensor::empty({s.N, s.C, s.P(), s.Q()}, x.dtype(), x.device());
  Tensor idx = Tensor::empty(y.shape(), DType::i32, x.device());
  k::max_pool2d_forward(x.device(), s, x.data_ptr(), y.data_ptr(), idx.data<int32_t>(), x.dtype());
  return record(y, "max_pool2d", {x}, {}, [s, idx, xt = x.dtype(), xs = x.shape()](const Tensor& g_in) {
    const Tensor g = as_dtype(g_in, xt);
    Tensor gx = Tensor::empty(xs, xt, g.device());
    k::max_pool2d_backward(g.device(), s, g.data_ptr(), idx.data<int32_t>(), gx.data_ptr(), xt);
    return std::vector<Tensor>{gx};
  });
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding) {
  const k::Pool2dShape s = pool_shape(x, kernel, stride, padding, "avg_pool2d");
  Tensor y = Tensor::empty({s.N, s.C, s.P(), s.Q()}, x.dtype(), x.device());
  k::avg_pool2d_forward(x.device(), s, x.data_ptr(), y.data_ptr(), x.dtype());
  return record(y, "avg_pool2d", {x}, {}, [s, xt = x.dtype(), xs = x.shape()](const Tensor& g_in) {
    const Tensor g = as_dtype(g_in, xt);
    Tensor gx = Tensor::empty(xs, xt, g.device());
    k::avg_pool2d_backward(g.device(), s, g.data_ptr(), gx.data_ptr(), xt);
    return std::vector<Tensor>{gx};
  });
}

Tensor global_avg_pool2d(const Tensor& x) {
  require_4d(x, "global_avg_pool2d");
  HL_CHECK(x.numel() > 0, "global_avg_pool2d: empty input ", x.describe());
  // An average pool whose window is the whole plane; the reshape is a free view.
  return reshape(avg_pool2d(x, {x.size(2), x.size(3)}), {x.size(0), x.size(1)});
}

// ---- batch norm ----

Tensor batch_norm2d(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps) {
  const char* op = "batch_norm2d";
  require_4d(x, op);
  HL_CHECK(x.numel() > 0, op, ": empty input ", x.describe());
  const int64_t C = x.size(1);
  const DType tp = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const auto check_param = [&](const Tensor& p, const char* what, bool optional) {
    if (optional && !p.defined()) return;
    require_float(p, op, what);
    require_device(x, p, op);
    HL_CHECK(p.dim() == 1 && p.size(0) == C, op, ": ", what, " ", p.describe(), " does not match the ", C,
             " channels of ", x.describe());
    HL_CHECK(p.dtype() == tp, op, ": ", what, " must be ", dtype_name(tp), " for ", dtype_name(x.dtype()),
             " input (batch-norm parameters and statistics stay f32, DESIGN.md §3), got ", p.describe());
  };
  check_param(gamma, "gamma", false);
  check_param(beta, "beta", false);
  check_param(running_mean, "running_mean", true);
  check_param(running_var, "running_var", true);
  HL_CHECK(running_mean.defined() == running_var.defined(), op,
           ": running_mean and running_var must both be given or both be undefined");
  HL_CHECK(eps > 0, op, ": eps must be > 0, got ", eps);
  HL_CHECK(momentum >= 0 && momentum <= 1, op, ": momentum must be in [0, 1], got ", momentum);

  const k::BatchNormShape s{x.size(0), C, x.size(2) * x.size(3)};
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (!training) {
    HL_CHECK(running_mean.defined(), op, ": evaluation mode needs running statistics");
    k::batch_norm_forward_eval(x.device(), s, x.data_ptr(), y.data_ptr(), x.dtype(), gamma.data_ptr(),
                               beta.data_ptr(), running_mean.data_ptr(), running_var.data_ptr(), tp, eps);
    // y = x * a + c with a = gamma / sqrt(rv + eps) per channel: the backward is elementwise.
    // Evaluation usually runs without gradients: then skip the closure and its copies of the stats.
    if (!needs_grad({x, gamma, beta})) return y;
    // dx reads gamma, dgamma the input (which are needed is fixed now, as in conv2d); the running
    // statistics are copied (a later train-mode step updates them in place).
    const bool need_x = x.requires_grad(), need_gamma = gamma.requires_grad(), need_beta = beta.requires_grad();
    const Saved saved{{"input", need_gamma ? x : Tensor()}, {"gamma", need_x ? gamma : Tensor()}};
    return record(y, "batch_norm2d_eval", {x, gamma, beta}, saved,
                  [x, gamma, beta, rm = running_mean.detach().clone(), rv = running_var.detach().clone(), eps,
                   need_x, need_gamma, need_beta](const Tensor& g_in) {
                    NoGradGuard no_grad;
                    const Shape cshape{1, x.size(1), 1, 1};
                    const Tensor inv = reshape(rdiv(1.0, pow(add(rv, eps), 0.5)), cshape);
                    const Tensor g = g_in;
                    std::vector<Tensor> grads(3);
                    if (need_x) {
                      const Tensor gx = mul(g, mul(reshape(gamma.detach(), cshape), inv));
                      grads[0] = gx.dtype() == x.dtype() ? gx : cast(gx, x.dtype());
                    }
                    if (need_gamma) {
                      const Tensor xhat = mul(sub(x.detach(), reshape(rm, cshape)), inv);
                      grads[1] = as_dtype(sum(mul(g, xhat), {0, 2, 3}), gamma.dtype());
                    }
                    if (need_beta) grads[2] = as_dtype(sum(g, {0, 2, 3}), beta.dtype());
                    return grads;
                  });
  }
  HL_CHECK(s.count() >= 2, op, ": training needs more than one value per channel, got ", x.describe(),
           " (use eval mode, or a larger batch)");
  Tensor save_mean = Tensor::empty({C}, tp, x.device());
  Tensor save_invstd = Tensor::empty({C}, tp, x.device());
  k::batch_norm_forward_train(x.device(), s, x.data_ptr(), y.data_ptr(), x.dtype(), gamma.data_ptr(),
                              beta.data_ptr(), running_mean.defined() ? running_mean.data_ptr() : nullptr,
                              running_var.defined() ? running_var.data_ptr() : nullptr, save_mean.data_ptr(),
                              save_invstd.data_ptr(), tp, momentum, eps);
  // Which gradients the backward returns is fixed now, as in conv2d and eval mode: an input unfrozen
  // between the forward pass and backward() gets none (PyTorch's graph has no edge to it either).
  const bool need_x = x.requires_grad(), need_gamma = gamma.requires_grad(), need_beta = beta.requires_grad();
  return record(y, "batch_norm2d", {x, gamma, beta}, {{"input", x}, {"gamma", gamma}},
                [x, gamma, beta, s, tp, save_mean, save_invstd, need_x, need_gamma, need_beta](const Tensor& g_in) {
                  const Tensor g = as_dtype(g_in, x.dtype());
                  Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
                  Tensor gg = Tensor::empty({s.C}, tp, x.device());
                  Tensor gb = Tensor::empty({s.C}, tp, x.device());
                  k::batch_norm_backward(x.device(), s, x.data_ptr(), g.data_ptr(), gx.data_ptr(), x.dtype(),
                                         gamma.data_ptr(), save_mean.data_ptr(), save_invstd.data_ptr(),
                                         gg.data_ptr(), gb.data_ptr(), tp);
                  return std::vector<Tensor>{need_x ? gx : Tensor(), need_gamma ? gg : Tensor(),
                                             need_beta ? gb : Tensor()};
                });
}

// ---- dropout ----

Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed) {
  require_float(x, "dropout", "the input");
  HL_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p, " for ", x.describe());
  if (!training || p == 0.0) return x;
  // Everything dropped: x * 0, as PyTorch (zeros, with NaN where x is NaN or infinite; a zero gradient).
  // The kernels' threshold and 1/(1-p) scale are for p < 1 (kernels/dropout.h).
  if (p == 1.0) return mul(x, 0.0);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  k::dropout_forward(x.device(), x.numel(), x.data_ptr(), y.data_ptr(), x.dtype(), p, seed, 0);
  return record(y, "dropout", {x}, {}, [p, seed, xt = x.dtype()](const Tensor& g_in) {
    const Tensor g = as_dtype(g_in, xt);
    Tensor gx = Tensor::empty(g.shape(), xt, g.device());
    k::dropout_backward(g.device(), g.numel(), g.data_ptr(), gx.data_ptr(), xt, p, seed, 0);  // the same mask
    return std::vector<Tensor>{gx};
  });
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  if (!training || p == 0.0 || p == 1.0) return dropout(x, p, training, uint64_t{0});  // no mask to draw
  // The seed is drawn on the host, once per call: a CUDA graph would replay one mask forever.
  HL_CHECK(!runtime::cuda_capturing(), "dropout: a training-mode dropout draws its mask's seed on the host at each "
           "step, so a recorded CUDA graph would replay the same mask at every step; train this model without "
           "CUDA graphs (for ", x.describe(), ")");
  return dropout(x, p, training, gen.next_u64());
}

}  // namespace hl
