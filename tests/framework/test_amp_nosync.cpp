// No host synchronization inside a training step (the loss scaler's state, the skip decision, the
// optimizer's step count and gradient clipping all stay on the device), and the semantics that this
// must not change: skipped first steps leave no trace, and the shared scaler rule reproduces the
// golden sequences. The CUDA tests compare the same flows with the CPU and skip without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/amp.h"
#include "framework/autograd.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/optim.h"
#include "kernels/optim.h"
#include "kernels/runtime.h"
#include "tests/test_util.h"

namespace {

using namespace hl;
using amp::LossScaler;
using amp::ScalerConfig;

std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor h = t.detach().to(Device::cpu);
  const uint8_t* p = static_cast<const uint8_t*>(h.data_ptr());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// Everything an optimizer's future depends on, as bytes: parameters, then its state tensors by name.
std::vector<std::pair<std::string, std::vector<uint8_t>>> fingerprint(const std::vector<Tensor>& params,
                                                                      const optim::Optimizer& opt) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  for (size_t i = 0; i < params.size(); ++i) out.emplace_back("param." + std::to_string(i), bytes(params[i]));
  for (const auto& [name, t] : opt.state().tensors) out.emplace_back(name, bytes(t));
  return out;
}

std::unique_ptr<optim::Optimizer> make_opt(const std::string& which, const std::vector<Tensor>& params, bool masters) {
  if (which == "sgd")  // dampening != 0: a momentum buffer started from zeros would differ from one started as g
    return std::make_unique<optim::SGD>(
        params, optim::SGD::Options{.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .master_weights = masters});
  auto o = optim::adamw_options(1e-2);
  o.master_weights = masters;
  return std::make_unique<optim::Adam>(params, o);
}

// A small classifier step: loss = cross_entropy(lin(x * poison), y), poison = 1 or inf.
struct Net {
  Generator init;
  nn::Linear lin;
  Tensor x, y;
  Net(uint64_t seed, DType t, Device dev) : init(seed), lin(6, 4, init) {
    x = Tensor::randn({8, 6}, init, t);
    y = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 3, 2, 1, 0}, {8});
    lin.to(dev);
    lin.to(t);
    x = x.to(dev);
    y = y.to(dev);
  }
  Tensor loss(bool overflow) { return cross_entropy(lin(overflow ? mul(x, INFINITY) : x), y); }
};

// (a) A whole scaled step reads nothing back to the host and (on CUDA) never waits for the device:
//     scale -> backward -> unscale -> clip ->
//     step -> update, clean and overflowing, for SGD and Adam, 300 steps (past the history's first
//     capacity). Then the device state really did what a step does.
void expect_no_host_reads(Device dev) {
  for (const char* which : {"sgd", "adam"}) {
    Net net(hl::test::fresh_seed(), DType::f16, dev);
    auto opt = make_opt(which, net.lin.parameters(), /*masters=*/true);
    // Interval 20 against an overflow every 37 steps: the scale grows and backs off along the run
    // but stays far from any natural overflow, so exactly the planted steps are skipped.
    LossScaler s(ScalerConfig::parse("dynamic:init=1024,interval=20"));
    std::vector<Tensor> losses;
    int64_t before = 0, syncs_before = 0;
    for (int i = -3; i < 300; ++i) {
      // Three warm-up steps first: they make the optimizer's buffers and fill the caching allocator
      // (a first cudaMalloc/cudaFree is not the step's doing). Steps 0..299 are counted.
      if (i == 0) {
        before = debug::host_reads();
        syncs_before = runtime::cuda_sync_count();
      }
      opt->zero_grad();
      Tensor loss = net.loss(/*overflow=*/i % 37 == 5);
      if (i >= 0) losses.push_back(loss);
      s.scale(loss).backward();
      s.unscale(*opt);
      opt->clip_grad_norm(0.5);
      s.step(*opt);
      s.update();
    }
    EXPECT_EQ(debug::host_reads(), before) << which << ": a training step read a value back to the host";
    EXPECT_EQ(runtime::cuda_sync_count(), syncs_before) << which << ": a training step waited for the device";
    // Reading is counted (the counter is not dead), and the steps did happen.
    EXPECT_EQ(s.skipped_steps(), 8) << which;  // i % 37 == 5 for i < 300: 5, 42, ..., 264
    EXPECT_GT(debug::host_reads(), before);
    EXPECT_EQ(opt->steps(), 303 - 8) << which;  // the warm-up steps are clean
    EXPECT_EQ(s.scale_history().size(), 303u) << which;
    EXPECT_TRUE(std::isfinite(losses.back().item())) << which;
  }
}

TEST(AmpNoSync, AScaledStepReadsNothingBackToTheHost) { expect_no_host_reads(Device::cpu); }

TEST(AmpNoSync, PlainStepWithClippingReadsNothingBackToTheHost) {
  Net net(hl::test::fresh_seed(), DType::f32, Device::cpu);
  auto opt = make_opt("adam", net.lin.parameters(), false);
  const int64_t before = debug::host_reads();
  for (int i = 0; i < 5; ++i) {
    opt->zero_grad();
    net.loss(false).backward();
    opt->clip_grad_norm(0.1);
    opt->step();
  }
  EXPECT_EQ(debug::host_reads(), before);
  EXPECT_EQ(opt->steps(), 5);
}

// (b) When the very first steps overflow, SGD's momentum buffer must still start as the gradient of
//     the first APPLIED step and Adam's bias correction must count only applied steps: the run is
//     bit-identical to an optimizer that never saw the skipped steps.
TEST(AmpNoSync, SkippedFirstStepsLeaveNoTrace) {
  for (const char* which : {"sgd", "adam"}) {
    for (bool masters : {false, true}) {
      const DType t = masters ? DType::f16 : DType::f32;
      const uint64_t seed = hl::test::fresh_seed();
      // A: two overflowing steps first (dynamic 1024 -> 512 -> 256), then three clean ones at 256.
      Net a(seed, t, Device::cpu);
      auto oa = make_opt(which, a.lin.parameters(), masters);
      LossScaler sa(ScalerConfig::parse("dynamic:init=1024"));
      // B: only the three clean steps, at the same scale 256.
      Net b(seed, t, Device::cpu);
      auto ob = make_opt(which, b.lin.parameters(), masters);
      LossScaler sb(ScalerConfig::parse("static:256"));
      for (int i = 0; i < 2; ++i) {
        oa->zero_grad();
        sa.scale(a.loss(true)).backward();
        sa.step(*oa);
        sa.update();
        ASSERT_TRUE(sa.last_step_skipped()) << which;
      }
      EXPECT_EQ(oa->steps(), 0) << which;
      EXPECT_TRUE(oa->state().tensors.size() == (masters ? 2u : 0u) + (std::string(which) == "adam" ? 4u : 0u))
          << which << ": only masters (and Adam's untouched zero moments) after skipped steps";
      EXPECT_EQ(sa.get_scale(), 256.0);
      for (int i = 0; i < 3; ++i) {
        oa->zero_grad();
        sa.scale(a.loss(false)).backward();
        sa.step(*oa);
        sa.update();
        ob->zero_grad();
        sb.scale(b.loss(false)).backward();
        sb.step(*ob);
        sb.update();
        ASSERT_FALSE(sa.last_step_skipped());
        EXPECT_EQ(fingerprint(a.lin.parameters(), *oa), fingerprint(b.lin.parameters(), *ob))
            << which << (masters ? " with masters" : "") << ", clean step " << i + 1;
      }
      EXPECT_EQ(oa->steps(), 3);
      EXPECT_EQ(oa->state().meta.at("steps"), "3");
    }
  }
}

// A skipped step between applied ones: the momentum buffer made earlier is kept as it was, and the
// applied-step count (Adam's t) does not advance.
TEST(AmpNoSync, SkipInTheMiddleMatchesARunWithoutIt) {
  for (const char* which : {"sgd", "adam"}) {
    const uint64_t seed = hl::test::fresh_seed();
    Net a(seed, DType::f32, Device::cpu), b(seed, DType::f32, Device::cpu);
    auto oa = make_opt(which, a.lin.parameters(), false), ob = make_opt(which, b.lin.parameters(), false);
    LossScaler sa(ScalerConfig::parse("dynamic:init=64,hysteresis=2")), sb(ScalerConfig::parse("static:64"));
    for (int i = 0; i < 5; ++i) {
      const bool overflow = i == 2;
      oa->zero_grad();
      sa.scale(a.loss(overflow)).backward();
      sa.step(*oa);
      sa.update();
      if (overflow) continue;
      ob->zero_grad();
      sb.scale(b.loss(false)).backward();
      sb.step(*ob);
      sb.update();
    }
    EXPECT_EQ(sa.get_scale(), 64.0);  // hysteresis 2: tolerated, not backed off
    EXPECT_EQ(fingerprint(a.lin.parameters(), *oa), fingerprint(b.lin.parameters(), *ob)) << which;
    EXPECT_EQ(oa->steps(), 4);
  }
}

// (c) The rule itself (kernels/scaler_rule.h, shared with the CUDA kernel), on its own.
struct RuleRun {
  kernels::ScalerRule rule;
  kernels::ScalerState st;
  explicit RuleRun(const std::string& spec) {
    const ScalerConfig c = ScalerConfig::parse(spec);
    rule = c.rule();
    st.scale = c.init_scale;
    st.hysteresis_left = c.hysteresis;
  }
  RuleRun& operator()(const std::string& seq) {  // 'O' overflow, 'C' clean
    for (char ch : seq) kernels::scaler_rule(rule, st, ch == 'O');
    return *this;
  }
};

TEST(AmpNoSync, SharedRuleReproducesTheGoldenSequences) {
  RuleRun d("dynamic");  // PyTorch defaults
  d("O");
  EXPECT_EQ(d.st.scale, 32768.0);
  EXPECT_EQ(d.st.skipped, 1);
  EXPECT_EQ(d.st.last_skipped, 1);
  d(std::string(1999, 'C'));
  EXPECT_EQ(d.st.scale, 32768.0);
  EXPECT_EQ(d.st.growth_tracker, 1999);
  EXPECT_EQ(d.st.last_skipped, 0);
  d("C");
  EXPECT_EQ(d.st.scale, 65536.0);
  EXPECT_EQ(d.st.growth_tracker, 0);

  EXPECT_EQ(RuleRun("dynamic:init=1024,hysteresis=2")("O").st.scale, 1024.0);
  EXPECT_EQ(RuleRun("dynamic:init=1024,hysteresis=2")("OO").st.scale, 512.0);
  EXPECT_EQ(RuleRun("dynamic:init=1024,hysteresis=2")("OCO").st.scale, 512.0);
  EXPECT_EQ(RuleRun("dynamic:init=1024,hysteresis=2,consecutive")("OCO").st.scale, 1024.0);
  EXPECT_EQ(RuleRun("dynamic:init=1024,hysteresis=2,consecutive")("OCOO").st.scale, 512.0);
  RuleRun g("dynamic:init=1024,hysteresis=2,interval=3");
  g("OO");
  EXPECT_EQ(g.st.scale, 512.0);
  EXPECT_EQ(g.st.hysteresis_left, 1);
  g("CCC");
  EXPECT_EQ(g.st.scale, 1024.0);
  EXPECT_EQ(g.st.hysteresis_left, 2);
  EXPECT_EQ(g("O").st.scale, 1024.0);

  RuleRun top("dynamic:init=1.7014118346046923e38,interval=1,growth=2");  // 2^127: 2^128 is not an f32
  EXPECT_EQ(top("C").st.scale, std::ldexp(1.0, 127));
  RuleRun bounded("dynamic:init=4,min=2,max=8,interval=1");
  EXPECT_EQ(bounded("OO").st.scale, 2.0);
  EXPECT_EQ(bounded("CCCCC").st.scale, 8.0);
  RuleRun fixed("static:1024");  // static: counts skips, never moves
  fixed("OOCO");
  EXPECT_EQ(fixed.st.scale, 1024.0);
  EXPECT_EQ(fixed.st.skipped, 3);
}

// The scale is read by the unscale kernel on the device: float(1.0 / S), also for a scale that is
// not a power of two (static:1000).
TEST(AmpNoSync, UnscaleUsesFloatOfOneOverTheDeviceScale) {
  Tensor w = Tensor::from_vector(std::vector<float>{0.0f, 0.0f}, {2}).requires_grad_();
  optim::SGD sgd({w}, {.lr = 0.0});
  LossScaler s(ScalerConfig::parse("static:1000"));
  s.scale(sum(mul(w, Tensor::from_vector(std::vector<float>{3.0f, -7.5f}, {2})))).backward();
  s.unscale(sgd);
  const float inv = static_cast<float>(1.0 / 1000.0);
  const std::vector<float> g = sgd.unscaled_grads()[0].to_vector();
  EXPECT_EQ(g[0], (3.0f * 1000.0f) * inv);
  EXPECT_EQ(g[1], (-7.5f * 1000.0f) * inv);
  s.step(sgd);
  s.update();
}

// Clipping on the device keeps an overflow visible: an infinite norm leaves non-finite gradients
// non-finite, and the step is skipped all the same.
TEST(AmpNoSync, ClippingDoesNotHideAnOverflow) {
  Net net(hl::test::fresh_seed(), DType::f32, Device::cpu);
  auto opt = make_opt("sgd", net.lin.parameters(), false);
  const auto before = fingerprint(net.lin.parameters(), *opt);
  LossScaler s(ScalerConfig::parse("dynamic:init=8"));
  s.scale(net.loss(true)).backward();
  s.unscale(*opt);
  const Tensor norm = opt->clip_grad_norm(1.0);
  EXPECT_EQ(norm.dtype(), DType::f64);
  EXPECT_FALSE(std::isfinite(norm.item()));
  bool any_nonfinite = false;
  for (const Tensor& g : opt->unscaled_grads())
    for (float v : g.to_vector()) any_nonfinite |= !std::isfinite(v);
  EXPECT_TRUE(any_nonfinite);
  s.step(*opt);
  s.update();
  EXPECT_TRUE(s.last_step_skipped());
  EXPECT_EQ(fingerprint(net.lin.parameters(), *opt), before);
  EXPECT_EQ(s.get_scale(), 4.0);
}

// The device state is not shared between copies of a scaler.
TEST(AmpNoSync, CopiesOfAScalerAreIndependent) {
  Net net(hl::test::fresh_seed(), DType::f32, Device::cpu);
  auto opt = make_opt("sgd", net.lin.parameters(), false);
  LossScaler s(ScalerConfig::parse("dynamic:init=64"));
  LossScaler copy = s;
  s.scale(net.loss(true)).backward();
  s.step(*opt);
  s.update();
  EXPECT_EQ(s.get_scale(), 32.0);
  EXPECT_EQ(copy.get_scale(), 64.0);
  EXPECT_EQ(copy.skipped_steps(), 0);
  copy = s;
  EXPECT_EQ(copy.get_scale(), 32.0);
  EXPECT_EQ(copy.scale_history(), s.scale_history());
}

// ---- CUDA: the same flows on the GPU, compared with the CPU (skip without a GPU) ----------------------

TEST(AmpNoSyncCuda, AScaledStepReadsNothingBackToTheHost) {
  HL_REQUIRE_CUDA();
  expect_no_host_reads(Device::cuda);
}

// The scaler rule kernel and the CPU path: the same states after a random overflow pattern.
TEST(AmpNoSyncCuda, ScalerUpdateKernelMatchesTheCpuRule) {
  HL_REQUIRE_CUDA();
  Generator g(hl::test::fresh_seed());
  for (const char* spec : {"dynamic:init=1024,interval=3", "dynamic:init=1024,hysteresis=3,interval=5",
                           "dynamic:init=8,hysteresis=2,consecutive,interval=2,min=1,max=64", "static:100"}) {
    RuleRun ref(spec);
    kernels::ScalerState* dev_state = static_cast<kernels::ScalerState*>(runtime::cuda_malloc(sizeof(kernels::ScalerState)));
    int32_t* dev_flag = static_cast<int32_t*>(runtime::cuda_malloc(sizeof(int32_t)));
    float* dev_scale32 = static_cast<float*>(runtime::cuda_malloc(sizeof(float)));
    double* dev_hist = static_cast<double*>(runtime::cuda_malloc(64 * sizeof(double)));
    runtime::cuda_memcpy_async(dev_state, &ref.st, sizeof ref.st, runtime::CopyKind::host_to_device);
    runtime::cuda_synchronize();
    std::vector<double> hist_ref;
    std::vector<int32_t> flags(64);
    for (int i = 0; i < 64; ++i) {
      flags[static_cast<size_t>(i)] = g.below(3) == 0 ? 1 : 0;
      runtime::cuda_memcpy_async(dev_flag, &flags[static_cast<size_t>(i)], sizeof(int32_t),
                                 runtime::CopyKind::host_to_device);
      kernels::scaler_update(DeviceType::cuda, ref.rule, dev_state, dev_flag, dev_scale32, dev_hist + i);
      runtime::cuda_synchronize();  // the pageable source of the next copy is reused
      hist_ref.push_back(ref.st.scale);
      kernels::scaler_rule(ref.rule, ref.st, flags[static_cast<size_t>(i)] != 0);
    }
    kernels::ScalerState got;
    float scale32 = 0.0f;
    std::vector<double> hist(64);
    runtime::cuda_memcpy_async(&got, dev_state, sizeof got, runtime::CopyKind::device_to_host);
    runtime::cuda_memcpy_async(&scale32, dev_scale32, sizeof scale32, runtime::CopyKind::device_to_host);
    runtime::cuda_memcpy_async(hist.data(), dev_hist, 64 * sizeof(double), runtime::CopyKind::device_to_host);
    runtime::cuda_synchronize();
    EXPECT_EQ(got.scale, ref.st.scale) << spec;
    EXPECT_EQ(got.growth_tracker, ref.st.growth_tracker) << spec;
    EXPECT_EQ(got.hysteresis_left, ref.st.hysteresis_left) << spec;
    EXPECT_EQ(got.skipped, ref.st.skipped) << spec;
    EXPECT_EQ(got.last_skipped, ref.st.last_skipped) << spec;
    EXPECT_EQ(scale32, static_cast<float>(ref.st.scale)) << spec;
    EXPECT_EQ(hist, hist_ref) << spec;
    for (void* p : {static_cast<void*>(dev_state), static_cast<void*>(dev_flag), static_cast<void*>(dev_scale32),
                    static_cast<void*>(dev_hist)})
      runtime::cuda_free(p);
  }
}

// A whole scaled run (overflows, skips, clipping) on the GPU against the CPU: the scale trajectory,
// the skips and the step count are identical; weights agree to rounding (GEMM summation order, and
// the device's pow in Adam's bias correction), and a skipped step leaves the GPU's state bit-identical.
TEST(AmpNoSyncCuda, ScaledRunMatchesTheCpu) {
  HL_REQUIRE_CUDA();
  for (const char* which : {"sgd", "adam"}) {
    const uint64_t seed = hl::test::fresh_seed();
    struct Side {
      Side(uint64_t seed, Device dev, const char* which)
          : net(seed, DType::f16, dev), opt(make_opt(which, net.lin.parameters(), true)),
            s(ScalerConfig::parse("dynamic:init=4096,interval=3")) {}
      Net net;
      std::unique_ptr<optim::Optimizer> opt;
      LossScaler s;
      std::vector<double> scales;
    };
    Side cpu(seed, Device::cpu, which), gpu(seed, Device::cuda, which);
    for (int i = 0; i < 12; ++i) {
      const bool overflow = i == 0 || i == 1 || i == 7;
      for (Side* side : {&cpu, &gpu}) {
        side->opt->zero_grad();
        side->s.scale(side->net.loss(overflow)).backward();
        side->s.unscale(*side->opt);
        side->opt->clip_grad_norm(0.5);
        std::map<std::string, std::vector<uint8_t>> before;
        const int64_t steps_before = side->opt->steps();
        if (overflow)
          for (const auto& [n, t] : side->opt->state().tensors) before[n] = bytes(t);
        side->s.step(*side->opt);
        side->s.update();
        if (overflow) {
          // Every state tensor keeps its bytes. A skipped first step may still create Adam's moments:
          // the step is decided on the device (no host read of the found-inf flag), so the kernel
          // that skips needs its buffers. They must be all zeros, the same as no history (Adam's
          // first real step starts from m = v = 0), and the step count must not move.
          EXPECT_EQ(side->opt->steps(), steps_before) << which << " step " << i;
          for (const auto& [n, t] : side->opt->state().tensors) {
            const std::vector<uint8_t> now = bytes(t);
            const auto was = before.find(n);
            if (was != before.end())
              EXPECT_EQ(now, was->second) << which << " step " << i << ": " << n;
            else
              EXPECT_TRUE(std::all_of(now.begin(), now.end(), [](uint8_t b) { return b == 0; }))
                  << which << " step " << i << ": " << n << " was created by a skipped step with nonzero values";
          }
          EXPECT_GE(side->opt->state().tensors.size(), before.size()) << which << " step " << i;
        }
        side->scales.push_back(side->s.get_scale());
      }
    }
    EXPECT_EQ(gpu.scales, cpu.scales) << which;
    EXPECT_EQ(gpu.s.skipped_steps(), 3) << which;
    EXPECT_EQ(gpu.opt->steps(), cpu.opt->steps()) << which;
    EXPECT_EQ(gpu.s.scale_history(), cpu.s.scale_history()) << which;
    const auto& mc = cpu.opt->master_weights();
    const auto& mg = gpu.opt->master_weights();
    for (size_t k = 0; k < mc.size(); ++k) {
      const auto a = mc[k].to_double(), b = mg[k].to_double();
      // f16 GEMMs accumulate in a different order on the GPU; 12 small steps stay within 1e-3.
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-3) << which << " master " << k << "[" << i << "]";
    }
  }
}

}  // namespace
