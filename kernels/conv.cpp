// The public convolution entry point: check the arguments once, here, so that every variant (CPU
// reference, im2col, the CUDA ladder) can assume a well-formed problem, then hand over to the
// variant registry (like kernels/gemm.cpp).
#include "kernels/conv.h"

#include <sstream>

#include "kernels/error.h"

namespace hl::kernels {

namespace {

bool is_conv_float(DType t) { return t == DType::f16 || t == DType::f32 || t == DType::f64; }

void validate(const ConvArgs& a) {
  // Every message starts with "conv:" and ends with the whole problem.
  const auto fail = [&](const auto&... what) {
    throw Error(detail::concat("conv: ", what..., " (", a.describe(), ")"));
  };
  if (a.N < 1 || a.C < 1 || a.H < 1 || a.W < 1)
    fail("input sizes must be >= 1, got N=", a.N, " C=", a.C, " H=", a.H, " W=", a.W);
  if (a.K < 1 || a.R < 1 || a.S < 1) fail("filter sizes must be >= 1, got K=", a.K, " R=", a.R, " S=", a.S);
  if (a.stride_h < 1 || a.stride_w < 1) fail("strides must be >= 1, got ", a.stride_h, "x", a.stride_w);
  if (a.pad_h < 0 || a.pad_w < 0) fail("padding must be >= 0, got ", a.pad_h, "x", a.pad_w);
  if (a.R > a.H + 2 * a.pad_h || a.S > a.W + 2 * a.pad_w)
    fail("the ", a.R, "x", a.S, " kernel is larger than the padded input ", a.H + 2 * a.pad_h, "x",
         a.W + 2 * a.pad_w);
  // Padding at least as wide as the kernel would produce output rows that see only zeros; PyTorch
  // refuses pad > kernel/2 for pooling, convolution allows it, and so do we (they are just zeros).
  switch (a.pass) {
    case ConvPass::forward:
      if (a.x == nullptr || a.w == nullptr || a.y == nullptr) fail("forward needs x, w and y");
      break;
    case ConvPass::backward_data:
      if (a.dy == nullptr || a.w == nullptr || a.dx == nullptr) fail("backward_data needs dy, w and dx");
      break;
    case ConvPass::backward_weight:
      if (a.x == nullptr || a.dy == nullptr || a.dw == nullptr) fail("backward_weight needs x, dy and dw");
      break;
  }
  if (a.pass != ConvPass::forward && (a.bias != nullptr || a.relu))
    fail("bias and relu belong to the forward pass only");
  if (!is_conv_float(a.in_type)) fail("inputs must be f16, f32 or f64, got ", dtype_name(a.in_type));
  if (!is_conv_float(a.out_type)) fail("the output must be f16, f32 or f64, got ", dtype_name(a.out_type));
  // f64 exists for gradient checks, which run in f64 from end to end (as for GEMM).
  if (a.out_type == DType::f64 && a.in_type != DType::f64)
    fail("an f64 output needs f64 inputs (", dtype_name(a.in_type), " inputs accumulate in f32)");
  if (a.in_type == DType::f64 && a.out_type != DType::f64)
    fail("f64 inputs need an f64 output, got ", dtype_name(a.out_type));
  if (a.bias != nullptr && !is_conv_float(a.bias_type))
    fail("bias must be f16, f32 or f64, got ", dtype_name(a.bias_type));
}

}  // namespace

const char* conv_pass_name(ConvPass p) {
  switch (p) {
    case ConvPass::forward: return "forward";
    case ConvPass::backward_data: return "backward_data";
    case ConvPass::backward_weight: return "backward_weight";
  }
  return "?";
}

void* ConvArgs::out() const {
  switch (pass) {
    case ConvPass::forward: return y;
    case ConvPass::backward_data: return dx;
    case ConvPass::backward_weight: return dw;
  }
  return nullptr;
}

int64_t ConvArgs::out_numel() const {
  switch (pass) {
    case ConvPass::forward: return N * K * P() * Q();
    case ConvPass::backward_data: return N * C * H * W;
    case ConvPass::backward_weight: return K * C * R * S;
  }
  return 0;
}

std::string ConvArgs::describe() const {
  std::ostringstream os;
  os << "conv " << conv_pass_name(pass) << " N=" << N << " C=" << C << " H=" << H << " W=" << W << " K=" << K
     << " R=" << R << " S=" << S << " stride=" << stride_h << "x" << stride_w << " pad=" << pad_h << "x" << pad_w;
  // P and Q only where they are defined: describe() also reports the arguments validation rejects.
  if (stride_h >= 1 && stride_w >= 1 && R <= H + 2 * pad_h && S <= W + 2 * pad_w) os << " -> P=" << P() << " Q=" << Q();
  os << ' ' << dtype_name(in_type) << "->" << dtype_name(out_type);
  if (beta != 0.0f) os << " beta=" << beta;
  if (bias != nullptr) os << " +bias(" << dtype_name(bias_type) << ")";
  if (relu) os << " relu";
  os << " on " << device_name(device);
  return os.str();
}

void conv2d(const ConvArgs& args, const std::string& variant) {
  validate(args);
  ConvRegistry::instance().select(args, variant).run(args);
}

}  // namespace hl::kernels
