// The CUDA kernels of convolutional networks against the CPU: every CUDA convolution variant in the
// registry (all three passes) against the float64 reference of tests/kernels/conv_reference.h, and
// the CUDA pooling, batch-norm and dropout kernels against their CPU references (kernels/cpu/).
// Every output is poisoned with NaN before the kernel runs and every element is checked. Skips
// without a GPU (HL_REQUIRE_CUDA).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/dropout.h"
#include "kernels/pool.h"
#include "kernels/runtime.h"
#include "tests/kernels/conv_reference.h"
#include "tests/test_util.h"

namespace hl::kernels {
namespace {

using test::ConvShape;
using test::TypedBuffer;

// Device copy of a host TypedBuffer.
class DevCopy {
 public:
  explicit DevCopy(const TypedBuffer& host) : bytes_(host.nbytes()), ptr_(runtime::cuda_malloc(bytes_ ? bytes_ : 1)) {
    upload(host);
  }
  ~DevCopy() { runtime::cuda_free(ptr_); }
  DevCopy(const DevCopy&) = delete;
  DevCopy& operator=(const DevCopy&) = delete;
  void* get() const { return ptr_; }
  void upload(const TypedBuffer& host) {
    runtime::cuda_memcpy_async(ptr_, host.data(), bytes_, runtime::CopyKind::host_to_device);
    runtime::cuda_synchronize();
  }
  void download(TypedBuffer& host) const {
    runtime::cuda_memcpy_async(host.data(), ptr_, bytes_, runtime::CopyKind::device_to_host);
    runtime::cuda_synchronize();
  }

 private:
  size_t bytes_;
  void* ptr_;
};

TypedBuffer random_buffer(DType t, size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  TypedBuffer b(t, n);
  b.set_all(test::random_values(n, seed, lo, hi, t));
  return b;
}

TypedBuffer poisoned(DType t, size_t n) {
  TypedBuffer b(t, n);
  b.fill_nan();
  return b;
}

// Every element of got within tol(i) of want (NaN where want is NaN).
template <class Tol>
void expect_close(const std::vector<double>& got, const std::vector<double>& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i]) ? std::isnan(got[i])
                                        : std::isfinite(got[i]) && std::fabs(got[i] - want[i]) <= tol(i);
    if (!ok && bad++ < 5)
      first += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " wrong" << first;
}

// ---- convolution: every CUDA variant, all passes ----

struct DtypeCase {
  DType in, out;
};

void check_cuda_conv(const std::string& variant, const ConvShape& s, ConvPass pass, DtypeCase dt, float beta,
                     bool bias_relu, uint64_t seed) {
  ConvArgs a = s.args();
  a.device = DeviceType::cuda;
  a.pass = pass;
  a.in_type = dt.in, a.out_type = dt.out;
  a.beta = beta;
  const int64_t P = a.P(), Q = a.Q(), PQ = P * Q;
  const TypedBuffer x = random_buffer(dt.in, a.N * a.C * a.H * a.W, seed);
  const TypedBuffer w = random_buffer(dt.in, a.K * a.C * a.R * a.S, seed + 1);
  const TypedBuffer dy = random_buffer(dt.in, a.N * a.K * PQ, seed + 2);
  const TypedBuffer bias = random_buffer(DType::f32, a.K, seed + 3);
  const test::ConvRef ref = test::conv_reference(a, pass, x.values(), w.values(), dy.values());
  const TypedBuffer old = random_buffer(dt.out, ref.value.size(), seed + 4);
  TypedBuffer out = beta == 0.0f ? poisoned(dt.out, ref.value.size()) : old;

  DevCopy dx_(x), dw_(w), ddy(dy), dbias(bias), dout(out);
  a.x = dx_.get(), a.w = dw_.get(), a.dy = ddy.get();
  a.y = a.dx = a.dw = nullptr;
  switch (pass) {
    case ConvPass::forward: a.y = dout.get(); break;
    case ConvPass::backward_data: a.dx = dout.get(); break;
    case ConvPass::backward_weight: a.dw = dout.get(); break;
  }
  if (bias_relu) a.bias = dbias.get(), a.relu = true;
  conv2d(a, variant);
  dout.download(out);

  std::vector<double> want(ref.value.size()), tol(ref.value.size());
  const double out_u = dt.out == DType::f16 ? 0x1p-11 : 0x1p-24;
  for (size_t i = 0; i < want.size(); ++i) {
    double v = ref.value[i], mag = ref.magnitude[i];
    if (beta != 0.0f) v += beta * old.get(i), mag += std::fabs(beta * old.get(i));
    if (bias_relu) {
      const double b = bias.get((i / PQ) % a.K);
      v += b, mag += std::fabs(b);
      if (v < 0) v = 0;
    }
    want[i] = v;
    // FP32 accumulation of `terms` products in any order, then one rounding of the output (§3.3);
    // doubled for ReLU, which may clamp a value the reference puts just above zero.
    tol[i] = ((ref.terms + 8) * 0x1p-24 * mag + out_u * std::fabs(v) + (dt.out == DType::f16 ? 0x1p-25 : 0.0)) *
             (bias_relu ? 2 : 1);
  }
  expect_close(out.values(), want, [&](size_t i) { return tol[i]; }, variant + " " + a.describe());
}

TEST(CudaConv, EveryVariantAllPassesAgainstFloat64Reference) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  const auto variants = ConvRegistry::instance().names(DeviceType::cuda);
  ASSERT_FALSE(variants.empty());
  for (const std::string& v : variants)
    for (const ConvShape& s : test::conv_test_shapes())
      for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight})
        for (DtypeCase dt : {DtypeCase{DType::f32, DType::f32}, DtypeCase{DType::f16, DType::f16},
                             DtypeCase{DType::f16, DType::f32}}) {
          SCOPED_TRACE(v + " " + s.str() + " " + conv_pass_name(pass) + " " + dtype_name(dt.in) + "->" +
                       dtype_name(dt.out));
          // A variant may refuse a problem (e.g. a Tensor Core rung that needs C % 8 == 0): that is
          // reported by the registry's unsupported(), which we respect, not a failure.
          ConvArgs probe = s.args();
          probe.device = DeviceType::cuda, probe.pass = pass, probe.in_type = dt.in, probe.out_type = dt.out;
          const Variant<ConvArgs>* var = ConvRegistry::instance().find(v, DeviceType::cuda);
          if (var->unsupported != nullptr && var->unsupported(probe) != nullptr) continue;
          check_cuda_conv(v, s, pass, dt, 0.0f, false, seed);
          check_cuda_conv(v, s, pass, dt, 0.75f, false, seed + 10);
          if (pass == ConvPass::forward) check_cuda_conv(v, s, pass, dt, 0.0f, true, seed + 20);
          if (HasFailure()) return;
        }
}

// ---- pooling: CUDA vs the CPU kernels ----

struct PoolCase {
  Pool2dShape s;
};

std::vector<Pool2dShape> pool_shapes() {
  std::vector<Pool2dShape> v;
  auto add = [&](int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t st, int64_t pad) {
    Pool2dShape s;
    s.N = N, s.C = C, s.H = H, s.W = W, s.kh = s.kw = k, s.stride_h = s.stride_w = st, s.pad_h = s.pad_w = pad;
    v.push_back(s);
  };
  add(1, 1, 28, 28, 2, 2, 0);  // LeNet
  add(2, 3, 7, 9, 2, 2, 0);    // odd sizes: the last row/column is dropped
  add(2, 3, 9, 7, 3, 2, 1);    // overlapping windows with padding
  add(1, 5, 4, 4, 4, 1, 0);    // global pool of a 4x4 plane
  add(3, 2, 6, 5, 3, 1, 1);
  return v;
}

TEST(CudaPool, MaxAndAvgForwardBackwardMatchTheCpu) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  for (DType t : {DType::f32, DType::f16})
    for (const Pool2dShape& s : pool_shapes()) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " N" + std::to_string(s.N) + " C" + std::to_string(s.C) + " H" +
                   std::to_string(s.H) + " W" + std::to_string(s.W) + " k" + std::to_string(s.kh));
      const size_t nx = s.N * s.C * s.H * s.W, ny = s.N * s.C * s.P() * s.Q();
      TypedBuffer x = random_buffer(t, nx, seed);
      x.set(nx / 3, std::nan(""));  // NaN must propagate the same way on both
      const TypedBuffer dy = random_buffer(t, ny, seed + 1);
      // CPU reference.
      TypedBuffer y_cpu = poisoned(t, ny), idx_cpu = poisoned(DType::i32, ny), dx_cpu = poisoned(t, nx);
      max_pool2d_forward(DeviceType::cpu, s, x.data(), y_cpu.data(), static_cast<int32_t*>(idx_cpu.data()), t);
      max_pool2d_backward(DeviceType::cpu, s, dy.data(), static_cast<const int32_t*>(idx_cpu.data()), dx_cpu.data(), t);
      TypedBuffer ya_cpu = poisoned(t, ny), dxa_cpu = poisoned(t, nx);
      avg_pool2d_forward(DeviceType::cpu, s, x.data(), ya_cpu.data(), t);
      avg_pool2d_backward(DeviceType::cpu, s, dy.data(), dxa_cpu.data(), t);
      // GPU.
      TypedBuffer y = poisoned(t, ny), idx = poisoned(DType::i32, ny), dx = poisoned(t, nx), ya = poisoned(t, ny),
                  dxa = poisoned(t, nx);
      DevCopy gx(x), gdy(dy), gy(y), gidx(idx), gdx(dx), gya(ya), gdxa(dxa);
      max_pool2d_forward(DeviceType::cuda, s, gx.get(), gy.get(), static_cast<int32_t*>(gidx.get()), t);
      max_pool2d_backward(DeviceType::cuda, s, gdy.get(), static_cast<const int32_t*>(gidx.get()), gdx.get(), t);
      avg_pool2d_forward(DeviceType::cuda, s, gx.get(), gya.get(), t);
      avg_pool2d_backward(DeviceType::cuda, s, gdy.get(), gdxa.get(), t);
      gy.download(y), gidx.download(idx), gdx.download(dx), gya.download(ya), gdxa.download(dxa);
      // The maximum and its index are exact; the gathers sum in the same order in f32 on both.
      const double u = t == DType::f16 ? 0x1p-11 : 0x1p-23;
      expect_close(y.values(), y_cpu.values(), [](size_t) { return 0.0; }, "max forward");
      expect_close(idx.values(), idx_cpu.values(), [](size_t) { return 0.0; }, "max argmax");
      const auto dxr = dx_cpu.values(), yar = ya_cpu.values(), dxar = dxa_cpu.values();
      expect_close(dx.values(), dxr, [&](size_t i) { return u * std::fabs(dxr[i]) + 1e-7; }, "max backward");
      expect_close(ya.values(), yar, [&](size_t i) { return u * std::fabs(yar[i]) + 1e-7; }, "avg forward");
      expect_close(dxa.values(), dxar, [&](size_t i) { return u * std::fabs(dxar[i]) + 1e-7; }, "avg backward");
    }
}

// ---- batch norm: CUDA (f32 sums) vs the CPU (double sums), every registered variant ----

// Pins a batch-norm variant for the scope of a test (the registry's default is process-wide).
class PinBatchNorm {
 public:
  explicit PinBatchNorm(const std::string& name) : saved_(BatchNormRegistry::instance().default_name()) {
    BatchNormRegistry::instance().set_default(name);
  }
  ~PinBatchNorm() { BatchNormRegistry::instance().set_default(saved_); }
  PinBatchNorm(const PinBatchNorm&) = delete;
  PinBatchNorm& operator=(const PinBatchNorm&) = delete;

 private:
  std::string saved_;
};

// Train forward, backward and eval forward of `variant` against the CPU. `offset` elements of
// padding before x, y, dy and dx make their pointers misaligned for 16-byte loads (split must then
// fall back to scalar loads).
void check_batch_norm(const std::string& variant, DType t, BatchNormShape s, uint64_t seed, size_t offset = 0) {
  SCOPED_TRACE(variant + " " + std::string(dtype_name(t)) + " N" + std::to_string(s.N) + " C" + std::to_string(s.C) +
               " HW" + std::to_string(s.HW) + " offset " + std::to_string(offset));
  PinBatchNorm pin(variant);
  const size_t n = s.N * s.C * s.HW, C = s.C;
  const TypedBuffer x = random_buffer(t, n, seed, -2, 6), dy = random_buffer(t, n, seed + 1);
  const TypedBuffer gamma = random_buffer(DType::f32, C, seed + 2, 0.5, 1.5), beta = random_buffer(DType::f32, C, seed + 3);
  const TypedBuffer rm0 = random_buffer(DType::f32, C, seed + 4), rv0 = random_buffer(DType::f32, C, seed + 5, 0.5, 2);
  // CPU.
  TypedBuffer y_c = poisoned(t, n), rm_c = rm0, rv_c = rv0, sm_c = poisoned(DType::f32, C), si_c = poisoned(DType::f32, C);
  batch_norm_forward_train(DeviceType::cpu, s, x.data(), y_c.data(), t, gamma.data(), beta.data(), rm_c.data(),
                           rv_c.data(), sm_c.data(), si_c.data(), DType::f32, 0.1, 1e-5);
  TypedBuffer dx_c = poisoned(t, n), dg_c = poisoned(DType::f32, C), db_c = poisoned(DType::f32, C);
  batch_norm_backward(DeviceType::cpu, s, x.data(), dy.data(), dx_c.data(), t, gamma.data(), sm_c.data(), si_c.data(),
                      dg_c.data(), db_c.data(), DType::f32);
  TypedBuffer ye_c = poisoned(t, n);
  batch_norm_forward_eval(DeviceType::cpu, s, x.data(), ye_c.data(), t, gamma.data(), beta.data(), rm0.data(),
                          rv0.data(), DType::f32, 1e-5);
  // GPU: the activations live `offset` elements into buffers one `offset` longer.
  const auto padded = [&](const TypedBuffer& b) {
    TypedBuffer p(t, n + offset);
    p.fill_nan();
    for (size_t i = 0; i < n; ++i) p.set(offset + i, b.get(i));
    return p;
  };
  const auto unpadded = [&](const TypedBuffer& p) {
    TypedBuffer b(t, n);
    for (size_t i = 0; i < n; ++i) b.set(i, p.get(offset + i));
    return b;
  };
  TypedBuffer y = poisoned(t, n + offset), dx = poisoned(t, n + offset), ye = poisoned(t, n + offset);
  TypedBuffer sm = poisoned(DType::f32, C), si = poisoned(DType::f32, C), rm = rm0, rv = rv0;
  TypedBuffer dg = poisoned(DType::f32, C), db = poisoned(DType::f32, C);
  DevCopy gx(padded(x)), gdy(padded(dy)), gg(gamma), gb(beta), grm(rm), grv(rv), grm0(rm0), grv0(rv0), gy(y), gsm(sm),
      gsi(si), gdx(dx), gdg(dg), gdb(db), gye(ye);
  const size_t shift = offset * dtype_size(t);
  const auto at = [shift](const DevCopy& d) { return static_cast<char*>(d.get()) + shift; };
  batch_norm_forward_train(DeviceType::cuda, s, at(gx), at(gy), t, gg.get(), gb.get(), grm.get(), grv.get(), gsm.get(),
                           gsi.get(), DType::f32, 0.1, 1e-5);
  batch_norm_backward(DeviceType::cuda, s, at(gx), at(gdy), at(gdx), t, gg.get(), gsm.get(), gsi.get(), gdg.get(),
                      gdb.get(), DType::f32);
  batch_norm_forward_eval(DeviceType::cuda, s, at(gx), at(gye), t, gg.get(), gb.get(), grm0.get(), grv0.get(),
                          DType::f32, 1e-5);
  gy.download(y), gsm.download(sm), gsi.download(si), grm.download(rm), grv.download(rv), gdx.download(dx),
      gdg.download(dg), gdb.download(db), gye.download(ye);
  for (size_t i = 0; i < offset; ++i) {  // nothing written before the tensors
    EXPECT_TRUE(std::isnan(y.get(i)) && std::isnan(dx.get(i)) && std::isnan(ye.get(i))) << "padding element " << i;
  }
  // f32 sums of up to 2^16 values vs double sums: relative 1e-5 covers the f32 summation error.
  const auto rel = [](const TypedBuffer& ref, double r, double a) {
    const auto v = ref.values();
    return [v, r, a](size_t i) { return r * std::fabs(v[i]) + a; };
  };
  const double out_u = t == DType::f16 ? 0x1p-10 : 1e-5;
  expect_close(sm.values(), sm_c.values(), rel(sm_c, 1e-5, 1e-6), "save_mean");
  expect_close(si.values(), si_c.values(), rel(si_c, 1e-5, 1e-6), "save_invstd");
  expect_close(rm.values(), rm_c.values(), rel(rm_c, 1e-5, 1e-6), "running_mean");
  expect_close(rv.values(), rv_c.values(), rel(rv_c, 1e-5, 1e-6), "running_var");
  expect_close(unpadded(y).values(), y_c.values(), rel(y_c, out_u, 1e-4), "y (train)");
  expect_close(unpadded(ye).values(), ye_c.values(), rel(ye_c, out_u, 1e-5), "y (eval)");
  expect_close(db.values(), db_c.values(), rel(db_c, 1e-5, 1e-4), "dbeta");
  expect_close(dg.values(), dg_c.values(), rel(dg_c, 1e-5, 1e-4), "dgamma");
  expect_close(unpadded(dx).values(), dx_c.values(), rel(dx_c, out_u, 1e-4), "dx");
}

// Shapes: small ones (one slice per channel for split); {64, 3, 1024} splits each channel into
// slices of 16-byte vectors; {64, 2, 625} into slices of single values (625 is odd).
TEST(CudaBatchNorm, TrainEvalBackwardMatchTheCpu) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  for (const std::string& variant : BatchNormRegistry::instance().names(DeviceType::cuda))
    for (DType t : {DType::f32, DType::f16})
      for (BatchNormShape s : {BatchNormShape{4, 3, 25}, BatchNormShape{1, 5, 7}, BatchNormShape{32, 16, 64},
                               BatchNormShape{64, 3, 1024}, BatchNormShape{64, 2, 625}})
        check_batch_norm(variant, t, s, seed);
}

TEST(CudaBatchNorm, MisalignedTensorsFallBackToScalarLoads) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  for (const std::string& variant : BatchNormRegistry::instance().names(DeviceType::cuda))
    for (DType t : {DType::f32, DType::f16}) check_batch_norm(variant, t, BatchNormShape{16, 3, 64}, seed, 1);
}

// More channels than one capped grid of one-thread-per-channel blocks covers (65535 x 256 =
// 16776960): split's statistics kernels must reach the last channels too (a grid-stride loop), or
// their mean, invstd and normalization coefficients are never written. f16, 2 x 16777217 x 1 (64 MiB).
TEST(CudaBatchNorm, ChannelsPastOneGridOfThreads) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  for (const std::string& variant : BatchNormRegistry::instance().names(DeviceType::cuda))
    check_batch_norm(variant, DType::f16, BatchNormShape{2, 16777217, 1}, seed);
}

TEST(CudaBatchNorm, EveryVariantIsRegisteredAndTheSplitIsTheDefault) {
  // Runs without a GPU: the registry is filled when the library loads (CUDA builds only).
  if (!runtime::cuda_compiled()) GTEST_SKIP() << "halfling was built without CUDA";
  std::vector<std::string> names, opt_in;
  for (const auto& v : BatchNormRegistry::instance().all())
    if (v.device == DeviceType::cuda) {
      names.push_back(v.name);
      if (v.opt_in) opt_in.push_back(v.name);
    }
  EXPECT_EQ(names, (std::vector<std::string>{"split", "per_channel"})) << "highest priority first";
  // split (written 2026-11-23 without a GPU, opt-in until then) ran its tests, the sanitizers and
  // bn_bench on an H200 on 2026-11-26, about 9x faster than per_channel over VGG-small's six batch
  // norms: so nothing is opt-in, and the automatic choice is split wherever it takes the call.
  EXPECT_EQ(opt_in, std::vector<std::string>{});
}

// The registry's choice for a VGG-small batch norm, made on a GPU: split's plan asks it for its SM count.
TEST(CudaBatchNorm, TheAutomaticChoiceTakesTheSplit) {
  HL_REQUIRE_CUDA();
  if (std::getenv(BatchNormArgs::env_var) != nullptr || !BatchNormRegistry::instance().default_name().empty())
    GTEST_SKIP() << "a pinned variant (HALFLING_BN or --bn): the automatic choice is not in use";
  BatchNormArgs a;
  a.s = BatchNormShape{128, 64, 1024};
  a.t = DType::f16;
  EXPECT_EQ(BatchNormRegistry::instance().select(a).name, "split");
}

TEST(CudaBatchNorm, F16InputWithVarianceAbove65504GivesFiniteStats) {
  HL_REQUIRE_CUDA();
  for (const std::string& variant : BatchNormRegistry::instance().names(DeviceType::cuda)) {
    SCOPED_TRACE(variant);
    PinBatchNorm pin(variant);
    BatchNormShape s{2, 1, 16};
    TypedBuffer x(DType::f16, 32);
    for (size_t i = 0; i < 32; ++i) x.set(i, 30000.0 + (i % 2 ? 1024.0 : -1024.0));  // exact in f16; var 2^20
    TypedBuffer one(DType::f32, 1), zero(DType::f32, 1), y = poisoned(DType::f16, 32), sm = poisoned(DType::f32, 1),
        si = poisoned(DType::f32, 1), rm(DType::f32, 1), rv(DType::f32, 1);
    one.set(0, 1), zero.set(0, 0), rm.set(0, 0), rv.set(0, 1);
    DevCopy gx(x), gone(one), gzero(zero), gy(y), gsm(sm), gsi(si), grm(rm), grv(rv);
    batch_norm_forward_train(DeviceType::cuda, s, gx.get(), gy.get(), DType::f16, gone.get(), gzero.get(), grm.get(),
                             grv.get(), gsm.get(), gsi.get(), DType::f32, 1.0, 1e-5);
    gy.download(y), grv.download(rv), grm.download(rm);
    EXPECT_NEAR(rm.get(0), 30000.0, 1e-2);
    EXPECT_NEAR(rv.get(0), 1048576.0 * 32 / 31, 1.0);
    for (double v : y.values()) EXPECT_NEAR(std::fabs(v), 1.0, 1e-3);
  }
}

// ---- dropout: the same mask on both backends ----

TEST(CudaDropout, SameSeedSameMaskAsTheCpu) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  for (DType t : {DType::f32, DType::f16}) {
    const size_t n = 100003;  // not a multiple of the block size
    const TypedBuffer x = random_buffer(t, n, seed);
    TypedBuffer y_c = poisoned(t, n), y = poisoned(t, n), dx_c = poisoned(t, n), dx = poisoned(t, n);
    dropout_forward(DeviceType::cpu, n, x.data(), y_c.data(), t, 0.4, seed, 12345);
    dropout_backward(DeviceType::cpu, n, x.data(), dx_c.data(), t, 0.4, seed, 12345);
    DevCopy gx(x), gy(y), gdx(dx);
    dropout_forward(DeviceType::cuda, n, gx.get(), gy.get(), t, 0.4, seed, 12345);
    dropout_backward(DeviceType::cuda, n, gx.get(), gdx.get(), t, 0.4, seed, 12345);
    gy.download(y), gdx.download(dx);
    // One multiplication by the same f32 scale, rounded once: bit-identical.
    EXPECT_EQ(std::memcmp(y.data(), y_c.data(), y.nbytes()), 0) << dtype_name(t) << " forward differs from the CPU";
    EXPECT_EQ(std::memcmp(dx.data(), dx_c.data(), dx.nbytes()), 0) << dtype_name(t) << " backward differs";
    int64_t kept = 0;
    for (size_t i = 0; i < n; ++i) kept += y.get(i) != 0.0 || x.get(i) == 0.0;
    EXPECT_NEAR(static_cast<double>(kept), 0.6 * n, 6 * std::sqrt(n * 0.24));
  }
}

}  // namespace
}  // namespace hl::kernels
