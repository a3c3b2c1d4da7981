// Every CPU convolution variant in the registry (kernels/conv.h), all three passes, against the
// float64 reference of tests/kernels/conv_reference.h computed from the same (already rounded)
// inputs. A variant added to the registry is tested here without a line of change.
//
// Checks: fresh random data every run (seed printed; HALFLING_TEST_SEED replays it); the output
// poisoned with NaN when beta == 0 (a variant that reads it shows NaN); every element within the
// floating-point error bound (terms + 8) * u * sum|terms| of the accumulation plus one rounding of
// the output (f16: 2^-11 relative, the "rounded once" of paper §3.3), which cannot fail by bad luck;
// and the norm-wise relative error of DESIGN.md §6.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <omp.h>

#include "kernels/conv.h"
#include "kernels/error.h"
#include "tests/kernels/conv_reference.h"
#include "tests/test_util.h"

namespace hl::kernels {
namespace {

using test::ConvShape;
using test::TypedBuffer;

struct DtypeCase {
  DType in, out;
};
constexpr DtypeCase kDtypes[] = {
    {DType::f32, DType::f32}, {DType::f16, DType::f16}, {DType::f16, DType::f32}, {DType::f64, DType::f64}};

struct EpilogueCase {
  const char* name;
  float beta;
  bool bias, relu;  // forward only
};
// beta_bias_relu: beta is added before the ReLU (conv.h), a path of its own in the epilogue.
constexpr EpilogueCase kEpilogues[] = {{"plain", 0.0f, false, false},
                                       {"beta", 0.75f, false, false},
                                       {"bias_relu", 0.0f, true, true},
                                       {"beta_bias_relu", 0.75f, true, true}};

// Runs `variant` on one problem and, when `check`, checks every element against the reference. Returns
// the output's bytes (empty for an epilogue the pass does not have).
std::vector<unsigned char> check_case(const std::string& variant, DeviceType dev, const ConvShape& shape,
                                      ConvPass pass, DtypeCase dt, const EpilogueCase& ep, uint64_t seed,
                                      bool check = true) {
  if (pass != ConvPass::forward && (ep.bias || ep.relu)) return {};
  ConvArgs a = shape.args();
  a.device = dev;
  a.pass = pass;
  a.in_type = dt.in;
  a.out_type = dt.out;
  a.beta = ep.beta;
  const int64_t P = a.P(), Q = a.Q();
  const auto xv = test::random_values(static_cast<size_t>(a.N * a.C * a.H * a.W), seed, -1, 1, dt.in);
  const auto wv = test::random_values(static_cast<size_t>(a.K * a.C * a.R * a.S), seed + 1, -1, 1, dt.in);
  const auto dyv = test::random_values(static_cast<size_t>(a.N * a.K * P * Q), seed + 2, -1, 1, dt.in);
  const auto bv = test::random_values(static_cast<size_t>(a.K), seed + 3, -1, 1, DType::f32);
  const size_t n_out = static_cast<size_t>(pass == ConvPass::forward         ? a.N * a.K * P * Q
                                            : pass == ConvPass::backward_data ? a.N * a.C * a.H * a.W
                                                                              : a.K * a.C * a.R * a.S);
  const auto old = test::random_values(n_out, seed + 4, -1, 1, dt.out);

  TypedBuffer x(dt.in, xv.size()), w(dt.in, wv.size()), dy(dt.in, dyv.size()), bias(DType::f32, bv.size());
  x.set_all(xv), w.set_all(wv), dy.set_all(dyv), bias.set_all(bv);
  TypedBuffer out(dt.out, n_out);
  if (ep.beta == 0.0f) {
    out.fill_nan();  // beta == 0: the output must not be read
  } else {
    out.set_all(old);
  }
  a.x = x.data(), a.w = w.data(), a.dy = dy.data();
  switch (pass) {
    case ConvPass::forward: a.y = out.data(); break;
    case ConvPass::backward_data: a.dx = out.data(); break;
    case ConvPass::backward_weight: a.dw = out.data(); break;
  }
  if (ep.bias) a.bias = bias.data();
  a.relu = ep.relu;
  conv2d(a, variant);
  if (!check) return out.bytes();

  const test::ConvRef ref = test::conv_reference(a, pass, xv, wv, dyv);
  const double u = dt.in == DType::f64 ? 0x1p-53 : 0x1p-24;
  // One rounding of the output on the store: f16 keeps 11 significant bits (and subnormals below
  // 2^-14 are spaced 2^-24 apart), f32 24.
  const double out_u = dt.out == DType::f16 ? 0x1p-11 : dt.out == DType::f32 ? 0x1p-24 : 0x1p-53;
  const int64_t PQ = P * Q;
  std::vector<double> got(ref.value.size()), want(ref.value.size());
  for (size_t i = 0; i < ref.value.size(); ++i) {
    double v = ref.value[i], mag = ref.magnitude[i];
    if (ep.beta != 0.0f) v += ep.beta * old[i], mag += std::fabs(ep.beta * old[i]);
    if (ep.bias) {
      const double b = bv[(i / static_cast<size_t>(PQ)) % static_cast<size_t>(a.K)];
      v += b, mag += std::fabs(b);
    }
    if (ep.relu && v < 0) v = 0;
    want[i] = v;
    got[i] = out.get(i);
    const double tol = static_cast<double>(ref.terms + 8) * u * mag + out_u * std::fabs(v) +
                       (dt.out == DType::f16 ? 0x1p-25 : 0.0);
    // Near zero a ReLU may clamp a value the reference puts just above 0 (or the other way round).
    if (!(std::isfinite(got[i]) && std::fabs(got[i] - v) <= tol + (ep.relu ? tol : 0.0))) {
      ADD_FAILURE() << variant << " " << a.describe() << " element " << i << ": got " << got[i] << ", want " << v
                    << " (tolerance " << tol << ", seed " << seed << ")";
      return out.bytes();  // one element is enough to show; the callers stop at the first failure
    }
  }
  // Norm-wise (DESIGN.md §6): f32 accumulation lands near 1e-7..1e-6; an f16 output adds 2^-11.
  const double norm_tol = dt.out == DType::f16 ? 1e-3 : dt.in == DType::f64 ? 1e-13 : 1e-5;
  EXPECT_LE(test::rel_error(got, want), norm_tol) << variant << " " << a.describe();
  return out.bytes();
}

class ConvCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvCpu, AllPassesShapesDtypesEpilogues) {
  const uint64_t seed = test::fresh_seed();
  for (const ConvShape& s : test::conv_test_shapes())
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight})
      for (const DtypeCase& dt : kDtypes)
        for (const EpilogueCase& ep : kEpilogues) {
          SCOPED_TRACE(s.str() + " " + conv_pass_name(pass) + " " + dtype_name(dt.in) + "->" + dtype_name(dt.out) +
                       " " + ep.name);
          check_case(GetParam(), DeviceType::cpu, s, pass, dt, ep, seed);
          if (HasFailure()) return;
        }
}

std::vector<std::string> cpu_variants() { return ConvRegistry::instance().names(DeviceType::cpu); }

INSTANTIATE_TEST_SUITE_P(Variants, ConvCpu, ::testing::ValuesIn(cpu_variants()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(ConvCpuRegistry, ReferenceAndIm2colAreRegisteredAndIm2colIsTheDefault) {
  const auto names = cpu_variants();
  EXPECT_NE(std::find(names.begin(), names.end(), "reference"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "im2col"), names.end());
  ConvArgs a = ConvShape{1, 1, 5, 5, 2, 3, 3, 1, 1, 0, 0}.args();
  EXPECT_EQ(ConvRegistry::instance().select(a).name, "im2col");
}

// Each CPU variant declines an integer type on either side alone, and takes every float pair. conv()
// refuses i32 before it asks (kernels/conv.cpp), so only the variants' own answers can show this.
TEST(ConvCpuRegistry, VariantsDeclineAnIntegerOnEitherSide) {
  ConvArgs a = ConvShape{1, 1, 5, 5, 2, 3, 3, 1, 1, 0, 0}.args();
  for (const std::string& name : cpu_variants()) {
    const auto* v = ConvRegistry::instance().find(name, DeviceType::cpu);
    ASSERT_NE(v, nullptr) << name;
    ASSERT_NE(v->unsupported, nullptr) << name;
    for (const DtypeCase& dt : kDtypes) {
      a.in_type = dt.in;
      a.out_type = dt.out;
      EXPECT_EQ(v->unsupported(a), nullptr) << name;
    }
    for (const DtypeCase& dt : {DtypeCase{DType::f16, DType::i32}, DtypeCase{DType::i32, DType::f32},
                                DtypeCase{DType::i32, DType::i32}}) {
      a.in_type = dt.in;
      a.out_type = dt.out;
      const char* why = v->unsupported(a);
      ASSERT_NE(why, nullptr) << name << " " << dtype_name(dt.in) << " -> " << dtype_name(dt.out);
      EXPECT_STREQ(why, "the CPU computes f16, f32 and f64 only") << name;
    }
  }
}

// im2col and col2im copy the valid interior of each row as one run and fill only the padding with
// zeros, from a column range [q0, q1) computed per tap (kernels/cpu/conv_cpu.cpp, valid_q). These
// shapes put that range at its edges: padding as wide as the kernel (whole rows and columns of
// zeros, an empty interior for some taps), stride 3 with a ragged end, a 1-wide kernel with padding,
// and 1-wide inputs. Every pass, dtype and epilogue, against the float64 reference.
TEST(ConvCpuRegistry, Im2colRowRangeEdgesMatchReference) {
  const uint64_t seed = test::fresh_seed();
  const ConvShape shapes[] = {
      {2, 2, 4, 5, 3, 3, 3, 1, 1, 3, 3},  // padding 3 >= kernel 3: some taps see only zeros
      {1, 3, 10, 11, 4, 3, 4, 3, 3, 1, 2},  // stride 3, (W + 2*pad - S) not a multiple of the stride
      {2, 2, 5, 6, 3, 1, 1, 1, 2, 1, 1},    // 1x1 kernel with padding: border outputs are all zeros
      {1, 2, 7, 1, 3, 3, 1, 2, 1, 1, 0},    // W = 1, stride 2 along H only
      {2, 1, 1, 9, 2, 1, 5, 1, 2, 0, 4},    // H = 1, padding 4 with a 5-wide kernel, stride 2
  };
  for (const ConvShape& s : shapes)
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight})
      for (const DtypeCase& dt : kDtypes)
        for (const EpilogueCase& ep : kEpilogues) {
          SCOPED_TRACE(s.str() + " " + conv_pass_name(pass) + " " + dtype_name(dt.in) + "->" + dtype_name(dt.out) +
                       " " + ep.name);
          check_case("im2col", DeviceType::cpu, s, pass, dt, ep, seed);
          if (HasFailure()) return;
        }
}

// The im2col variant processes images in chunks (to bound its unfolded buffer): a problem larger than
// one chunk must give the same answer as the reference. Backward weight accumulates across chunks.
TEST(ConvCpuRegistry, Im2colAcrossChunksMatchesReference) {
  const uint64_t seed = test::fresh_seed();
  // C*R*S*P*Q = 64*9*32*32 = 589824 per image, more than one 128K-element chunk: 9 images, 9 chunks.
  // LeNet's first layer: 1*25*28*28 = 19600 per image, 6 images per chunk: 13 images = 6 + 6 + 1.
  const ConvShape shapes[] = {{9, 64, 32, 32, 3, 3, 3, 1, 1, 1, 1}, {13, 1, 28, 28, 8, 5, 5, 1, 1, 2, 2}};
  for (const ConvShape& s : shapes) {
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight}) {
      ConvArgs a = s.args();
      a.pass = pass;
      const int64_t nx = a.N * a.C * a.H * a.W, nw = a.K * a.C * a.R * a.S, ny = a.N * a.K * a.P() * a.Q();
      TypedBuffer x(DType::f32, nx), w(DType::f32, nw), dy(DType::f32, ny);
      x.set_all(test::random_values(nx, seed, -1, 1, DType::f32));
      w.set_all(test::random_values(nw, seed + 1, -1, 1, DType::f32));
      dy.set_all(test::random_values(ny, seed + 2, -1, 1, DType::f32));
      const size_t n_out = pass == ConvPass::forward ? ny : pass == ConvPass::backward_data ? nx : nw;
      TypedBuffer o1(DType::f32, n_out), o2(DType::f32, n_out);
      o1.fill_nan(), o2.fill_nan();
      a.x = x.data(), a.w = w.data(), a.dy = dy.data();
      for (auto [buf, name] : {std::pair{&o1, "reference"}, std::pair{&o2, "im2col"}}) {
        a.y = a.dx = a.dw = buf->data();
        conv2d(a, name);
      }
      // Both accumulate in f32, in different orders: bounded by the f32 error of up to 9*32*32 terms.
      EXPECT_LE(test::rel_error(o2.values(), o1.values()), 1e-5)
          << s.str() << " " << conv_pass_name(pass) << " seed " << seed;
    }
  }
}

// The im2col variant shares whole chunks among the threads (forward, backward data) or fixed groups
// of chunks (backward weight) when there are at least two per thread, and otherwise runs the chunks
// in turn with every thread in each GEMM (kernels/cpu/conv_cpu.cpp, "where the threads go"). Either
// way the bits must not depend on the thread count: each thread count runs every pass, dtype and
// epilogue on shapes that take each path, and must give the bytes of one thread, which are checked
// against the float64 reference.
TEST(ConvCpuRegistry, Im2colGivesTheSameBitsAtEveryThreadCount) {
  const uint64_t seed = test::fresh_seed();
  const int saved_threads = omp_get_max_threads();
  const ConvShape shapes[] = {
      {40, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2},  // 7 chunks of up to 6 images: shared at 2 and 3 threads, in turn at 4
      {391, 1, 28, 28, 2, 5, 5, 1, 1, 2, 2},  // 66 chunks; backward weight adds them in 64 groups (two of two)
      {3, 14564, 3, 3, 8, 3, 3, 1, 1, 0, 0},  // dW of 1,048,608 values: over the groups' budget, one group
  };
  const auto one_group = [](const ConvShape& s) { return s.K * s.C * s.R * s.S > (1 << 20); };
  const EpilogueCase forward_ep{"bias_relu", 0.0f, true, true}, backward_ep{"beta", 0.75f, false, false};
  for (const ConvShape& s : shapes)
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight})
      for (const DtypeCase& dt : kDtypes) {
        if (one_group(s) && pass != ConvPass::backward_weight) continue;  // the first shape covers "in turn"
        const EpilogueCase& ep = pass == ConvPass::forward ? forward_ep : backward_ep;
        SCOPED_TRACE(s.str() + " " + conv_pass_name(pass) + " " + dtype_name(dt.in) + "->" + dtype_name(dt.out) +
                     " " + ep.name);
        omp_set_num_threads(1);
        const auto one_thread = check_case("im2col", DeviceType::cpu, s, pass, dt, ep, seed);
        for (int threads : {2, 3, 4}) {
          omp_set_num_threads(threads);
          EXPECT_TRUE(check_case("im2col", DeviceType::cpu, s, pass, dt, ep, seed, false) == one_thread)
              << threads << " threads give other bits than one (seed " << seed << ")";
        }
        omp_set_num_threads(saved_threads);
        if (HasFailure()) return;
      }
}

// describe() is in every conv error and test trace: the whole problem, P and Q where they are
// defined (a kernel exactly as large as the padded input gives one row), and the epilogue.
TEST(ConvCpuRegistry, DescribeNamesTheWholeProblem) {
  ConvArgs a = ConvShape{2, 3, 1, 5, 4, 3, 3, 1, 2, 1, 1}.args();
  EXPECT_EQ(a.describe(), "conv forward N=2 C=3 H=1 W=5 K=4 R=3 S=3 stride=1x2 pad=1x1 -> P=1 Q=3 f32->f32 on cpu");
  float bias[4] = {};
  a.beta = 1.0f, a.bias = bias, a.bias_type = DType::f16, a.relu = true;
  a.in_type = DType::f16;
  EXPECT_EQ(a.describe(),
            "conv forward N=2 C=3 H=1 W=5 K=4 R=3 S=3 stride=1x2 pad=1x1 -> P=1 Q=3 f16->f32 beta=1 +bias(f16) relu "
            "on cpu");
  a.pad_h = 0;  // the 3-row kernel no longer fits: no P and Q
  a.beta = 0.0f, a.bias = nullptr, a.relu = false;
  EXPECT_EQ(a.describe(), "conv forward N=2 C=3 H=1 W=5 K=4 R=3 S=3 stride=1x2 pad=0x1 f16->f32 on cpu");
}

TEST(ConvCpuRegistry, BadArgumentsNameTheProblem) {
  TypedBuffer x(DType::f32, 100), w(DType::f32, 100), y(DType::f32, 100);
  ConvArgs a = ConvShape{1, 1, 4, 4, 1, 7, 9, 1, 1, 1, 2}.args();  // 7x9 kernel, 6x8 padded input
  a.x = x.data(), a.w = w.data(), a.y = y.data();
  try {
    conv2d(a);
    FAIL() << "a kernel larger than the padded input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv: the 7x9 kernel is larger than the padded input 6x8"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("conv forward N=1 C=1 H=4 W=4"), std::string::npos) << e.what();
  }
  a = ConvShape{1, 1, 4, 4, 1, 3, 3, 1, 1, 0, 0}.args();
  a.x = x.data(), a.w = w.data();  // no y
  EXPECT_THROW(conv2d(a), Error);
  // Each pass names the one buffer it lacks, whichever it is.
  const struct {
    ConvPass pass;
    const char* needs;
  } passes[] = {{ConvPass::forward, "forward needs x, w and y"},
                {ConvPass::backward_data, "backward_data needs dy, w and dx"},
                {ConvPass::backward_weight, "backward_weight needs x, dy and dw"}};
  for (const auto& p : passes) {
    for (int missing = 0; missing < 3; ++missing) {
      ConvArgs b = ConvShape{1, 1, 4, 4, 1, 3, 3, 1, 1, 0, 0}.args();
      b.pass = p.pass;
      b.x = x.data(), b.w = w.data(), b.y = y.data(), b.dy = y.data(), b.dx = x.data(), b.dw = w.data();
      if (p.pass == ConvPass::forward) {
        if (missing == 0) b.x = nullptr;
        if (missing == 1) b.w = nullptr;
        if (missing == 2) b.y = nullptr;
      }
      if (p.pass == ConvPass::backward_data) {
        if (missing == 0) b.dy = nullptr;
        if (missing == 1) b.w = nullptr;
        if (missing == 2) b.dx = nullptr;
      }
      if (p.pass == ConvPass::backward_weight) {
        if (missing == 0) b.x = nullptr;
        if (missing == 1) b.dy = nullptr;
        if (missing == 2) b.dw = nullptr;
      }
      try {
        conv2d(b);
        ADD_FAILURE() << p.needs << ": buffer " << missing << " missing was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(p.needs), std::string::npos) << e.what();
      }
    }
  }
  a.y = y.data();
  a.in_type = DType::f16, a.out_type = DType::f64;
  EXPECT_THROW(conv2d(a), Error);  // f64 output from f16 inputs
  a.in_type = DType::f32, a.out_type = DType::f32;
  a.stride_h = 0;
  EXPECT_THROW(conv2d(a), Error);
  a.stride_h = 1;
  a.pass = ConvPass::backward_weight;
  a.dy = y.data(), a.dw = w.data();
  a.relu = true;
  EXPECT_THROW(conv2d(a), Error);  // relu belongs to the forward pass
  a.relu = false;
  EXPECT_THROW(conv2d(a, "no_such_variant"), Error);
  EXPECT_NO_THROW(conv2d(a, "reference"));
}

// Each of validate()'s checks (kernels/conv.cpp) alone, at its edge, with the message it gives. A
// valid 1x1x4x4 problem with a 3x3 kernel is broken one field at a time.
TEST(ConvCpuRegistry, EachCheckAloneAtItsEdge) {
  TypedBuffer x(DType::f32, 400), w(DType::f32, 400), y(DType::f32, 400), b(DType::f32, 4);
  const auto base = [&] {
    ConvArgs a = ConvShape{1, 1, 4, 4, 1, 3, 3, 1, 1, 0, 0}.args();
    a.x = x.data(), a.w = w.data(), a.y = y.data();
    return a;
  };
  const auto error = [](const ConvArgs& a) { return test::error_of([&] { conv2d(a); }); };
  const auto expect_refused = [&](const ConvArgs& a, const std::string& what) {
    EXPECT_EQ(error(a), detail::concat("conv: ", what, " (", a.describe(), ")"));
  };
  EXPECT_EQ(error(base()), "(no error)");
  for (int side = 0; side < 4; ++side) {
    ConvArgs a = base();
    (side == 0 ? a.N : side == 1 ? a.C : side == 2 ? a.H : a.W) = 0;
    expect_refused(a, detail::concat("input sizes must be >= 1, got N=", a.N, " C=", a.C, " H=", a.H, " W=", a.W));
  }
  for (int side = 0; side < 3; ++side) {
    ConvArgs a = base();
    (side == 0 ? a.K : side == 1 ? a.R : a.S) = 0;
    expect_refused(a, detail::concat("filter sizes must be >= 1, got K=", a.K, " R=", a.R, " S=", a.S));
  }
  ConvArgs a = base();
  a.stride_w = 0;
  expect_refused(a, "strides must be >= 1, got 1x0");
  a = base();
  a.stride_h = 0;
  expect_refused(a, "strides must be >= 1, got 0x1");
  a = base();
  a.pad_h = -1;
  expect_refused(a, "padding must be >= 0, got -1x0");
  a = base();
  a.pad_w = -1;
  expect_refused(a, "padding must be >= 0, got 0x-1");
  // The kernel against the padded input, each side alone: 9 rows or columns do not fit in 4 + 2 * 2,
  // and exactly 8 do.
  a = base();
  a.R = 9, a.pad_h = 2;
  expect_refused(a, "the 9x3 kernel is larger than the padded input 8x4");
  a.R = 8;
  EXPECT_EQ(error(a), "(no error)");
  a = base();
  a.S = 9, a.pad_w = 2;
  expect_refused(a, "the 3x9 kernel is larger than the padded input 4x8");
  a.S = 8;
  EXPECT_EQ(error(a), "(no error)");
  // A bias of a dtype that is not floating; without a bias, bias_type is never read.
  a = base();
  a.bias = b.data(), a.bias_type = DType::i32;
  expect_refused(a, "bias must be f16, f32 or f64, got i32");
  a.bias = nullptr;
  EXPECT_EQ(error(a), "(no error)");
}

// describe() gives P and Q exactly when the kernel fits the padded input and the strides are valid:
// at the edge (a kernel as wide as the padded input, one output column) and with a stride of 1.
TEST(ConvCpuRegistry, DescribeGivesTheOutputSizeExactlyWhenItIsDefined) {
  ConvArgs a = ConvShape{1, 1, 4, 4, 1, 3, 8, 1, 1, 0, 2}.args();
  EXPECT_EQ(a.describe(), "conv forward N=1 C=1 H=4 W=4 K=1 R=3 S=8 stride=1x1 pad=0x2 -> P=2 Q=1 f32->f32 on cpu");
  a.S = 9;  // one column too many
  EXPECT_EQ(a.describe(), "conv forward N=1 C=1 H=4 W=4 K=1 R=3 S=9 stride=1x1 pad=0x2 f32->f32 on cpu");
  a = ConvShape{1, 1, 4, 4, 1, 8, 3, 1, 1, 2, 0}.args();
  EXPECT_EQ(a.describe(), "conv forward N=1 C=1 H=4 W=4 K=1 R=8 S=3 stride=1x1 pad=2x0 -> P=1 Q=2 f32->f32 on cpu");
  a.R = 9;  // one row too many
  EXPECT_EQ(a.describe(), "conv forward N=1 C=1 H=4 W=4 K=1 R=9 S=3 stride=1x1 pad=2x0 f32->f32 on cpu");
  a.R = 3, a.stride_w = 0;
  EXPECT_EQ(a.describe(), "conv forward N=1 C=1 H=4 W=4 K=1 R=3 S=3 stride=1x0 pad=2x0 f32->f32 on cpu");
}

}  // namespace
}  // namespace hl::kernels
