#include "framework/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "framework/autograd.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

namespace hl {

namespace k = hl::kernels;

// ---- argument checks (each names the op and everything involved) -------------------------------------

namespace {

void require(const Tensor& t, const char* op) {
  HL_CHECK(t.defined(), op, ": an input tensor is undefined");
}

void require_floating(const Tensor& t, const char* op) {
  require(t, op);
  HL_CHECK(is_floating(t.dtype()), op, ": needs a floating tensor, got ", t.describe());
}

void require_same_device(const Tensor& a, const Tensor& b, const char* op) {
  HL_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.describe(), " and ", b.describe(),
           " (move one with .to(device))");
}

}  // namespace

DType promote(DType a, DType b) {
  HL_CHECK(is_floating(a) && is_floating(b), "promote: arithmetic needs floating dtypes, got ", dtype_name(a),
           " and ", dtype_name(b));
  auto rank = [](DType t) { return t == DType::f16 ? 0 : t == DType::f32 ? 1 : 2; };
  return rank(a) >= rank(b) ? a : b;
}

// ---- broadcasting helpers --------------------------------------------------------------------------------

namespace {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    HL_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  HL_CHECK(static_cast<int>(n) <= k::kMaxDims, op, ": at most ", k::kMaxDims, " dimensions, got ", n);
  return out;
}

// Element strides of a contiguous tensor of shape `s` viewed as `out` (0 where broadcast).
void broadcast_strides(const Shape& s, const Shape& out, int64_t* strides) {
  const size_t off = out.size() - s.size();
  int64_t stride = 1;
  for (size_t i = out.size(); i-- > 0;) {
    if (i < off || s[i - off] == 1) {
      strides[i] = 0;
    } else {
      strides[i] = stride;
      stride *= s[i - off];
    }
  }
}

Tensor binary_raw(k::BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  require_floating(a, name);
  require_floating(b, name);
  require_same_device(a, b, name);
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(out_shape, promote(a.dtype(), b.dtype()), a.device());
  k::BroadcastIndex ix;
  ix.ndim = static_cast<int>(out_shape.size());
  std::copy(out_shape.begin(), out_shape.end(), ix.shape);
  broadcast_strides(a.shape(), out_shape, ix.stride_a);
  broadcast_strides(b.shape(), out_shape, ix.stride_b);
  k::binary(a.device(), op, ix, a.data_ptr(), a.dtype(), b.data_ptr(), b.dtype(), out.data_ptr(), out.dtype());
  return out;
}

// Broadcast g up to `shape` (the backward of a reduction): out = g + 0 with g read through
// broadcast strides and the zero through stride 0 everywhere.
Tensor expand(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  broadcast_shapes(g.shape(), shape, "expand");  // validates
  Tensor zero = Tensor::zeros({}, g.dtype(), g.device());
  Tensor out = Tensor::empty(shape, g.dtype(), g.device());
  k::BroadcastIndex ix;
  ix.ndim = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), ix.shape);
  broadcast_strides(g.shape(), shape, ix.stride_a);
  k::binary(g.device(), k::BinaryOp::add, ix, g.data_ptr(), g.dtype(), zero.data_ptr(), zero.dtype(),
            out.data_ptr(), out.dtype());
  return out;
}

// The gradient of an input: summed over broadcast dims and cast back to the input's dtype.
Tensor grad_for(const Tensor& g, const Tensor& input) {
  Tensor r = sum_to(g, input.shape());
  return r.dtype() == input.dtype() ? r : cast(r, input.dtype());
}

Tensor unary_raw(k::UnaryOp op, const Tensor& a, const char* name) {
  require_floating(a, name);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  k::unary(a.device(), op, a.numel(), a.data_ptr(), a.dtype(), out.data_ptr(), out.dtype());
  return out;
}

Tensor scalar_raw(k::ScalarOp op, const Tensor& a, double s, const char* name) {
  require_floating(a, name);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  k::scalar(a.device(), op, a.numel(), a.data_ptr(), s, out.data_ptr(), out.dtype());
  return out;
}

}  // namespace

// ---- elementwise ---------------------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(k::BinaryOp::add, a, b, "add");
  return record(out, "add", {a, b}, {}, [a, b](const Tensor& g) {
    return std::vector<Tensor>{grad_for(g, a), grad_for(g, b)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(k::BinaryOp::sub, a, b, "sub");
  return record(out, "sub", {a, b}, {}, [a, b](const Tensor& g) {
    return std::vector<Tensor>{grad_for(g, a), grad_for(neg(g), b)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(k::BinaryOp::mul, a, b, "mul");
  // Which gradients are needed is fixed now, as the graph's edges are (an input unfrozen before
  // backward() gets none), and so is what is saved: each operand's gradient reads the other operand.
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  const Saved saved{{"operand a", gb ? a : Tensor()}, {"operand b", ga ? b : Tensor()}};
  return record(out, "mul", {a, b}, saved, [a, b, ga, gb](const Tensor& g) {
    return std::vector<Tensor>{ga ? grad_for(mul(g, b), a) : Tensor(), gb ? grad_for(mul(g, a), b) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(k::BinaryOp::div, a, b, "div");
  // Closures that need the output capture a detached view of it (same storage, no grad_fn): capturing
  // `out` itself would make a cycle out -> node -> closure -> out that leaks every graph never
  // backpropagated (BadInput.GraphsDroppedWithoutBackwardAreFreed).
  const Tensor y = out.detach();
  const bool ga = a.requires_grad(), gb = b.requires_grad();  // fixed now, as in mul
  // d(a/b)/da = 1/b reads b; d(a/b)/db = -(a/b)/b reads b and the output.
  const Saved saved{{"operand b", b}, {"output", gb ? y : Tensor()}};
  return record(out, "div", {a, b}, saved, [a, b, ga, gb, out = y](const Tensor& g) {
    return std::vector<Tensor>{ga ? grad_for(div(g, b), a) : Tensor(),
                               gb ? grad_for(neg(div(mul(g, out), b)), b) : Tensor()};
  });
}

Tensor add(const Tensor& a, double s) {
  Tensor out = scalar_raw(k::ScalarOp::add, a, s, "add");
  return record(out, "add_scalar", {a}, {}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = scalar_raw(k::ScalarOp::mul, a, s, "mul");
  return record(out, "mul_scalar", {a}, {}, [s](const Tensor& g) { return std::vector<Tensor>{mul(g, s)}; });
}

Tensor rsub(double s, const Tensor& a) {
  Tensor out = scalar_raw(k::ScalarOp::rsub, a, s, "rsub");
  return record(out, "rsub", {a}, {}, [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
}

Tensor rdiv(double s, const Tensor& a) {
  Tensor out = scalar_raw(k::ScalarOp::rdiv, a, s, "rdiv");
  const Tensor y = out.detach();
  return record(out, "rdiv", {a}, {{"input", a}, {"output", y}}, [a, out = y](const Tensor& g) {
    return std::vector<Tensor>{neg(div(mul(g, out), a))};  // d(s/a)/da = -(s/a)/a
  });
}

Tensor pow(const Tensor& a, double e) {
  Tensor out = scalar_raw(k::ScalarOp::pow, a, e, "pow");
  return record(out, "pow", {a}, {{"input", e == 0.0 ? Tensor() : a}}, [a, e](const Tensor& g) {
    // x^0 is 1 everywhere, so its gradient is 0 everywhere: not 0 * x^-1, which is NaN at x = 0 (a NaN
    // that a dynamic loss scaler would take for an overflow, step after step). PyTorch's rule too.
    if (e == 0.0) return std::vector<Tensor>{Tensor::zeros(a.shape(), a.dtype(), a.device())};
    return std::vector<Tensor>{mul(mul(g, pow(a, e - 1.0)), e)};
  });
}

Tensor neg(const Tensor& a) {
  Tensor out = unary_raw(k::UnaryOp::neg, a, "neg");
  return record(out, "neg", {a}, {}, [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
}

Tensor relu(const Tensor& a) {
  Tensor out = unary_raw(k::UnaryOp::relu, a, "relu");
  return record(out, "relu", {a}, {{"input", a}}, [a](const Tensor& g) {
    Tensor gin = Tensor::empty(a.shape(), a.dtype(), a.device());
    const Tensor gc = g.dtype() == a.dtype() ? g : cast(g, a.dtype());
    k::relu_backward(a.device(), a.numel(), a.data_ptr(), gc.data_ptr(), gin.data_ptr(), a.dtype());
    return std::vector<Tensor>{gin};
  });
}

Tensor exp(const Tensor& a) {
  Tensor out = unary_raw(k::UnaryOp::exp, a, "exp");
  const Tensor y = out.detach();
  return record(out, "exp", {a}, {{"output", y}}, [y](const Tensor& g) { return std::vector<Tensor>{mul(g, y)}; });
}

Tensor log(const Tensor& a) {
  Tensor out = unary_raw(k::UnaryOp::log, a, "log");
  return record(out, "log", {a}, {{"input", a}}, [a](const Tensor& g) { return std::vector<Tensor>{div(g, a)}; });
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
// f32 and f64 tensors are divided by s in their dtype (rounded once, as div() and PyTorch do; a * (1/s)
// differs from it in the last bit for about a third of quotients), in one multiply when s is a power of
// two whose reciprocal the dtype holds as well: a * (1/s) is then a / s exactly. Not at the ends of the
// exponent range: in f64, 1 / 2^-1030 overflows where a / 2^-1030 need not, and in f32, 2^140 is inf where
// 2^-140 is a subnormal. f16 tensors are multiplied by 1/s in FP32 and rounded once to f16 (dividing by an
// f16 scalar would round s first: 0.1 is 0.0999756 in f16, and PyTorch's 413 / 0.1 gives 4132, where the
// quotient 4130 rounds to 4128; docs/precision.md).
Tensor operator/(const Tensor& a, double s) {
  require_floating(a, "div");  // named as the user wrote it, whichever op computes it
  if (a.dtype() == DType::f16) return mul(a, 1.0 / s);
  // s = ±2^e and 1/s = ±2^-e are both exact in the dtype when |e| <= 127 (f32: 2^-127 is a subnormal, 2^128
  // inf) or |e| <= 1023 (f64), checked on the exponent: a double outside float's range is not cast.
  int exponent = 0;  // s = ±0.5 * 2^exponent
  const bool power_of_two = std::isfinite(s) && s != 0.0 && std::fabs(std::frexp(s, &exponent)) == 0.5;
  const int e = exponent - 1, limit = a.dtype() == DType::f32 ? 127 : 1023;
  if (power_of_two && std::abs(e) <= limit) return mul(a, 1.0 / s);
  return div(a, Tensor::scalar(s, a.dtype(), a.device()));
}
Tensor operator-(const Tensor& a) { return neg(a); }

// ---- dtype ---------------------------------------------------------------------------------------------------

Tensor cast(const Tensor& a, DType t) {
  require(a, "cast");
  if (a.dtype() == t) return a;
  Tensor out = Tensor::empty(a.shape(), t, a.device());
  k::cast(a.device(), a.numel(), a.data_ptr(), a.dtype(), out.data_ptr(), t);
  if (!is_floating(t) || !is_floating(a.dtype())) return out;  // integer casts are not differentiable
  const DType src = a.dtype();
  return record(out, "cast", {a}, {}, [src](const Tensor& g) { return std::vector<Tensor>{cast(g, src)}; });
}

// ---- reductions ----------------------------------------------------------------------------------------------

namespace {

// f16 sums are computed and returned in f32 (precision policy); f32 and f64 keep their dtype.
DType reduction_dtype(DType t) { return t == DType::f16 ? DType::f32 : t; }

Tensor reduce_impl(const Tensor& a, std::vector<int64_t> dims, bool keepdim, bool is_mean, const char* name) {
  require_floating(a, name);
  const int64_t nd = a.dim();
  HL_CHECK(nd <= k::kMaxDims, name, ": at most ", k::kMaxDims, " dimensions, got ", a.describe());
  k::ReduceIndex ix;
  ix.ndim = static_cast<int>(nd);
  for (int64_t i = 0; i < nd; ++i) ix.shape[i] = a.shape()[static_cast<size_t>(i)];
  for (int64_t d : dims) {
    const int64_t dd = d < 0 ? d + nd : d;
    HL_CHECK(dd >= 0 && dd < nd, name, ": dimension ", d, " out of range for ", a.describe());
    HL_CHECK(!ix.reduced[dd], name, ": dimension ", dd, " of ", a.describe(), " is named twice in the dims");
    ix.reduced[dd] = true;
  }
  Shape out_shape, keep_shape;
  for (int64_t i = 0; i < nd; ++i) {
    keep_shape.push_back(ix.reduced[i] ? 1 : ix.shape[i]);
    if (!ix.reduced[i]) out_shape.push_back(ix.shape[i]);
    else if (keepdim) out_shape.push_back(1);
  }
  const int64_t count = ix.reduce_numel();
  HL_CHECK(!is_mean || count > 0, name, ": mean over zero elements of ", a.describe());
  Tensor out = Tensor::empty(out_shape, reduction_dtype(a.dtype()), a.device());
  const double scale = is_mean ? 1.0 / static_cast<double>(count) : 1.0;
  k::reduce_sum(a.device(), ix, a.data_ptr(), a.dtype(), out.data_ptr(), out.dtype(), scale);
  const Shape in_shape = a.shape();
  const DType in_dtype = a.dtype();
  return record(out, name, {a}, {}, [in_shape, in_dtype, keep_shape, scale](const Tensor& g) {
    Tensor e = expand(g.reshape(keep_shape), in_shape);
    if (scale != 1.0) e = mul(e, scale);
    return std::vector<Tensor>{e.dtype() == in_dtype ? e : cast(e, in_dtype)};
  });
}

std::vector<int64_t> all_dims(const Tensor& a, const char* op) {
  require(a, op);  // before a.dim(), so an undefined input is reported under the op's name
  std::vector<int64_t> d(static_cast<size_t>(a.dim()));
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<int64_t>(i);
  return d;
}

}  // namespace

Tensor sum(const Tensor& a) { return reduce_impl(a, all_dims(a, "sum"), false, false, "sum"); }
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_impl(a, dims, keepdim, false, "sum");
}
Tensor mean(const Tensor& a) { return reduce_impl(a, all_dims(a, "mean"), false, true, "mean"); }
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_impl(a, dims, keepdim, true, "mean");
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  require(a, "sum_to");
  if (a.shape() == shape) return a;
  const Shape& s = a.shape();
  HL_CHECK(shape.size() <= s.size(), "sum_to: cannot sum ", a.describe(), " to ", shape_str(shape));
  const size_t off = s.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i < off) {
      dims.push_back(static_cast<int64_t>(i));
    } else if (shape[i - off] == 1 && s[i] != 1) {
      dims.push_back(static_cast<int64_t>(i));
    } else {
      HL_CHECK(shape[i - off] == s[i], "sum_to: cannot sum ", a.describe(), " to ", shape_str(shape));
    }
  }
  Tensor r = reduce_impl(a, dims, true, false, "sum_to");
  // Keep the input's dtype: sum_to undoes a broadcast, it is not a user-facing reduction.
  if (r.dtype() != a.dtype()) r = cast(r, a.dtype());
  return r.reshape(shape);
}

// ---- linear algebra ------------------------------------------------------------------------------------------

namespace {

void check_matmul(const Tensor& a, const Tensor& b, const char* op) {
  require_floating(a, op);
  require_floating(b, op);
  require_same_device(a, b, op);
  HL_CHECK(a.dim() == 2 && b.dim() == 2, op, ": needs 2-D tensors, got ", a.describe(), " and ", b.describe());
  HL_CHECK(a.dtype() == b.dtype(), op, ": operands must share a dtype, got ", a.describe(), " and ", b.describe(),
           " (cast one; under mixed precision both are f16)");
}

// out = op(a) * op(b) (+ bias, relu), through the GEMM registry.
Tensor gemm_raw(const Tensor& a, const Tensor& b, bool ta, bool tb, const Tensor& bias, bool fused_relu,
                const char* op) {
  const int64_t M = ta ? a.size(1) : a.size(0);
  const int64_t K = ta ? a.size(0) : a.size(1);
  const int64_t Kb = tb ? b.size(1) : b.size(0);
  const int64_t N = tb ? b.size(0) : b.size(1);
  HL_CHECK(K == Kb, op, ": inner dimensions differ: ", a.describe(), (ta ? " (transposed)" : ""), " x ",
           b.describe(), (tb ? " (transposed)" : ""), " (", K, " vs ", Kb, ")");
  Tensor out = Tensor::empty({M, N}, a.dtype(), a.device());
  if (M == 0 || N == 0) return out;
  if (K == 0) {  // an empty sum: zeros (+ bias, then the ReLU the caller asked for)
    out.zero_();
    if (bias.defined()) out.copy_(add(out, bias.detach()));
    if (fused_relu) out.copy_(relu(out));
    return out;
  }
  k::GemmArgs g;
  g.device = a.device();
  g.op_a = ta ? k::Op::T : k::Op::N;
  g.op_b = tb ? k::Op::T : k::Op::N;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = a.data_ptr();
  g.B = b.data_ptr();
  g.ab_type = a.dtype();
  g.C = out.data_ptr();
  g.c_type = out.dtype();
  k::set_dense_ld(g);
  if (bias.defined()) {
    g.bias = bias.data_ptr();
    g.bias_type = bias.dtype();
  }
  g.relu = fused_relu;
  k::gemm(g);
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  check_matmul(a, b, "matmul");
  Tensor out = gemm_raw(a, b, ta, tb, Tensor(), false, "matmul");
  // The gradient of each operand reads the other's values only; which are needed is fixed now (mul).
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const Saved saved{{"operand a", need_b ? a : Tensor()}, {"operand b", need_a ? b : Tensor()}};
  return record(out, "matmul", {a, b}, saved, [a, b, ta, tb, need_a, need_b](const Tensor& g_in) {
    // C = op(A) op(B); every gradient is itself one GEMM in one of the three layouts, on operands of
    // one dtype: a seed of another (backward(seed) takes any floating dtype) is converted first.
    const Tensor g = g_in.dtype() == a.dtype() ? g_in : cast(g_in, a.dtype());
    Tensor ga, gb;
    const Tensor ad = a.detach(), bd = b.detach();
    if (need_a) {
      if (!ta) ga = tb ? matmul(g, bd, false, false) : matmul(g, bd, false, true);
      else ga = tb ? matmul(bd, g, true, true) : matmul(bd, g, false, true);
    }
    if (need_b) {
      if (!tb) gb = ta ? matmul(ad, g, false, false) : matmul(ad, g, true, false);
      else gb = ta ? matmul(g, ad, true, true) : matmul(g, ad, true, false);
    }
    return std::vector<Tensor>{ga, gb};
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, bool fused_relu) {
  check_matmul(x, weight, "linear");
  if (bias.defined()) {
    require_floating(bias, "linear");
    require_same_device(x, bias, "linear");
    HL_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias ", bias.describe(),
             " does not match weight ", weight.describe(), " (needs [", weight.size(0), "])");
  }
  HL_CHECK(x.size(1) == weight.size(1), "linear: input ", x.describe(), " does not match weight ",
           weight.describe(), " (", x.size(1), " input features vs ", weight.size(1), ")");
  Tensor out = gemm_raw(x, weight, false, true, bias, fused_relu, "linear");
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  const Tensor y = out.detach();
  // dx reads the weight, dW the input, the fused ReLU's backward the output; db only the gradient.
  // Which are needed is fixed now (mul).
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  const Saved saved{{"input", need_w ? x : Tensor()}, {"weight", need_x ? weight : Tensor()},
                    {"output", fused_relu ? y : Tensor()}};
  return record(out, fused_relu ? "linear_relu" : "linear", inputs, saved,
                [x, weight, bias, fused_relu, need_x, need_w, need_b, out = y](const Tensor& g_in) {
                  // In the output's dtype, which the GEMMs below need (a seed may have another).
                  Tensor g = g_in.dtype() == out.dtype() ? g_in : cast(g_in, out.dtype());
                  if (fused_relu) {  // out = relu(z) > 0 exactly where z > 0
                    Tensor gz = Tensor::empty(out.shape(), out.dtype(), out.device());
                    k::relu_backward(out.device(), out.numel(), out.data_ptr(), g.data_ptr(), gz.data_ptr(),
                                     out.dtype());
                    g = gz;
                  }
                  std::vector<Tensor> grads(bias.defined() ? 3 : 2);
                  if (need_x) grads[0] = matmul(g, weight.detach(), false, false);  // [N,out]x[out,in]
                  if (need_w) grads[1] = matmul(g, x.detach(), true, false);       // [out,N]x[N,in]
                  if (need_b) grads[2] = grad_for(sum(g, {0}), bias);
                  return grads;
                });
}

// ---- shape -----------------------------------------------------------------------------------------------------

Tensor reshape(const Tensor& a, const Shape& shape) { return a.reshape(shape); }
Tensor flatten(const Tensor& a, int64_t start_dim) { return a.flatten(start_dim); }

// ---- classification ----------------------------------------------------------------------------------------

Tensor log_softmax(const Tensor& logits) {
  require_floating(logits, "log_softmax");
  HL_CHECK(logits.dim() == 2, "log_softmax: needs [rows, classes], got ", logits.describe());
  const int64_t rows = logits.size(0), cols = logits.size(1);
  const DType out_t = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;  // f32 math (§3.3)
  Tensor out = Tensor::empty(logits.shape(), out_t, logits.device());
  k::log_softmax_forward(logits.device(), rows, cols, logits.data_ptr(), logits.dtype(), out.data_ptr(), out_t);
  const DType in_t = logits.dtype();
  const Tensor y = out.detach();
  return record(out, "log_softmax", {logits}, {{"output", y}}, [out = y, in_t, rows, cols](const Tensor& g) {
    const Tensor gc = g.dtype() == out.dtype() ? g : cast(g, out.dtype());
    Tensor gx = Tensor::empty(out.shape(), in_t, out.device());
    k::log_softmax_backward(out.device(), rows, cols, out.data_ptr(), gc.data_ptr(), out.dtype(), gx.data_ptr(),
                            in_t);
    return std::vector<Tensor>{gx};
  });
}

namespace {

void check_labels(const Tensor& scores, const Tensor& labels, const char* op) {
  require(scores, op);
  require(labels, op);
  require_same_device(scores, labels, op);
  HL_CHECK(scores.dim() == 2, op, ": needs [rows, classes] scores, got ", scores.describe());
  HL_CHECK(labels.dtype() == DType::i32 && labels.dim() == 1 && labels.size(0) == scores.size(0), op,
           ": labels must be i32 [", scores.size(0), "], got ", labels.describe());
}

// Every label in [0, cols). Free on the CPU. On the GPU the check would read the labels back every
// step, so it runs only under set_detect_anomaly (debugging); otherwise a bad label yields a NaN loss,
// which a dynamic loss scaler takes for an overflow: every step skipped (the trainer reports them).
void check_label_range(const Tensor& labels, int64_t cols, const char* op) {
  if (labels.device() != Device::cpu && !detect_anomaly()) return;
  const std::vector<int32_t> host = labels.device() == Device::cpu ? std::vector<int32_t>() : labels.to_int();
  const int32_t* l = labels.device() == Device::cpu ? labels.data<int32_t>() : host.data();
  for (int64_t r = 0; r < labels.size(0); ++r)
    HL_CHECK(l[r] >= 0 && l[r] < cols, op, ": label ", l[r], " at row ", r, " is outside [0, ", cols, ")");
}

// Per-row -logp[r, label[r]]; differentiable in logp.
Tensor nll_rows(const Tensor& logp, const Tensor& labels) {
  const int64_t rows = logp.size(0), cols = logp.size(1);
  check_label_range(labels, cols, "nll_loss");
  Tensor out = Tensor::empty({rows}, logp.dtype(), logp.device());
  k::nll_forward(logp.device(), rows, cols, logp.data_ptr(), logp.dtype(), labels.data<int32_t>(), out.data_ptr());
  return record(out, "nll_loss", {logp}, {{"labels", labels}}, [logp, labels, rows, cols](const Tensor& g) {
    const Tensor gc = g.dtype() == logp.dtype() ? g : cast(g, logp.dtype());
    Tensor gl = Tensor::empty(logp.shape(), logp.dtype(), logp.device());
    k::nll_backward(logp.device(), rows, cols, labels.data<int32_t>(), gc.data_ptr(), gl.data_ptr(), logp.dtype());
    return std::vector<Tensor>{gl};
  });
}

}  // namespace

Tensor nll_loss(const Tensor& logp, const Tensor& labels) {
  require_floating(logp, "nll_loss");
  check_labels(logp, labels, "nll_loss");
  HL_CHECK(logp.size(0) > 0, "nll_loss: empty batch ", logp.describe());
  HL_CHECK(logp.dtype() != DType::f16, "nll_loss: log-probabilities are computed in f32 (got ", logp.describe(),
           "); use log_softmax, which returns f32");
  return mean(nll_rows(logp, labels));
}

Tensor cross_entropy_unfused(const Tensor& logits, const Tensor& labels) {
  require_floating(logits, "cross_entropy");
  check_labels(logits, labels, "cross_entropy");
  HL_CHECK(logits.size(0) > 0, "cross_entropy: empty batch ", logits.describe());
  return nll_loss(log_softmax(logits), labels);
}

// The fused path (kernels/cuda/softmax/fused_xent.cu on the GPU, the reference on the CPU).
// Forward: one kernel writes each row's loss and its statistics (max, log-sum-exp; 2 f32 per row),
// then the mean over rows. Backward: one kernel computes (softmax - onehot) * g / rows from the logits
// and the statistics, where g is the upstream gradient of the loss (the loss scale S under
// scaler.scale(loss).backward()), read from device memory: no host sync, and the gradient is scaled
// before it is rounded to the logits' dtype (paper §3.2). Nothing of size [rows, classes] is kept
// between forward and backward beyond the logits themselves.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  require_floating(logits, "cross_entropy");
  check_labels(logits, labels, "cross_entropy");
  HL_CHECK(logits.size(0) > 0, "cross_entropy: empty batch ", logits.describe());
  const int64_t rows = logits.size(0), cols = logits.size(1);
  HL_CHECK(cols > 0, "cross_entropy: needs at least one class, got ", logits.describe());
  const DType stat_t = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;  // f32 math (§3.3)

  k::SoftmaxArgs fwd;
  fwd.device = logits.device();
  fwd.op = k::SoftmaxOp::xent_forward;
  fwd.rows = rows;
  fwd.cols = cols;
  fwd.x = logits.data_ptr();
  fwd.x_type = logits.dtype();
  fwd.stat_type = stat_t;
  // A pinned softmax rung without a fused loss (--softmax block_row): the unfused path, with that rung.
  if (!k::softmax_can_run(fwd)) return cross_entropy_unfused(logits, labels);

  check_label_range(labels, cols, "cross_entropy");
  Tensor row_loss = Tensor::empty({rows}, stat_t, logits.device());
  Tensor stats = Tensor::empty({rows, 2}, stat_t, logits.device());
  fwd.labels = labels.data<int32_t>();
  fwd.loss = row_loss.data_ptr();
  fwd.stats = stats.data_ptr();
  k::softmax(fwd);
  Tensor loss;
  {
    NoGradGuard no_grad;  // the node below is the whole op's; the mean is part of it
    loss = mean(row_loss);
  }
  // The backward reads the logits, the labels and the row statistics (which only this op holds).
  return record(loss, "cross_entropy", {logits}, {{"logits", logits}, {"labels", labels}},
                [x = logits.detach(), labels, stats, fwd, rows](const Tensor& g) {
                  const Tensor gs = g.dtype() == stats.dtype() ? g : cast(g, stats.dtype());
                  Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
                  k::SoftmaxArgs bwd = fwd;
                  bwd.op = k::SoftmaxOp::xent_backward;
                  bwd.loss = nullptr;
                  bwd.y = gx.data_ptr();
                  bwd.y_type = gx.dtype();
                  bwd.grad_scale = gs.data_ptr();
                  bwd.multiplier = 1.0 / static_cast<double>(rows);  // d mean / d row loss
                  k::softmax(bwd);
                  return std::vector<Tensor>{gx};
                });
}

Tensor argmax(const Tensor& a) {
  require_floating(a, "argmax");
  HL_CHECK(a.dim() == 2 && a.size(1) > 0, "argmax: needs [rows, columns > 0], got ", a.describe());
  Tensor out = Tensor::empty({a.size(0)}, DType::i32, a.device());
  k::argmax_rows(a.device(), a.size(0), a.size(1), a.data_ptr(), a.dtype(), out.data<int32_t>());
  return out;
}

Tensor correct_count(const Tensor& logits, const Tensor& labels) {
  require_floating(logits, "correct_count");
  check_labels(logits, labels, "correct_count");
  const Tensor pred = argmax(logits);
  Tensor count = Tensor::empty({}, DType::i32, logits.device());
  k::count_equal(logits.device(), pred.numel(), pred.data<int32_t>(), labels.data<int32_t>(), count.data<int32_t>());
  return count;
}

double accuracy(const Tensor& logits, const Tensor& labels) {
  require_floating(logits, "accuracy");  // checked here too, so that errors are named after accuracy
  check_labels(logits, labels, "accuracy");
  const int64_t n = logits.size(0);
  HL_CHECK(n > 0, "accuracy: empty batch ", logits.describe());
  return correct_count(logits, labels).item() / static_cast<double>(n);
}

}  // namespace hl
