// Tests of the CUDA convolution ladder (kernels/cuda/conv/: direct, im2col_gemm, implicit_gemm_wmma)
// against a float64 CPU reference.
//
// Every variant x pass x input dtype x output dtype that the variant accepts runs on fresh random
// inputs (the seed is printed; rerun with HALFLING_TEST_SEED=<seed>), already rounded to the input
// dtype so the reference sees exactly what the GPU sees. The reference is the CPU "reference" variant
// (direct loops) run in f64 from end to end. Outputs are poisoned with NaN before each run (beta == 0
// must not read them; an element a kernel forgets to write fails), and every element is checked.
//
// Error measure: the same problem is also run on |x|, |w|, |dy|, |bias|, |beta*old| ("absref", the
// sum of the magnitudes of the terms of each output). Rounding errors scale with absref, not with the
// result (which may cancel to ~0), so
//   * each element must satisfy |out - ref| <= u_out*|ref| + n*2^-23*absref, where u_out is the
//     output's unit roundoff (the one rounding on the store; for f16 |ref| is taken as at least
//     2^-14, where the subnormals begin) and n*2^-23 the worst-case bound of an
//     FP32 sum of n terms, allowing 2 ulps per addition because Tensor Core accumulation need not
//     round to nearest — loose for long sums, so also
//   * the norm-wise error ||out - ref|| / ||absref|| must stay below the rung's tolerance (kTolerance
//     below, with its reason): an indexing bug gives errors of the order of the terms (~1e-1), far
//     above any tolerance here.
//
// The CUDA tests skip themselves without a GPU (HL_REQUIRE_CUDA); the registry tests run on any CUDA
// build. On a GPU machine: ./build/tests/test_kernels --gtest_filter='ConvCuda*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cuda/conv/implicit_gemm_nhwc.h"
#include "kernels/cuda/conv/implicit_gemm_nhwc_wgrad.h"
#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/runtime.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/test_util.h"

namespace hl {
namespace {

using kernels::ConvArgs;
using kernels::ConvPass;
using kernels::ConvRegistry;

constexpr DeviceType kCuda = DeviceType::cuda;
using test::gpu::DeviceBuffer;
using test::gpu::kNaN;

// The rungs of this ladder, fastest first, as the registry must rank them (rungs 4 and 3b were opt-in
// until their H200 run of 2026-11-26).
const std::vector<std::string> kCudaConvRungs = {"implicit_gemm_nhwc", "implicit_gemm_table", "implicit_gemm_wmma",
                                                 "im2col_gemm", "direct"};

// Norm-wise tolerance of each rung, relative to ||absref|| (see the header), for an f32 output; an
// f16 output adds its rounding (check()).
double rung_tolerance(const std::string& variant) {
  // direct: one sequential FP32 fma chain per output, up to N*P*Q = 1.3e5 terms long in
  // backward_weight: a random-walk error of ~sqrt(n)*2^-24 = 2e-5, with a 5x margin.
  if (variant == "direct") return 1e-4;
  // im2col_gemm: the registry's CUDA GEMM (blocked FP32 sums, shorter chains than direct) plus one
  // FP32 addition per tap in col2im: the same bound holds.
  if (variant == "im2col_gemm") return 1e-4;
  // implicit_gemm_wmma and implicit_gemm_table: Tensor Core FP32 accumulation, which is not
  // specified to round to nearest: twice the margin.
  return 2e-4;
}

double unit_roundoff(DType t) { return t == DType::f16 ? 1.0 / (1 << 11) : 1.0 / (1 << 24); }

// ---- problems -------------------------------------------------------------------------------------

struct Shape {
  const char* name;
  int64_t N, C, H, W, K, R, S, sh, sw, ph, pw;
};

ConvArgs args_for(const Shape& s, ConvPass pass) {
  ConvArgs a;
  a.pass = pass;
  a.N = s.N, a.C = s.C, a.H = s.H, a.W = s.W, a.K = s.K, a.R = s.R, a.S = s.S;
  a.stride_h = s.sh, a.stride_w = s.sw, a.pad_h = s.ph, a.pad_w = s.pw;
  return a;
}

int64_t numel_x(const ConvArgs& a) { return a.N * a.C * a.H * a.W; }
int64_t numel_w(const ConvArgs& a) { return a.K * a.C * a.R * a.S; }
int64_t numel_y(const ConvArgs& a) { return a.N * a.K * a.P() * a.Q(); }

// Length of the sum behind each output element (the GEMM's K of the pass).
int64_t reduction_length(const ConvArgs& a) {
  switch (a.pass) {
    case ConvPass::forward: return a.C * a.R * a.S;
    case ConvPass::backward_data: return a.K * a.R * a.S;
    case ConvPass::backward_weight: return a.N * a.P() * a.Q();
  }
  return 0;
}

// One pass of one shape with its inputs (values representable in in_type; bias and old in f16, so they
// are exact in any output dtype) and its float64 reference.
struct Problem {
  ConvArgs a;  // sizes, pass, beta, relu, whether there is a bias (a.bias != nullptr marks it)
  DType in_type = DType::f16;
  std::vector<double> x, w, dy, bias, old;
  std::vector<double> ref, absref;
};

std::vector<double> run_reference(const Problem& p, bool absolute) {
  const auto mag = [&](std::vector<double> v) {
    if (absolute)
      for (double& e : v) e = std::fabs(e);
    return v;
  };
  ConvArgs a = p.a;
  a.device = DeviceType::cpu;
  a.in_type = a.out_type = DType::f64;
  const std::vector<double> x = mag(p.x), w = mag(p.w), dy = mag(p.dy), bias = mag(p.bias);
  std::vector<double> out = p.a.beta != 0.0f ? mag(p.old) : std::vector<double>(static_cast<size_t>(a.out_numel()), kNaN);
  a.x = x.empty() ? nullptr : x.data();
  a.w = w.empty() ? nullptr : w.data();
  a.dy = dy.empty() ? nullptr : dy.data();
  a.y = a.dx = a.dw = nullptr;
  if (a.pass == ConvPass::forward) a.y = out.data();
  if (a.pass == ConvPass::backward_data) a.dx = out.data();
  if (a.pass == ConvPass::backward_weight) a.dw = out.data();
  a.bias = p.a.bias != nullptr ? bias.data() : nullptr;
  a.bias_type = DType::f64;
  if (absolute) {
    a.beta = std::fabs(a.beta);
    a.relu = false;  // ReLU only shrinks magnitudes
  }
  kernels::conv2d(a, "reference");
  return out;
}

Problem make_problem(const Shape& s, ConvPass pass, DType in_type, bool bias_relu, float beta, uint64_t seed) {
  Problem p;
  p.a = args_for(s, pass);
  p.in_type = in_type;
  if (pass != ConvPass::backward_data) p.x = test::random_values(numel_x(p.a), seed + 1, -1.0, 1.0, in_type);
  if (pass != ConvPass::backward_weight) p.w = test::random_values(numel_w(p.a), seed + 2, -1.0, 1.0, in_type);
  if (pass != ConvPass::forward) p.dy = test::random_values(numel_y(p.a), seed + 3, -1.0, 1.0, in_type);
  if (bias_relu) {
    p.bias = test::random_values(p.a.K, seed + 4, -1.0, 1.0, DType::f16);
    p.a.bias = p.bias.data();  // only a marker here: the device run uses its own copy
    p.a.relu = true;
  }
  p.a.beta = beta;
  if (beta != 0.0f) p.old = test::random_values(p.a.out_numel(), seed + 5, -2.0, 2.0, DType::f16);
  p.ref = run_reference(p, false);
  p.absref = run_reference(p, true);
  return p;
}

// Run `variant` on the problem with output dtype out_type; returns the output.
std::vector<double> run_cuda(const Problem& p, const std::string& variant, DType out_type) {
  ConvArgs a = p.a;
  a.device = kCuda;
  a.in_type = p.in_type;
  a.out_type = out_type;
  std::unique_ptr<DeviceBuffer> x, w, dy, bias;
  if (!p.x.empty()) x = std::make_unique<DeviceBuffer>(p.x, p.in_type);
  if (!p.w.empty()) w = std::make_unique<DeviceBuffer>(p.w, p.in_type);
  if (!p.dy.empty()) dy = std::make_unique<DeviceBuffer>(p.dy, p.in_type);
  if (p.a.bias != nullptr) bias = std::make_unique<DeviceBuffer>(p.bias, p.in_type);
  // Poisoned unless beta != 0 asks the kernel to read it.
  DeviceBuffer out(p.a.beta != 0.0f ? p.old : std::vector<double>(static_cast<size_t>(a.out_numel()), kNaN),
                   out_type);
  a.x = x ? x->get() : nullptr;
  a.w = w ? w->get() : nullptr;
  a.dy = dy ? dy->get() : nullptr;
  a.bias = bias ? bias->get() : nullptr;
  a.bias_type = p.in_type;
  a.y = a.dx = a.dw = nullptr;
  if (a.pass == ConvPass::forward) a.y = out.get();
  if (a.pass == ConvPass::backward_data) a.dx = out.get();
  if (a.pass == ConvPass::backward_weight) a.dw = out.get();
  kernels::conv2d(a, variant);
  runtime::cuda_synchronize();
  return out.download();
}

// Checks every element and the norm-wise error; returns the norm-wise error (for the log).
double check(const Problem& p, const std::vector<double>& out, const std::string& variant, DType out_type,
             const std::string& what) {
  EXPECT_EQ(out.size(), p.ref.size()) << what;
  if (out.size() != p.ref.size()) return INFINITY;
  const double u = unit_roundoff(out_type);
  // Below 2^-14 f16 is subnormal, with a fixed spacing of 2^-24: its rounding error is measured
  // against 2^-14, not against the (smaller) value.
  const double small = out_type == DType::f16 ? std::ldexp(1.0, -14) : 0.0;
  const double n_bound = static_cast<double>(reduction_length(p.a) + 2) * std::ldexp(1.0, -23);
  size_t bad = 0;
  std::ostringstream first;
  first << std::setprecision(10);
  double num = 0.0, den = 0.0, rounding = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double o = out[i], r = p.ref[i];
    bool ok;
    double tol = 0.0;
    if (std::isnan(r)) {
      ok = std::isnan(o);
    } else {
      tol = u * std::max(std::fabs(r), small) + n_bound * p.absref[i];
      ok = std::isfinite(o) && std::fabs(o - r) <= tol;
      if (std::isfinite(o)) num += (o - r) * (o - r);
      den += p.absref[i] * p.absref[i];
      rounding += std::max(std::fabs(r), small) * std::max(std::fabs(r), small);
    }
    if (!ok && bad++ < 5) first << "\n    [" << i << "] got " << o << ", want " << r << " (tolerance " << tol << ")";
  }
  const double err = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
  // An f16 output adds its rounding on the store, at most u |ref| per element (u 2^-14 below the
  // subnormals), so at most u ||max(|ref|, 2^-14)|| to the norm: measured against ||absref|| as err is.
  // Not u alone: where the terms cancel, ||ref|| is far below ||absref|| (239x in LeNet conv1's weight
  // gradient), and u alone let an output that left out the last image of the batch pass (3.8e-4).
  const double f16_rounding = out_type == DType::f16 ? u * std::sqrt(rounding) / (den > 0.0 ? std::sqrt(den) : 1.0) : 0.0;
  const double tol = rung_tolerance(variant) + f16_rounding;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << out.size() << " elements out of tolerance" << first.str();
  EXPECT_LE(err, tol) << what << ": norm-wise error " << err << " above the rung's tolerance " << tol;
  return err;
}

std::string describe(const Shape& s, ConvPass pass, DType in, DType out, const std::string& variant) {
  std::ostringstream os;
  os << variant << " " << kernels::conv_pass_name(pass) << " " << s.name << " (N=" << s.N << " C=" << s.C << " H=" << s.H
     << " W=" << s.W << " K=" << s.K << " " << s.R << "x" << s.S << " stride " << s.sh << "x" << s.sw << " pad " << s.ph
     << "x" << s.pw << ") " << dtype_name(in) << "->" << dtype_name(out);
  return os.str();
}

// What a variant may legitimately refuse (anything else must run).
bool may_refuse(const std::string& variant, DType in) {
  return variant.rfind("implicit_gemm", 0) == 0 && in != DType::f16;
}

// Every CUDA variant x output dtype on one problem.
// The worst norm-wise error of each output dtype over the variants run (for the log: an f32 output's
// is the accumulation's alone, what the rung tolerances above bound).
struct WorstError {
  double f16 = 0.0, f32 = 0.0;
};

void run_all_variants(const Problem& p, const Shape& s, WorstError* worst = nullptr) {
  // Every registered CUDA variant (the ladder, and any added later).
  for (const std::string& variant : ConvRegistry::instance().names(kCuda)) {
    const auto* v = ConvRegistry::instance().find(variant, kCuda);
    ASSERT_NE(v, nullptr) << variant;
    for (DType out_type : {DType::f16, DType::f32}) {
      const std::string what = describe(s, p.a.pass, p.in_type, out_type, variant) +
                               (p.a.relu ? " +bias relu" : "") + (p.a.beta != 0.0f ? " beta" : "");
      ConvArgs probe = p.a;
      probe.device = kCuda;
      probe.in_type = p.in_type;
      probe.out_type = out_type;
      if (const char* why = v->unsupported ? v->unsupported(probe) : nullptr) {
        EXPECT_TRUE(may_refuse(variant, p.in_type)) << what << " refused: " << why;
        continue;
      }
      const double err = check(p, run_cuda(p, variant, out_type), variant, out_type, what);
      if (worst != nullptr) {
        double& w = out_type == DType::f16 ? worst->f16 : worst->f32;
        w = std::max(w, err);
      }
    }
  }
}

const ConvPass kPasses[] = {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight};

// Small shapes covering the corners: N = 1, C = 1 and 3, odd and non-square H/W, stride 2 (and
// unequal strides), padding 0/1/2, K not a multiple of 16 (10, 17, 33, 65: partial tiles), kernels
// 1/3/5 (and 3x5), a 5x5 kernel with a single output position.
const std::vector<Shape> kSmallShapes = {
    {"n1_c1_7x9_k10_3x3_s1_p1", 1, 1, 7, 9, 10, 3, 3, 1, 1, 1, 1},
    {"c3_7x9_k33_5x5_s2_p2", 2, 3, 7, 9, 33, 5, 5, 2, 2, 2, 2},
    {"c3_8x8_k16_1x1_s1_p0", 3, 3, 8, 8, 16, 1, 1, 1, 1, 0, 0},
    {"c16_9x7_k17_3x3_s2_p0", 2, 16, 9, 7, 17, 3, 3, 2, 2, 0, 0},
    {"c8_5x5_k8_5x5_s1_p0", 1, 8, 5, 5, 8, 5, 5, 1, 1, 0, 0},
    {"c5_11x6_k24_3x3_s1_p2", 2, 5, 11, 6, 24, 3, 3, 1, 1, 2, 2},
    {"c32_10x10_k65_3x3_s1_p1", 4, 32, 10, 10, 65, 3, 3, 1, 1, 1, 1},
    {"c7_13x13_k40_1x1_s2_p0", 2, 7, 13, 13, 40, 1, 1, 2, 2, 0, 0},
    {"c4_9x8_k12_3x5_s2x1_p1x2", 2, 4, 9, 8, 12, 3, 5, 2, 1, 1, 2},
    {"c40_6x6_k130_3x3_s1_p1", 3, 40, 6, 6, 130, 3, 3, 1, 1, 1, 1},
    // N*P*Q = 1600: implicit_gemm_wmma splits backward_weight's reduction into 6 slices (the last short).
    {"n4_c8_20x20_k24_3x3_s1_p1", 4, 8, 20, 20, 24, 3, 3, 1, 1, 1, 1},
};

// ==================================================================================================
// registry (runs on any CUDA build, no GPU needed: nothing is launched)
// ==================================================================================================

TEST(ConvCudaRegistry, EveryRungIsRegisteredInLadderOrder) {
  if (!runtime::cuda_compiled()) GTEST_SKIP() << "halfling was built without CUDA";
  const auto& reg = ConvRegistry::instance();
  for (const auto& name : kCudaConvRungs) {
    const auto* v = reg.find(name, kCuda);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_FALSE(v->summary.empty()) << name;
    EXPECT_NE(v->run, nullptr) << name;
    EXPECT_NE(v->unsupported, nullptr) << name;
  }
  for (size_t i = 0; i + 1 < kCudaConvRungs.size(); ++i)
    EXPECT_GT(reg.find(kCudaConvRungs[i], kCuda)->priority, reg.find(kCudaConvRungs[i + 1], kCuda)->priority)
        << kCudaConvRungs[i] << " vs " << kCudaConvRungs[i + 1];
  // Every rung has run on a GPU (rungs 3b and 4 on an H200, 2026-11-26), so none is opt-in; a new
  // rung written without a GPU lands opt-in (registry.h) and is listed here until it runs on one.
  for (const auto& name : kCudaConvRungs) EXPECT_FALSE(reg.find(name, kCuda)->opt_in) << name;
  // Rung 4b, the NHWC weight gradient, written without a GPU, ran on an H100 (2026-11-27) and was
  // faster on every weight gradient it computes: promoted, ranked above rung 4, to which it hands the
  // other passes.
  const auto* wgrad = reg.find("implicit_gemm_nhwc_wgrad", kCuda);
  ASSERT_NE(wgrad, nullptr);
  EXPECT_FALSE(wgrad->opt_in);
  EXPECT_GT(wgrad->priority, reg.find("implicit_gemm_nhwc", kCuda)->priority);
}

TEST(ConvCudaRegistry, DefaultIsTheFastestVariantThatCoversTheCall) {
  if (!runtime::cuda_compiled()) GTEST_SKIP() << "halfling was built without CUDA";
  if (std::getenv("HALFLING_CONV") != nullptr) GTEST_SKIP() << "HALFLING_CONV pins the variant";
  const auto& reg = ConvRegistry::instance();
  if (!reg.default_name().empty()) GTEST_SKIP() << "a default variant is pinned";
  ConvArgs a = args_for({"vgg", 128, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1}, ConvPass::forward);
  a.device = kCuda;
  a.in_type = a.out_type = DType::f16;
  // Rung 4b for every pass: it computes the weight gradient itself and hands the rest to rung 4, which
  // computes forward and stride-1 backward_data and hands the rest on to rung 3b or 3
  // (implicit_gemm_nhwc.cu), so the registry never needs to look further down.
  const int cc = runtime::cuda_compute_capability();
  if (cc == 0 || cc >= 70) {
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight}) {
      a.pass = pass;
      EXPECT_EQ(reg.select(a).name, "implicit_gemm_nhwc_wgrad") << kernels::conv_pass_name(pass);
    }
  }
  a.in_type = a.out_type = DType::f32;  // no FP16 Tensor Cores for f32 inputs: the next rung takes it
  for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight}) {
    a.pass = pass;
    EXPECT_EQ(reg.select(a).name, "im2col_gemm") << kernels::conv_pass_name(pass);
  }
}

TEST(ConvCudaRegistry, ImplicitGemmSaysWhyItRefuses) {
  if (!runtime::cuda_compiled()) GTEST_SKIP() << "halfling was built without CUDA";
  for (const std::string name :
       {"implicit_gemm_wmma", "implicit_gemm_table", "implicit_gemm_nhwc", "implicit_gemm_nhwc_wgrad"}) {
    SCOPED_TRACE(name);
    const auto* v = ConvRegistry::instance().find(name, kCuda);
    ASSERT_NE(v, nullptr);
    ConvArgs a = args_for({"lenet1", 128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2}, ConvPass::forward);
    a.device = kCuda;
    a.in_type = a.out_type = DType::f32;
    const char* why = v->unsupported(a);
    ASSERT_NE(why, nullptr);
    EXPECT_NE(std::string(why).find("f16"), std::string::npos) << why;
    a.in_type = DType::f16;
    EXPECT_EQ(v->unsupported(a), nullptr) << "an f16 forward pass is what the rung is for";
    a.in_type = DType::f32;
    // Asking for it by name gives an hl::Error naming the variant and the reason, not a crash. The
    // pointers only pass the argument check: the variant is refused before anything runs.
    float dummy = 0.0f;
    a.x = a.w = a.y = &dummy;
    try {
      kernels::conv2d(a, name);
      FAIL() << name << " ran an f32 convolution";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("variant '" + name + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("f16 inputs only"), std::string::npos) << e.what();
    }
  }
}

TEST(ConvCudaRegistry, TapTableRefusesTapsBeyond32BitOffsets) {
  // TapEntry stores a tap's offset from its column in 32 bits. Large padding lets a 5-row kernel
  // reach 4 rows of a 2^30-wide image (2^32 elements) while every per-image limit holds.
  if (!runtime::cuda_compiled()) GTEST_SKIP() << "halfling was built without CUDA";
  const auto* table = ConvRegistry::instance().find("implicit_gemm_table", kCuda);
  const auto* plain = ConvRegistry::instance().find("implicit_gemm_wmma", kCuda);
  ASSERT_NE(table, nullptr);
  ASSERT_NE(plain, nullptr);
  if (runtime::cuda_compute_capability() != 0 && runtime::cuda_compute_capability() < 70)
    GTEST_SKIP() << "no FP16 Tensor Cores: both rungs refuse everything here";
  ConvArgs a = args_for({"wide", 1, 1, 1, int64_t{1} << 30, 1, 5, 1, 1, 1, 2, 0}, ConvPass::forward);
  a.device = kCuda;
  a.in_type = a.out_type = DType::f16;
  EXPECT_EQ(plain->unsupported(a), nullptr) << "rung 3 computes its offsets in 64 bits";
  const char* why = table->unsupported(a);
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::string(why).find("32-bit"), std::string::npos) << why;
  // The same limit in backward_data (stride 1: the table gathers dy, taps reach back (R-1)*Q + S-1).
  ConvArgs d = args_for({"wide", 1, 1, 1, int64_t{1} << 30, 1, 5, 1, 1, 1, 2, 0}, ConvPass::backward_data);
  d.device = kCuda;
  d.in_type = d.out_type = DType::f16;
  EXPECT_EQ(plain->unsupported(d), nullptr) << "rung 3 computes its offsets in 64 bits";
  why = table->unsupported(d);
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::string(why).find("32-bit"), std::string::npos) << why;
  // A table of more than 2^24 entries (16 bytes each) is refused; rung 3 needs none. 3 x 3 kernels
  // on 2^21 channels: C*R*S = 9 * 2^21 reduction indices, within every per-image limit.
  ConvArgs big = args_for({"channels", 1, int64_t{1} << 21, 3, 3, 1, 3, 3, 1, 1, 1, 1}, ConvPass::forward);
  big.device = kCuda;
  big.in_type = big.out_type = DType::f16;
  EXPECT_EQ(plain->unsupported(big), nullptr);
  why = table->unsupported(big);
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::string(why).find("2^24 reduction indices"), std::string::npos) << why;
  // The VGG-small and LeNet layers are far from it.
  for (const Shape& s :
       {Shape{"vgg", 128, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1}, Shape{"lenet1", 128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2}}) {
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data}) {
      ConvArgs b = args_for(s, pass);
      b.device = kCuda;
      b.in_type = b.out_type = DType::f16;
      EXPECT_EQ(table->unsupported(b), nullptr) << s.name << " " << kernels::conv_pass_name(pass);
    }
  }
}

// Geometry keeps strides and padding in 32-bit ints: both implicit GEMM rungs refuse larger ones
// (before, a stride and padding of 2^32 truncated to 0 and gathered x[0] where the reference has
// padding zeros), and the registry's automatic choice passes the shape to a rung that takes it.
TEST(ConvCudaRegistry, ImplicitGemmRefusesStridesAndPaddingPast32Bits) {
  if (!runtime::cuda_compiled()) GTEST_SKIP() << "halfling was built without CUDA";
  if (runtime::cuda_compute_capability() != 0 && runtime::cuda_compute_capability() < 70)
    GTEST_SKIP() << "no FP16 Tensor Cores: both rungs refuse everything here";
  const int64_t huge = int64_t{1} << 32;
  for (const char* name :
       {"implicit_gemm_wmma", "implicit_gemm_table", "implicit_gemm_nhwc", "implicit_gemm_nhwc_wgrad"}) {
    const auto* v = ConvRegistry::instance().find(name, kCuda);
    ASSERT_NE(v, nullptr) << name;
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight}) {
      ConvArgs a = args_for({"far", 1, 1, 3, 1, 1, 1, 1, huge, 1, huge, 0}, pass);
      a.device = kCuda;
      a.in_type = a.out_type = DType::f16;
      const char* why = v->unsupported(a);
      ASSERT_NE(why, nullptr) << name << " " << kernels::conv_pass_name(pass);
      EXPECT_NE(std::string(why).find("stride or padding above 2^31 - 1"), std::string::npos) << why;
      const std::string chosen = ConvRegistry::instance().select(a).name;
      EXPECT_TRUE(chosen.rfind("implicit_gemm", 0) != 0)
          << chosen << " " << kernels::conv_pass_name(pass);
    }
  }
}

// The gather's coordinates are ints as well (implicit_gemm_index.h): with a stride of 2^30 and a padding
// near 2^31, the strided data gradient's h + ph passed 2^31 - 1, wrapped below 0 and read as padding, so
// dx[2^19] came out 0 where it is w * dy[2] (found by review, 2026-11-29; the shape is valid, one image of
// 2^20 elements). The reduction index of a K step's rows is an int too: C*R*S within 32 of 2^31 - 1 would
// pass it on the last step (a shape that every other condition accepts). Every implicit GEMM rung refuses
// both now (rungs 4 and 4b ask rung 3), in every pass, and the automatic choice goes elsewhere; a padding
// of 2^29 on the same layer is taken.
TEST(ConvCudaRegistry, ImplicitGemmRefusesCoordinatesPast32Bits) {
  if (!runtime::cuda_compiled()) GTEST_SKIP() << "halfling was built without CUDA";
  if (runtime::cuda_compute_capability() != 0 && runtime::cuda_compute_capability() < 70)
    GTEST_SKIP() << "no FP16 Tensor Cores: both rungs refuse everything here";
  const int64_t top = int64_t{1} << 31;
  const Shape wraps{"wraps", 1, 1, int64_t{1} << 20, 1, 1, 1, 1, int64_t{1} << 30, 1, top - (int64_t{1} << 19), 0};
  // C*R*S = 3 x 715,827,882 = 2^31 - 2: one image of 3 elements, padded to a row as long as the filter.
  const Shape long_reduction{"long reduction", 1, 3, 1, 1, 1, 715827882, 1, 1, 1, 357913941, 0};
  const Shape fits{"fits", 1, 1, int64_t{1} << 20, 1, 1, 1, 1, int64_t{1} << 30, 1, int64_t{1} << 29, 0};
  const auto f16_args = [](const Shape& s, ConvPass pass) {
    ConvArgs a = args_for(s, pass);
    a.device = kCuda;
    a.in_type = a.out_type = DType::f16;
    return a;
  };
  for (const char* name :
       {"implicit_gemm_wmma", "implicit_gemm_table", "implicit_gemm_nhwc", "implicit_gemm_nhwc_wgrad"}) {
    const auto* v = ConvRegistry::instance().find(name, kCuda);
    ASSERT_NE(v, nullptr) << name;
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight}) {
      const std::string where = std::string(name) + " " + kernels::conv_pass_name(pass);
      for (const auto& [shape, reason] : {std::pair{wraps, "coordinate passes 2^31 - 1"},
                                          std::pair{long_reduction, "within 32 of 2^31 - 1"}}) {
        const ConvArgs a = f16_args(shape, pass);
        const char* why = v->unsupported(a);
        ASSERT_NE(why, nullptr) << where << ", " << shape.name;
        EXPECT_NE(std::string(why).find(reason), std::string::npos) << where << ", " << shape.name << ": " << why;
        const std::string chosen = ConvRegistry::instance().select(a).name;
        EXPECT_TRUE(chosen.rfind("implicit_gemm", 0) != 0) << chosen << " for " << where << ", " << shape.name;
      }
    }
  }
  const auto* rung3 = ConvRegistry::instance().find("implicit_gemm_wmma", kCuda);
  ASSERT_NE(rung3, nullptr);
  for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight}) {
    const char* why = rung3->unsupported(f16_args(fits, pass));
    EXPECT_EQ(why, nullptr) << kernels::conv_pass_name(pass) << ": " << why;
  }
}

// ==================================================================================================
// correctness on the GPU
// ==================================================================================================

TEST(ConvCuda, SmallShapesEveryVariantPassAndDtype) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  for (size_t si = 0; si < kSmallShapes.size(); ++si) {
    const Shape& s = kSmallShapes[si];
    for (ConvPass pass : kPasses) {
      for (DType in : {DType::f16, DType::f32}) {
        // Every other shape's forward pass carries the bias + ReLU epilogue.
        const bool bias_relu = pass == ConvPass::forward && si % 2 == 1;
        const Problem p = make_problem(s, pass, in, bias_relu, 0.0f, seed += 10);
        run_all_variants(p, s);
      }
    }
  }
}

void run_layers(const std::vector<Shape>& layers) {
  uint64_t seed = test::fresh_seed();
  for (const Shape& s : layers) {
    for (ConvPass pass : kPasses) {
      const Problem p = make_problem(s, pass, DType::f16, pass == ConvPass::forward, 0.0f, seed += 10);
      WorstError worst;
      run_all_variants(p, s, &worst);
      std::cout << "[ info     ] " << s.name << " " << kernels::conv_pass_name(pass) << ": worst norm-wise error "
                << worst.f32 << " (f32 output), " << worst.f16 << " (f16 output)\n";
    }
  }
}

TEST(ConvCuda, LeNetLayers) {
  HL_REQUIRE_CUDA();
  run_layers({{"lenet_conv1", 128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2}, {"lenet_conv2", 128, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2}});
}

// VGG-small's 3x3 layers at batch 32 (the float64 reference of batch 128 would dominate the suite).
TEST(ConvCuda, VggSmallLayers) {
  HL_REQUIRE_CUDA();
  run_layers({{"vgg_3_64_32x32", 32, 3, 32, 32, 64, 3, 3, 1, 1, 1, 1},
              {"vgg_64_64_32x32", 32, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1},
              {"vgg_128_128_16x16", 32, 128, 16, 16, 128, 3, 3, 1, 1, 1, 1},
              {"vgg_256_256_8x8", 32, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1}});
}

// out = result + beta * out: a weight gradient accumulating into an existing one (and the same
// contract for the other passes).
TEST(ConvCuda, BetaAccumulatesIntoTheOutput) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const Shape shapes[] = {{"c3_7x9_k10_3x3_s1_p1", 2, 3, 7, 9, 10, 3, 3, 1, 1, 1, 1},
                          {"c16_12x12_k33_5x5_s2_p2", 3, 16, 12, 12, 33, 5, 5, 2, 2, 2, 2}};
  for (const Shape& s : shapes) {
    for (float beta : {1.0f, 0.5f}) {
      run_all_variants(make_problem(s, ConvPass::backward_weight, DType::f16, false, beta, seed += 10), s);
      run_all_variants(make_problem(s, ConvPass::backward_data, DType::f16, false, beta, seed += 10), s);
      run_all_variants(make_problem(s, ConvPass::forward, DType::f16, true, beta, seed += 10), s);
    }
  }
}

// The forward epilogue: + bias, then ReLU, which clamps negatives but lets NaN through (an overflow
// must stay visible to the loss scaler).
TEST(ConvCuda, BiasReluEpilogueLetsNaNThrough) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  const Shape s{"c3_9x9_k20_3x3_s1_p1", 2, 3, 9, 9, 20, 3, 3, 1, 1, 1, 1};
  Problem p = make_problem(s, ConvPass::forward, DType::f16, true, 0.0f, seed);
  // A NaN input poisons every output whose window covers it, in every channel.
  p.x[(1 * s.C + 2) * s.H * s.W + 4 * s.W + 5] = kNaN;  // image 1, channel 2, (4, 5)
  p.ref = run_reference(p, false);
  p.absref = run_reference(p, true);
  size_t nan_refs = 0, zero_refs = 0;
  for (double r : p.ref) {
    nan_refs += std::isnan(r);
    zero_refs += r == 0.0;
  }
  ASSERT_EQ(nan_refs, static_cast<size_t>(s.K * 9)) << "3x3 window, pad 1: 9 positions per channel";
  ASSERT_GT(zero_refs, p.ref.size() / 4) << "ReLU should clamp a good share of random outputs";
  run_all_variants(p, s);
}

// Shapes whose channel counts are multiples of 32 (rung 4's own, and rung 4b's too).
const std::vector<Shape> kNhwcShapes = {{"c32_7x9_k32_3x3_p1", 2, 32, 7, 9, 32, 3, 3, 1, 1, 1, 1},
                                        {"c64_9x7_k160_3x3_p0", 1, 64, 9, 7, 160, 3, 3, 1, 1, 0, 0},
                                        {"c32_11x6_k64_5x5_p2", 2, 32, 11, 6, 64, 5, 5, 1, 1, 2, 2},
                                        {"c96_5x5_k32_1x1_p0", 3, 96, 5, 5, 32, 1, 1, 1, 1, 0, 0},
                                        {"c32_9x8_k96_3x5_p1x2", 2, 32, 9, 8, 96, 3, 5, 1, 1, 1, 2},
                                        {"c160_6x6_k64_3x3_p1", 2, 160, 6, 6, 64, 3, 3, 1, 1, 1, 1},
                                        {"c32_13x13_k64_3x3_s2_p1", 2, 32, 13, 13, 64, 3, 3, 2, 2, 1, 1}};

// Rung 4 (implicit_gemm_nhwc) computes itself only where the gathered channel count is a multiple of
// 32 (and backward_data has stride 1); the small shapes above mostly send it to rung 3. These are its
// own: several row tiles (K or C above 128), several column tiles with a partial last one, odd H/W,
// padding 0/1/2, strides 1 and 2 forward, kernels 1/3/5 and 3x5, with beta, the bias + ReLU epilogue
// and both output dtypes (the shapes of its CPU emulation, tests/kernels/test_conv_nhwc_index.cpp).
TEST(ConvCuda, NhwcRungOnTheShapesItComputesItself) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const std::vector<Shape>& shapes = kNhwcShapes;
  // A call handed to rung 3 would pass too (same results): count the calls rung 4 computed itself.
  // The stride-2 shape's backward_data is the one call here that rung 4 hands on by design (its
  // backward_data is the stride-1 transposed convolution only): the count must then stay put, which
  // checks the hand-off too. (The first GPU run, 2026-11-26, found this test expecting otherwise.)
  const bool own = runtime::cuda_compute_capability() >= 80;
  for (const Shape& s : shapes) {
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data}) {
      const bool handed_on = pass == ConvPass::backward_data && (s.sh != 1 || s.sw != 1);
      for (float beta : {0.0f, 1.0f}) {
        const Problem p = make_problem(s, pass, DType::f16, pass == ConvPass::forward, beta, seed += 10);
        for (DType out : {DType::f16, DType::f32}) {
          const std::string what =
              describe(s, pass, DType::f16, out, "implicit_gemm_nhwc") + (beta != 0.0f ? " beta" : "");
          const int64_t before = kernels::cuda::nhwc::calls_computed().load();
          check(p, run_cuda(p, "implicit_gemm_nhwc", out), "implicit_gemm_nhwc", out, what);
          if (own) {
            EXPECT_EQ(kernels::cuda::nhwc::calls_computed().load(), before + (handed_on ? 0 : 1))
                << what << (handed_on ? ": computed, not handed on to rung 3" : ": handed on");
          }
        }
      }
    }
  }
}

// Rung 4b (implicit_gemm_nhwc_wgrad) computes backward_weight itself where C and K are multiples of 8;
// the small shapes above (run through every variant) mostly hand it on. These are its own, the shapes
// of its CPU emulation (tests/kernels/test_conv_nhwc_wgrad_index.cpp): several row and column tiles
// with partial last ones, columns straddling filter taps (C = 8, 24, 40), odd H/W, padding 0/1/2,
// strides 1 and 2 (and unequal), kernels 1/3/5 and 3x5, reductions split into many slices with a
// short last one; with beta and both output dtypes. It must also have computed each of them itself.
TEST(ConvCuda, NhwcWgradRungOnTheShapesItComputesItself) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  std::vector<Shape> shapes = kNhwcShapes;
  shapes.insert(shapes.end(), {{"c64_10x9_k32_5x5_s2x1_p2x0", 1, 64, 10, 9, 32, 5, 5, 2, 1, 2, 0},
                               {"c8_10x10_k24_3x3_p1", 2, 8, 10, 10, 24, 3, 3, 1, 1, 1, 1},
                               {"c24_7x5_k8_5x5_s1x2_p2x1", 3, 24, 7, 5, 8, 5, 5, 1, 2, 2, 1},
                               {"c40_6x6_k136_3x3_p1", 4, 40, 6, 6, 136, 3, 3, 1, 1, 1, 1},
                               {"n4_c16_32x32_k16_3x3_p1", 4, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1},
                               {"n9_c8_13x11_k8_3x3_p1", 9, 8, 13, 11, 8, 3, 3, 1, 1, 1, 1},
                               {"vgg_256_256_8x8", 8, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1}});
  const bool own = runtime::cuda_compute_capability() >= 80;
  for (const Shape& s : shapes) {
    for (float beta : {0.0f, 1.0f}) {
      const Problem p = make_problem(s, ConvPass::backward_weight, DType::f16, false, beta, seed += 10);
      for (DType out : {DType::f16, DType::f32}) {
        const std::string what = describe(s, ConvPass::backward_weight, DType::f16, out, "implicit_gemm_nhwc_wgrad") +
                                 (beta != 0.0f ? " beta" : "");
        const int64_t before = kernels::cuda::nhwc_wgrad::calls_computed().load();
        check(p, run_cuda(p, "implicit_gemm_nhwc_wgrad", out), "implicit_gemm_nhwc_wgrad", out, what);
        if (own) {
          EXPECT_EQ(kernels::cuda::nhwc_wgrad::calls_computed().load(), before + 1) << what << ": handed on";
        }
      }
    }
  }
}

// The tiled layout change (nchw_to_nhwc_tiled_kernel, opt-in: written 2026-11-28 without a GPU) copies
// the same halves into the same NHWC buffer as the per-element copy, so rungs 4 and 4b must give the
// same bits with either, on every pass they compute themselves (each call is checked to have been
// computed by the rung, not handed on, or the copy would not have run).
void expect_tiled_layout_change_gives_the_same_bits(const std::vector<Shape>& shapes) {
  uint64_t seed = test::fresh_seed();
  for (const Shape& s : shapes) {
    for (ConvPass pass : kPasses) {
      const bool rung4b = pass == ConvPass::backward_weight;
      if (!rung4b && (s.C % 32 != 0 || s.K % 32 != 0)) continue;  // rung 4 hands these on
      if (pass == ConvPass::backward_data && (s.sh != 1 || s.sw != 1)) continue;
      const std::string variant = rung4b ? "implicit_gemm_nhwc_wgrad" : "implicit_gemm_nhwc";
      const Problem p = make_problem(s, pass, DType::f16, pass == ConvPass::forward, 0.0f, seed += 10);
      const std::string what = describe(s, pass, DType::f16, DType::f16, variant) + ", tiled layout change";
      const auto computed = [&] {
        return rung4b ? kernels::cuda::nhwc_wgrad::calls_computed().load() : kernels::cuda::nhwc::calls_computed().load();
      };
      std::vector<double> per_element, tiled;
      {
        kernels::cuda::nhwc::ScopedTiledLayoutChange off(false);
        per_element = run_cuda(p, variant, DType::f16);
      }
      const int64_t before = computed();
      {
        kernels::cuda::nhwc::ScopedTiledLayoutChange on(true);
        tiled = run_cuda(p, variant, DType::f16);
      }
      EXPECT_EQ(computed(), before + 1) << what << ": handed on, so the copy did not run";
      check(p, tiled, variant, DType::f16, what);
      ASSERT_EQ(tiled.size(), per_element.size()) << what;
      size_t differ = 0, first = 0;
      for (size_t i = 0; i < tiled.size(); ++i)
        if (std::memcmp(&tiled[i], &per_element[i], sizeof(double)) != 0 && differ++ == 0) first = i;
      EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << tiled.size()
                            << " elements differ from the per-element copy's, the first [" << first
                            << "]: " << std::setprecision(10) << tiled[first] << " vs " << per_element[first];
    }
  }
}

// Rung 4's own shapes and one of 4b's: partial tiles of channels and pixels (C = 32, 40, 64, 96, 160;
// H*W = 25 to 169). Small enough for racecheck (`short` runs it there).
TEST(ConvCuda, TiledLayoutChangeGivesTheSameBits) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() < 80) GTEST_SKIP() << "rungs 4 and 4b compute on compute capability 8.0+";
  std::vector<Shape> shapes = kNhwcShapes;
  shapes.push_back({"c40_6x6_k136_3x3_p1", 4, 40, 6, 6, 136, 3, 3, 1, 1, 1, 1});
  expect_tiled_layout_change_gives_the_same_bits(shapes);
}

// The VGG-small layers at a small batch, and more images than a grid's z holds (65537 one-pixel
// images of 32 channels: the kernel's loop over images).
TEST(ConvCuda, TiledLayoutChangeOnVggLayersAndPastTheGridsImages) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() < 80) GTEST_SKIP() << "rungs 4 and 4b compute on compute capability 8.0+";
  expect_tiled_layout_change_gives_the_same_bits({{"vgg_64_64_32x32", 2, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1},
                                                  {"vgg_256_256_8x8", 8, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1},
                                                  {"n65537_c32_1x1_k32", 65537, 32, 1, 1, 32, 1, 1, 1, 1, 0, 0}});
}

// Rung 3b (implicit_gemm_table) changes only where rung 3's loaders get each tap's offsets (read from a
// table instead of computed in the loop): they put the same values into the same shared-memory tiles,
// K step by K step, the warps run the same WMMA sequence on them, and the epilogue does the same
// arithmetic per element (kernels/cuda/conv/implicit_gemm_wmma.cu).
// So its output must equal rung 3's bit for bit, a much tighter check than the rung tolerance above:
// a table entry pointing one element off shows here even where the norm-wise error would hide it.
// backward_weight and strided backward_data run rung 3's own kernels in both variants.
TEST(ConvCuda, TapTableIsBitIdenticalToRung3) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  std::vector<Shape> shapes = kSmallShapes;
  shapes.push_back({"vgg_64_64_16x16", 8, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1});
  shapes.push_back({"lenet_conv2", 8, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2});
  for (const Shape& s : shapes) {
    for (ConvPass pass : kPasses) {
      for (float beta : {0.0f, 1.0f}) {
        const Problem p = make_problem(s, pass, DType::f16, pass == ConvPass::forward, beta, seed += 10);
        for (DType out : {DType::f16, DType::f32}) {
          const std::string what =
              describe(s, pass, DType::f16, out, "implicit_gemm_table") + (beta != 0.0f ? " beta" : "");
          const std::vector<double> rung3 = run_cuda(p, "implicit_gemm_wmma", out);
          const std::vector<double> table = run_cuda(p, "implicit_gemm_table", out);
          ASSERT_EQ(table.size(), rung3.size()) << what;
          size_t differ = 0, first = 0;
          for (size_t i = 0; i < table.size(); ++i)
            if (std::memcmp(&table[i], &rung3[i], sizeof(double)) != 0 && differ++ == 0) first = i;
          EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << table.size()
                                << " elements differ from implicit_gemm_wmma's, the first [" << first << "]: "
                                << std::setprecision(10) << table[first] << " vs " << rung3[first];
        }
      }
    }
  }
}

// im2col_gemm processes the batch in chunks when X_col would exceed its workspace budget; a small
// budget forces several chunks, including the FP32 accumulation of an FP16 weight gradient.
TEST(ConvCuda, Im2colGemmChunksTheBatch) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const Shape s{"c8_12x10_k24_3x3_s1_p1", 7, 8, 12, 10, 24, 3, 3, 1, 1, 1, 1};
  // One image adds 120 positions x (72 X_col halves + 24 FP32 results) = 28.8 kB to the forward
  // pass's workspace, 40.3 kB to backward_data's, 23 kB to backward_weight's: 100 kB gives chunks of
  // 3 + 3 + 1, 2 + 2 + 2 + 1 and 4 + 3 images.
  ASSERT_EQ(setenv("HALFLING_IM2COL_WORKSPACE_BYTES", "100000", 1), 0);
  for (ConvPass pass : kPasses) {
    for (float beta : {0.0f, 1.0f}) {
      const Problem p = make_problem(s, pass, DType::f16, pass == ConvPass::forward, beta, seed += 10);
      for (DType out : {DType::f16, DType::f32})
        check(p, run_cuda(p, "im2col_gemm", out), "im2col_gemm", out,
              describe(s, pass, DType::f16, out, "im2col_gemm") + " (chunked)" + (beta != 0.0f ? " beta" : ""));
    }
  }
  unsetenv("HALFLING_IM2COL_WORKSPACE_BYTES");
}

}  // namespace
}  // namespace hl
