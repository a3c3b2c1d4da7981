// The mixed-precision engine: the acceptance tests of the mixed-precision issue, numbered as there,
// plus Adam/AdamW and gradient clipping. All on the CPU, where f16 is emulated bit-exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "framework/amp.h"
#include "framework/checkpoint.h"
#include "framework/autograd.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/optim.h"
#include "tests/test_util.h"

namespace {

using namespace hl;
using amp::LossScaler;
using amp::ScalerConfig;

Tensor f16(std::vector<float> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::f16); }

// Raw bytes of a tensor, for bit-identity checks.
std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor h = t.detach().to(Device::cpu);
  const uint8_t* p = static_cast<const uint8_t*>(h.data_ptr());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// 1. FP32 accumulation: a dot product of 4096 FP16 ones is 4096 (an f16 accumulator stalls at 2048).
TEST(Amp, T1_DotProductOf4096F16OnesIs4096) {
  Tensor a = Tensor::ones({1, 4096}, DType::f16), b = Tensor::ones({4096, 1}, DType::f16);
  EXPECT_EQ(matmul(a, b).item(), 4096.0);
  // What an f16 accumulator would do, for contrast: 2048 + 1 rounds back to 2048.
  float acc = 0.0f;
  for (int i = 0; i < 4096; ++i) acc = round_to_half(acc + 1.0f);
  EXPECT_EQ(acc, 2048.0f);
}

// 2. Master weights: w = 1 plus 16 updates of 2^-12 is 1.00390625 in `mixed`, stays 1.0 in `fp16`.
TEST(Amp, T2_MasterWeightsKeepUpdatesThatFp16Loses) {
  for (bool mixed : {true, false}) {
    Tensor w = f16({1.0f}).requires_grad_();
    optim::SGD sgd({w}, {.lr = 1.0, .master_weights = mixed});
    const Tensor minus_u = f16({-std::ldexp(1.0f, -12)});  // d(loss)/dw = -2^-12, so w += 2^-12
    for (int i = 0; i < 16; ++i) {
      sgd.zero_grad();
      sum(mul(w, minus_u)).backward();
      sgd.step();
    }
    if (mixed) {
      EXPECT_EQ(sgd.master_weights()[0].item(), 1.00390625);
      EXPECT_EQ(w.item(), 1.00390625);  // the f16 copy, rewritten from the master in the same pass
    } else {
      EXPECT_EQ(w.item(), 1.0);  // 2^-12 is below half an f16 ulp of 1 (2^-11): every update lost
    }
  }
}

// 3. Static scaling: a gradient of 2^-26 is 0 in FP16; with S = 8 it is stored as 2^-23 and
//    unscales to exactly 2^-26.
TEST(Amp, T3_StaticScaleRescuesAGradientBelowFp16Range) {
  const float c = std::ldexp(1.0f, -13);
  auto grad_of_w = [&](const char* spec, float* stored_f16) {
    Tensor w = f16({1.0f}).requires_grad_();
    optim::SGD sgd({w}, {.lr = 0.0, .master_weights = true});
    LossScaler scaler(ScalerConfig::parse(spec));
    // loss = sum(w * 2^-13) * 2^-13: dloss/dw = 2^-26, computed in f16 through the chain rule.
    Tensor loss = sum(mul(mul(w, f16({c})), static_cast<double>(c)));
    scaler.scale(loss).backward();
    *stored_f16 = static_cast<float>(w.grad().item());
    scaler.unscale(sgd);
    return sgd.unscaled_grads()[0].item();
  };
  float stored = -1.0f;
  EXPECT_EQ(grad_of_w("none", &stored), 0.0);
  EXPECT_EQ(stored, 0.0f);  // 2^-26 flushes to zero in f16 (below half of 2^-24)
  EXPECT_EQ(grad_of_w("static:8", &stored), std::ldexp(1.0, -26));
  EXPECT_EQ(stored, std::ldexp(1.0f, -23));  // 8 * 2^-26, an f16 subnormal
}

// A one-parameter problem whose gradient we control: d(sum(w * x))/dw = x.
struct Probe {
  Tensor w = Tensor::from_vector(std::vector<float>{0.5f, -0.25f}, {2}).requires_grad_();
  Tensor v = Tensor::from_vector(std::vector<float>{1.0f}, {1}).requires_grad_();
  optim::SGD sgd{{w, v}, {.lr = 0.01}};
  // One scaled step; `bad` in {0, inf, -inf, nan} is planted in the gradient of w (and of v too
  // when `both`).
  bool step(LossScaler& s, float bad = 0.0f, bool both = false) {
    sgd.zero_grad();
    const float gx = bad == 0.0f ? 1.0f : bad;
    Tensor loss = sum(mul(w, Tensor::from_vector(std::vector<float>{gx, 1.0f}, {2}))) +
                  sum(mul(v, Tensor::from_vector(std::vector<float>{both ? gx : 1.0f}, {1})));
    s.scale(loss).backward();
    s.step(sgd);
    s.update();
    return !s.last_step_skipped();
  }
};

// 4. Golden dynamic trajectory (PyTorch GradScaler defaults).
TEST(Amp, T4_GoldenDynamicTrajectory) {
  Probe p;
  LossScaler s(ScalerConfig::parse("dynamic"));
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_FALSE(p.step(s, INFINITY));  // step 1 overflows: skipped, scale halves
  EXPECT_EQ(s.get_scale(), 32768.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(p.step(s));
  EXPECT_EQ(s.get_scale(), 32768.0);  // 1999 clean steps later: unchanged
  EXPECT_EQ(s.growth_tracker(), 1999);
  EXPECT_TRUE(p.step(s));  // the 2000th clean step grows it
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.steps(), 2001);
  ASSERT_EQ(s.scale_history().size(), 2001u);
  EXPECT_EQ(s.scale_history()[0], 65536.0);
  EXPECT_EQ(s.scale_history()[1], 32768.0);
}

TEST(Amp, T4_NanAndBothInfinitiesCountInfsInSeveralTensorsBackOffOnce) {
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    Probe p;
    LossScaler s(ScalerConfig::parse("dynamic"));
    EXPECT_FALSE(p.step(s, bad, /*both=*/true));  // infs in two tensors: one flag, one backoff
    EXPECT_EQ(s.get_scale(), 32768.0) << bad;
  }
}

TEST(Amp, T4_GrowthFrom2Pow127IsRefused) {
  // Scale 2^127 at a growth point, with a zero gradient so that nothing overflows at that scale.
  LossScaler t(ScalerConfig::parse("dynamic:init=1.7014118346046923e38,interval=1,growth=2"));
  Tensor w = Tensor::from_vector(std::vector<float>{1.0f}, {1}).requires_grad_();
  optim::SGD sgd({w}, {.lr = 0.0});
  sum(mul(w, 0.0)).backward();  // a zero gradient: never overflows, whatever the scale
  t.step(sgd);
  t.update();
  EXPECT_EQ(t.get_scale(), std::ldexp(1.0, 127));  // 2^128 is not a finite f32: growth refused
  EXPECT_TRUE(std::isfinite(t.get_scale()));
}

// 5. Skip purity: on overflow, f16 weights, masters, moments and step counters are bit-identical.
TEST(Amp, T5_OverflowStepChangesNothing) {
  for (const char* which : {"sgd", "adam"}) {
    Generator g(hl::test::fresh_seed());
    nn::Linear lin(4, 3, g);
    lin.to(DType::f16);
    std::unique_ptr<optim::Optimizer> opt;
    if (std::string(which) == "sgd") {
      opt = std::make_unique<optim::SGD>(lin.parameters(), optim::SGD::Options{.lr = 0.1, .momentum = 0.9, .master_weights = true});
    } else {
      auto o = optim::adamw_options(1e-2);
      o.master_weights = true;
      opt = std::make_unique<optim::Adam>(lin.parameters(), o);
    }
    LossScaler s(ScalerConfig::parse("dynamic:init=256"));
    Tensor x = Tensor::randn({5, 4}, g, DType::f16);
    Tensor y = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0, 1}, {5});
    auto run = [&](bool overflow) {
      opt->zero_grad();
      Tensor loss = cross_entropy(lin(overflow ? mul(x, INFINITY) : x), y);
      s.scale(loss).backward();
      s.step(*opt);
      s.update();
      return !s.last_step_skipped();
    };
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(run(false)) << which;
    const optim::Optimizer::State before = opt->state();
    std::vector<std::vector<uint8_t>> snap;
    for (const auto& p : lin.parameters()) snap.push_back(bytes(p));
    for (const auto& [n, t] : before.tensors) snap.push_back(bytes(t));
    EXPECT_FALSE(run(true)) << which;
    const optim::Optimizer::State after = opt->state();
    std::vector<std::vector<uint8_t>> now;
    for (const auto& p : lin.parameters()) now.push_back(bytes(p));
    for (const auto& [n, t] : after.tensors) now.push_back(bytes(t));
    EXPECT_EQ(now, snap) << which;
    EXPECT_EQ(after.meta.at("steps"), before.meta.at("steps")) << which;
    EXPECT_EQ(opt->steps(), 3) << which;
    EXPECT_EQ(s.get_scale(), 128.0) << which;
  }
}

// 6. Hysteresis (DeepSpeed): with hysteresis 2 the first overflow skips without backing off, the
//    next halves; `consecutive` refills on a clean step; a growth refills the counter.
TEST(Amp, T6_HysteresisGoldenSequences) {
  {
    Probe p;
    LossScaler s(ScalerConfig::parse("dynamic:init=1024,hysteresis=2"));
    EXPECT_FALSE(p.step(s, INFINITY));
    EXPECT_EQ(s.get_scale(), 1024.0);  // tolerated (but skipped)
    EXPECT_EQ(s.skipped_steps(), 1);
    EXPECT_FALSE(p.step(s, INFINITY));
    EXPECT_EQ(s.get_scale(), 512.0);  // the second overflow backs off
  }
  {
    Probe p;  // non-consecutive: O, C, O still halves (a clean step does not refill)
    LossScaler s(ScalerConfig::parse("dynamic:init=1024,hysteresis=2"));
    p.step(s, INFINITY);
    p.step(s);
    p.step(s, INFINITY);
    EXPECT_EQ(s.get_scale(), 512.0);
  }
  {
    Probe p;  // consecutive: O, C, O leaves the scale
    LossScaler s(ScalerConfig::parse("dynamic:init=1024,hysteresis=2,consecutive"));
    p.step(s, INFINITY);
    p.step(s);
    p.step(s, INFINITY);
    EXPECT_EQ(s.get_scale(), 1024.0);
    p.step(s, INFINITY);  // O, O: halves
    EXPECT_EQ(s.get_scale(), 512.0);
  }
  {
    Probe p;  // a growth refills: O (allowance 1 left), O (backoff, allowance stays 1), grow, O (tolerated)
    LossScaler s(ScalerConfig::parse("dynamic:init=1024,hysteresis=2,interval=3"));
    p.step(s, INFINITY);
    p.step(s, INFINITY);
    EXPECT_EQ(s.get_scale(), 512.0);
    EXPECT_EQ(s.hysteresis_left(), 1);
    for (int i = 0; i < 3; ++i) p.step(s);
    EXPECT_EQ(s.get_scale(), 1024.0);
    EXPECT_EQ(s.hysteresis_left(), 2);
    p.step(s, INFINITY);
    EXPECT_EQ(s.get_scale(), 1024.0);
  }
}

// 7. Unscale-then-clip with S = 1024 matches the FP32 run exactly; gradients are never divided twice.
TEST(Amp, T7_UnscaleThenClipMatchesFp32) {
  Generator g(hl::test::fresh_seed());
  const Tensor x = Tensor::randn({8, 6}, g);
  const Tensor y = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}, {8});
  const uint64_t seed = g.next_u64();
  auto train = [&](bool scaled) {
    Generator init(seed);
    nn::Linear lin(6, 4, init);
    optim::SGD sgd(lin.parameters(), {.lr = 0.5, .momentum = 0.9});
    LossScaler s(ScalerConfig::parse("static:1024"));
    std::vector<double> norms;
    for (int i = 0; i < 5; ++i) {
      sgd.zero_grad();
      Tensor loss = cross_entropy(lin(x), y);
      if (scaled) {
        s.scale(loss).backward();
        s.unscale(sgd);
        norms.push_back(sgd.clip_grad_norm(0.05).item());  // small enough to clip every step
        s.step(sgd);  // must not unscale again
        s.update();
      } else {
        loss.backward();
        norms.push_back(sgd.clip_grad_norm(0.05).item());
        sgd.step();
      }
    }
    return std::make_pair(lin.weight.to_vector(), norms);
  };
  const auto [w_scaled, n_scaled] = train(true);
  const auto [w_plain, n_plain] = train(false);
  EXPECT_EQ(w_scaled, w_plain);  // x1024 and /1024 are exact in f32
  EXPECT_EQ(n_scaled, n_plain);
  for (double n : n_plain) EXPECT_GT(n, 0.05);  // clipping was active
  // Dividing twice is refused.
  Probe p;
  LossScaler s(ScalerConfig::parse("static:1024"));
  s.scale(sum(p.w)).backward();
  s.unscale(p.sgd);
  EXPECT_THROW(s.unscale(p.sgd), Error);
  s.step(p.sgd);
  EXPECT_THROW(s.step(p.sgd), Error);  // stepping twice without update
  s.update();
  EXPECT_THROW(s.update(), Error);     // update without a step
  // The optimizer guards itself too: two unscales without a step in between.
  p.sgd.unscale_grads(1.0f, nullptr);
  EXPECT_THROW(p.sgd.unscale_grads(1.0f, nullptr), Error);
}

// 8. Precision policy under `mixed`.
TEST(Amp, T8_PrecisionPolicyUnderMixed) {
  Generator g(hl::test::fresh_seed());
  auto model = nn::mlp512(g);
  model->to(amp::compute_dtype(amp::Precision::mixed));
  Tensor x = Tensor::randn({4, 1, 28, 28}, g, DType::f16);
  Tensor logits = (*model)(x);
  EXPECT_EQ(logits.dtype(), DType::f16);  // linear (GEMM) outputs are f16
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {4});
  EXPECT_EQ(log_softmax(logits).dtype(), DType::f32);
  EXPECT_EQ(cross_entropy(logits, labels).dtype(), DType::f32);
  EXPECT_EQ(sum(logits).dtype(), DType::f32);
  EXPECT_EQ(mean(logits).dtype(), DType::f32);
  Tensor twelve = Tensor::from_vector(std::vector<float>{12.0f, 0.0f, -3.0f}, {1, 3}, DType::f16);
  for (float v : log_softmax(twelve).to_vector()) EXPECT_TRUE(std::isfinite(v));  // exp(12) > 65504
  EXPECT_EQ(add(f16({1.0f}), Tensor::ones({1})).dtype(), DType::f32);  // f16 + f32 promotes
  EXPECT_EQ(amp::parse_precision("mixed"), amp::Precision::mixed);
  EXPECT_THROW(amp::parse_precision("bf16"), Error);
}

// 9. Resume: save model, optimizer and scaler mid-run, restore, and the loss and scale trajectories
//    match the uninterrupted run exactly.
TEST(Amp, T9_ResumeIsExact) {
  Generator g(hl::test::fresh_seed());
  const Tensor x = Tensor::randn({16, 10}, g, DType::f16);
  std::vector<int32_t> yv(16);
  for (auto& v : yv) v = static_cast<int32_t>(g.below(5));
  const Tensor y = Tensor::from_vector(yv, {16});
  const uint64_t seed = g.next_u64();
  // A high initial scale, so that the run overflows, skips and backs off, but not so high that every
  // step before the save point is skipped (at 1e9 the first 9 all were, and the restore then carried
  // nothing a skipped step does not keep: a resume that dropped the master weights passed).
  const ScalerConfig cfg = ScalerConfig::parse("dynamic:init=1e6,interval=4,hysteresis=2");

  struct Run {
    std::unique_ptr<nn::Sequential> model;
    std::unique_ptr<optim::SGD> opt;
    LossScaler scaler;
  };
  auto make = [&](const ScalerConfig& c) {
    Generator init(seed);
    Run r{std::make_unique<nn::Sequential>(), nullptr, LossScaler(c)};
    r.model->add(std::make_shared<nn::Linear>(10, 8, init));
    r.model->add(std::make_shared<nn::ReLU>());
    r.model->add(std::make_shared<nn::Linear>(8, 5, init));
    r.model->to(DType::f16);
    r.opt = std::make_unique<optim::SGD>(r.model->parameters(),
                                         optim::SGD::Options{.lr = 0.1, .momentum = 0.9, .master_weights = true});
    return r;
  };
  auto steps = [&](Run& r, int n, std::vector<double>& losses, std::vector<double>& scales) {
    for (int i = 0; i < n; ++i) {
      r.opt->zero_grad();
      Tensor loss = cross_entropy((*r.model)(x), y);
      losses.push_back(loss.item());
      r.scaler.scale(loss).backward();
      r.scaler.step(*r.opt);
      r.scaler.update();
      scales.push_back(r.scaler.get_scale());
    }
  };
  Run a = make(cfg);
  std::vector<double> la, sa;
  steps(a, 20, la, sa);
  EXPECT_GT(a.scaler.skipped_steps(), 0);  // the trajectory really exercised overflow handling

  Run b = make(cfg);
  std::vector<double> lb, sb;
  steps(b, 9, lb, sb);
  // The save point lies past both kinds of step, so the restore has moved masters, momentum and
  // scaler counters to carry over, not only the initial values.
  EXPECT_GT(b.scaler.skipped_steps(), 0);
  EXPECT_GT(b.opt->steps(), 0);
  // "Save": copies of everything, detached from b.
  std::vector<Tensor> params;
  for (const auto& p : b.model->parameters()) params.push_back(p.detach().clone());
  optim::Optimizer::State ost = b.opt->state();
  for (auto& [n, t] : ost.tensors) t = t.clone();
  const auto sst = b.scaler.state();
  // "Restore" into a fresh run and finish.
  Run c = make(cfg);
  const auto cp = c.model->parameters();
  for (size_t i = 0; i < cp.size(); ++i) Tensor(cp[i]).copy_(params[i]);
  c.opt->load_state(ost);
  c.scaler.load_state(sst);
  EXPECT_EQ(c.scaler.state(), sst);  // every counter restored, the step count included
  EXPECT_EQ(c.scaler.steps(), 9);
  steps(c, 11, lb, sb);
  EXPECT_EQ(lb, la);
  EXPECT_EQ(sb, sa);

  // The same through a checkpoint file: model, optimizer (masters, momentum) and the scaler's state
  // as an extra section of the safetensors file.
  Run d = make(cfg);
  std::vector<double> ld, sd;
  steps(d, 9, ld, sd);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("halfling_amp_resume_" + std::to_string(seed) + ".safetensors")).string();
  save_checkpoint(path, *d.model, d.opt.get(), {}, {{"scaler", CheckpointSection{{}, d.scaler.state()}}});
  Run e = make(cfg);
  const Checkpoint ck = load_checkpoint(path, *e.model, e.opt.get());
  e.scaler.load_state(ck.sections.at("scaler").meta);
  std::filesystem::remove(path);
  steps(e, 11, ld, sd);
  EXPECT_EQ(ld, la);
  EXPECT_EQ(sd, sa);
}

TEST(Amp, ScalerStateOfAnotherRuleOrWithBadValuesIsRefusedAndChangesNothing) {
  amp::LossScaler s(amp::ScalerConfig::parse("dynamic"));
  const auto good = s.state();
  // Another rule with the same init and interval: its str() names what differs, so it is refused.
  const amp::ScalerConfig other = amp::ScalerConfig::parse("dynamic:growth=4,backoff=0.25,min=1,max=1e6");
  EXPECT_EQ(amp::ScalerConfig::parse(other.str()).str(), other.str());  // str() parses back to itself
  try {
    s.load_state(amp::LossScaler(other).state());
    ADD_FAILURE() << "a state of " << other.str() << " was loaded into a default dynamic scaler";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("growth=4"), std::string::npos) << e.what();
  }
  const std::vector<std::pair<std::string, std::string>> bad{
      {"scale", "0"},           {"scale", "nan"},         {"scale", "inf"},          {"scale", "1e39"},
      {"scale", "2x"},          {"scale", "-8"},          {"growth_tracker", "-1"},  {"hysteresis_left", "0"},
      {"hysteresis_left", "2"}, {"skipped", "5"},         {"steps", "x"},            {"steps", "99999999999999999999"},
      {"scale", "1e-50"}};  // a positive double that is 0 as an f32: the scale the kernels would use
  for (const auto& [key, value] : bad) {
    auto state = good;
    state[key] = value;
    try {
      s.load_state(state);
      ADD_FAILURE() << key << " = " << value << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("LossScaler::load_state"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.state(), good) << key << " = " << value << " changed the scaler";
  }
  for (const char* small : {"0.5", "1e-30"}) {  // below 1 is a scale like any other: backoffs go there
    auto state = good;
    state["scale"] = small;
    s.load_state(state);
    EXPECT_EQ(s.get_scale(), std::stod(small)) << small;  // kept as the double it was saved as
  }
  s.load_state(good);  // the round trip still works
  EXPECT_EQ(s.get_scale(), 65536.0);
}

TEST(Amp, AdamAndAdamWMatchPyTorchFormulas) {
  // Three steps on f64 parameters, against the update written out in double.
  for (bool decoupled : {false, true}) {
    Tensor p = Tensor::from_vector(std::vector<double>{1.0, -2.0}, {2}).requires_grad_();
    optim::Adam::Options o;
    o.lr = 0.1;
    o.beta1 = 0.8;  // none of the defaults: each setting must reach the kernel
    o.beta2 = 0.99;
    o.eps = 1e-3;
    o.weight_decay = 0.05;
    o.decoupled = decoupled;
    optim::Adam adam({p}, o);
    std::vector<double> w{1.0, -2.0}, m(2, 0.0), v(2, 0.0);
    const std::vector<double> gconst{0.3, -0.7};
    for (int t = 1; t <= 3; ++t) {
      adam.zero_grad();
      sum(mul(p, Tensor::from_vector(gconst, {2}))).backward();
      adam.step();
      for (size_t i = 0; i < 2; ++i) {
        double g = gconst[i];
        if (decoupled) w[i] *= 1 - 0.1 * 0.05;
        else g += 0.05 * w[i];
        m[i] = 0.8 * m[i] + (1 - 0.8) * g;
        v[i] = 0.99 * v[i] + (1 - 0.99) * g * g;
        const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.99, t)) + 1e-3;
        w[i] -= 0.1 / (1 - std::pow(0.8, t)) * m[i] / denom;
      }
      const auto got = p.to_double();
      EXPECT_NEAR(got[0], w[0], 1e-15) << "t=" << t;
      EXPECT_NEAR(got[1], w[1], 1e-15) << "t=" << t;
    }
    EXPECT_EQ(adam.type(), decoupled ? "AdamW" : "Adam");
  }
}

TEST(Amp, ClipGradNormComputesTheGlobalNorm) {
  Tensor a = Tensor::from_vector(std::vector<float>{3.0f}, {1}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{4.0f}, {1}).requires_grad_();
  optim::SGD sgd({a, b}, {.lr = 1.0});
  sum(a * 3.0 + b * 4.0).backward();  // grads 3 and 4: norm 5
  EXPECT_NEAR(sgd.clip_grad_norm(1.0).item(), 5.0, 1e-6);
  EXPECT_NEAR(sgd.unscaled_grads()[0].item(), 3.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_NEAR(sgd.unscaled_grads()[1].item(), 4.0 / (5.0 + 1e-6), 1e-6);
  // max_norm 0 zeroes the gradients, as PyTorch's clip_grad_norm_(params, 0) does; below 0, or NaN, is
  // an error.
  EXPECT_NEAR(sgd.clip_grad_norm(0.0).item(), 5.0 / (5.0 + 1e-6), 1e-6);
  EXPECT_EQ(sgd.unscaled_grads()[0].item(), 0.0);
  EXPECT_EQ(sgd.unscaled_grads()[1].item(), 0.0);
  EXPECT_THROW(sgd.clip_grad_norm(-1.0), Error);
  EXPECT_THROW(sgd.clip_grad_norm(std::nan("")), Error);
  // One parameter alone (the norm's device is read from parameter 0, the only one).
  Tensor c = Tensor::from_vector(std::vector<float>{0.0f, 0.0f}, {2}).requires_grad_();
  optim::SGD one({c}, {.lr = 1.0});
  sum(c * 6.0).backward();  // grads 6, 6: norm sqrt(72)
  EXPECT_NEAR(one.clip_grad_norm(100.0).item(), std::sqrt(72.0), 1e-5);
  EXPECT_EQ(one.unscaled_grads()[0].to_vector(), (std::vector<float>{6.0f, 6.0f}));  // below max_norm: unchanged
}

TEST(Amp, ScalerSpecsParseAndRejectNonsense) {
  EXPECT_EQ(ScalerConfig::parse("none").kind, ScalerConfig::Kind::none);
  EXPECT_EQ(ScalerConfig::parse("none").init_scale, 1.0);  // the scale it runs at, not the dynamic default
  EXPECT_EQ(ScalerConfig::parse("static:1024").init_scale, 1024.0);
  const ScalerConfig d = ScalerConfig::parse("dynamic:init=128,interval=10,hysteresis=3,consecutive,min=1,max=4096");
  EXPECT_EQ(d.init_scale, 128.0);
  EXPECT_EQ(d.growth_interval, 10);
  EXPECT_EQ(d.hysteresis, 3);
  EXPECT_TRUE(d.consecutive_hysteresis);
  EXPECT_EQ(d.max_scale, 4096.0);
  // Each bound of each check, just past it (the values at it are accepted below).
  for (const char* bad : {"static", "static:-1", "static:0", "static:abc", "static:1e40", "auto", "none:1",
                          "dynamic:foo=1", "dynamic:init", "dynamic:init=0", "dynamic:growth=1",
                          "dynamic:backoff=0", "dynamic:backoff=1", "dynamic:backoff=2", "dynamic:interval=0",
                          "dynamic:hysteresis=0", "dynamic:min=-1", "dynamic:min=8,max=4",
                          // counts are whole numbers that fit an int64: each condition alone
                          "dynamic:interval=2.5", "dynamic:hysteresis=1.5", "dynamic:interval=1e19"}) {
    EXPECT_THROW(ScalerConfig::parse(bad), Error) << bad;
  }
  for (const char* good : {"static:1e-30", "dynamic:growth=1.0001", "dynamic:backoff=0.999", "dynamic:interval=1",
                           "dynamic:hysteresis=1", "dynamic:min=0", "dynamic:min=4,max=4"}) {
    EXPECT_NO_THROW(ScalerConfig::parse(good)) << good;
  }
}

TEST(Amp, ScalerConfigStrNamesInitIntervalAndEverySettingThatDiffersFromItsDefault) {
  // load_state compares str(): a setting str() left out would let another rule's state in, and a
  // default written out would make the same rule look different across versions.
  EXPECT_EQ(ScalerConfig::parse("none").str(), "none");
  EXPECT_EQ(ScalerConfig::parse("static:1024").str(), "static:1024");
  EXPECT_EQ(ScalerConfig::parse("dynamic").str(), "dynamic:init=65536,interval=2000");
  EXPECT_EQ(ScalerConfig::parse("dynamic:hysteresis=1,growth=2,backoff=0.5").str(), "dynamic:init=65536,interval=2000");
  EXPECT_EQ(ScalerConfig::parse("dynamic:hysteresis=2").str(), "dynamic:init=65536,interval=2000,hysteresis=2");
  EXPECT_EQ(ScalerConfig::parse("dynamic:max=1e6,min=1,backoff=0.25,growth=4").str(),
            "dynamic:init=65536,interval=2000,growth=4,backoff=0.25,min=1,max=1000000");
  EXPECT_EQ(ScalerConfig::parse("dynamic:consecutive,hysteresis=3,interval=7,init=8").str(),
            "dynamic:init=8,interval=7,hysteresis=3,consecutive");
  for (const char* spec : {"static:0.125", "dynamic:growth=4,backoff=0.25,min=1,max=1e6",
                           "dynamic:init=3,interval=1,hysteresis=2,consecutive"}) {
    const std::string once = ScalerConfig::parse(spec).str();
    EXPECT_EQ(ScalerConfig::parse(once).str(), once) << spec;  // str() parses back to itself
  }
}

// A new scaler counts its clean steps from 0, as PyTorch's GradScaler does, and an overflow starts the
// count again, also one that hysteresis tolerates: a growth comes only after `interval` clean steps in a
// row. (The golden trajectory above overflows first, from a count of 0, so it can tell neither a count
// that starts at 1 nor an overflow that leaves the count where it was.)
TEST(Amp, CleanStepsCountFromZeroAndAnOverflowStartsTheCountAgain) {
  Probe p;
  LossScaler s(ScalerConfig::parse("dynamic:init=1024,interval=3,hysteresis=2"));
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.hysteresis_left(), 2);
  EXPECT_EQ(s.skipped_steps(), 0);
  EXPECT_FALSE(s.last_step_skipped());
  EXPECT_TRUE(p.step(s));
  EXPECT_TRUE(p.step(s));
  EXPECT_EQ(s.growth_tracker(), 2);
  EXPECT_FALSE(p.step(s, INFINITY));  // skipped, and tolerated: no backoff
  EXPECT_EQ(s.get_scale(), 1024.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.hysteresis_left(), 1);
  EXPECT_TRUE(p.step(s));
  EXPECT_TRUE(p.step(s));
  EXPECT_EQ(s.get_scale(), 1024.0);  // two clean steps of three since the overflow
  EXPECT_TRUE(p.step(s));
  EXPECT_EQ(s.get_scale(), 2048.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.hysteresis_left(), 2);  // a growth refills the allowance
}

TEST(Amp, GrowthAndBackoffFactorsOtherThanTheDefaultsDriveTheScale) {
  Probe p;
  LossScaler s(ScalerConfig::parse("dynamic:init=1024,growth=4,backoff=0.25,interval=2"));
  EXPECT_FALSE(p.step(s, INFINITY));
  EXPECT_EQ(s.get_scale(), 256.0);  // x 0.25
  EXPECT_TRUE(p.step(s));
  EXPECT_EQ(s.get_scale(), 256.0);  // one clean step of two
  EXPECT_TRUE(p.step(s));
  EXPECT_EQ(s.get_scale(), 1024.0);  // x 4
  EXPECT_EQ(s.scale_history(), (std::vector<double>{1024.0, 256.0, 256.0}));
}

TEST(Amp, ScaledLossKeepsTheLossDtype) {
  // f16 loss * f32 scale computes in f32 (the precision policy), then rounds back to f16, as a
  // scalar multiply of an f16 would store it: backward then starts from an f16 seed. S = 1000, not
  // a power of two, so that the rounding shows (f16(0.1) * 1000 = 99.9756 in f32, 100 in f16).
  LossScaler s(ScalerConfig::parse("static:1000"));
  const Tensor l16 = Tensor::from_vector(std::vector<float>{0.1f}, {}, DType::f16);
  const Tensor scaled16 = s.scale(l16);
  EXPECT_EQ(scaled16.dtype(), DType::f16);
  EXPECT_EQ(scaled16.item(), static_cast<double>(round_to_half(static_cast<float>(l16.item()) * 1000.0f)));
  EXPECT_EQ(scaled16.item(), 100.0);
  const Tensor l32 = Tensor::from_vector(std::vector<float>{0.1f}, {});
  const Tensor scaled32 = s.scale(l32);
  EXPECT_EQ(scaled32.dtype(), DType::f32);
  EXPECT_EQ(scaled32.item(), static_cast<double>(0.1f * 1000.0f));
}

TEST(Amp, LoadStateBetweenUnscaleAndStepStartsAFreshStep) {
  // A restored scaler is between steps, whatever this one was doing: its pending unscale is dropped.
  Probe p;
  LossScaler s(ScalerConfig::parse("dynamic"));
  const auto saved = s.state();
  p.sgd.zero_grad();
  s.scale(sum(p.w)).backward();
  s.unscale(p.sgd);
  s.load_state(saved);
  EXPECT_EQ(s.state(), saved);  // state() is only allowed between steps
  Probe fresh;                  // (p's optimizer still holds unscaled gradients: it refuses a second unscale)
  EXPECT_TRUE(fresh.step(s));   // a whole step runs: no "already unscaled" from the scaler
  EXPECT_EQ(s.steps(), 1);
}

TEST(Amp, MinAndMaxScaleBoundTheDynamicScale) {
  Probe p;
  LossScaler s(ScalerConfig::parse("dynamic:init=4,min=2,max=8,interval=1"));
  p.step(s, INFINITY);
  p.step(s, INFINITY);
  EXPECT_EQ(s.get_scale(), 2.0);  // floored at min
  for (int i = 0; i < 5; ++i) p.step(s);
  EXPECT_EQ(s.get_scale(), 8.0);  // capped at max
}

// Unscaling multiplies by float(1/S): below 2^-128 that is inf, and 0 * inf or g * inf made NaN and inf
// that the found-inf check (on the inputs) never saw (found by review, 2026-11-29: 144 overflows in a row
// took the default scaler to 2^-128, and the next clean step wrote -inf and NaN into the weights). The
// scale never goes below 2^-111 now, where every finite FP16 gradient unscales to a finite FP32 value;
// a static or initial scale below it, or outside [min, max], is refused; so is such a saved scale.
TEST(Amp, TheScaleStaysWhereUnscalingIsFinite) {
  for (const char* spec : {"static:1e-50", "static:1e-39", "dynamic:init=1e-50", "static:1e-34"}) {
    try {
      (void)ScalerConfig::parse(spec);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("at least 2^-111"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(ScalerConfig::parse("static:0x1p-111").init_scale, amp::kSmallestScale);
  EXPECT_THROW((void)ScalerConfig::parse("dynamic:init=65536,max=1024"), Error);
  EXPECT_THROW((void)ScalerConfig::parse("dynamic:init=1,min=1024"), Error);

  Probe p;
  LossScaler s(ScalerConfig::parse("dynamic"));
  for (int i = 0; i < 200; ++i) ASSERT_FALSE(p.step(s, INFINITY));
  EXPECT_EQ(s.get_scale(), amp::kSmallestScale) << "the backoff stops at 2^-111";
  const std::vector<double> before = p.w.to_double();
  EXPECT_TRUE(p.step(s));  // a clean step: gradients 1 and 1, unscaled exactly
  const std::vector<double> after = p.w.to_double();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(std::isfinite(after[i])) << "w[" << i << "] = " << after[i];
    EXPECT_NEAR(after[i], before[i] - 0.01, 1e-7);
  }

  // A saved scale below the floor, or outside a dynamic scaler's [min, max], is refused.
  LossScaler bounded(ScalerConfig::parse("dynamic:init=4,min=2,max=8"));
  const std::map<std::string, std::string> st = bounded.state();
  for (const char* bad : {"1", "16", "1e-40"}) {
    std::map<std::string, std::string> b = st;
    b["scale"] = bad;
    EXPECT_THROW(bounded.load_state(b), Error) << "scale " << bad;
  }
  EXPECT_EQ(bounded.get_scale(), 4.0);
  // The edges themselves are in range: min, max, and the floor 2^-111.
  for (const double edge : {2.0, 8.0}) {
    std::map<std::string, std::string> b = st;
    b["scale"] = std::to_string(edge);
    EXPECT_NO_THROW(bounded.load_state(b)) << "scale " << edge;
    EXPECT_EQ(bounded.get_scale(), edge);
  }
  LossScaler at_floor(ScalerConfig::parse("static:0x1p-111"));
  EXPECT_NO_THROW(at_floor.load_state(at_floor.state()));
  EXPECT_EQ(at_floor.get_scale(), amp::kSmallestScale);
}

TEST(Amp, UnscaleTwiceOrAfterAStepSaysWhichOneHappened) {
  Probe p;
  LossScaler s(ScalerConfig::parse("dynamic"));
  p.sgd.zero_grad();
  s.scale(sum(p.w) + sum(p.v)).backward();
  s.unscale(p.sgd);
  const std::string twice = test::error_of([&] { s.unscale(p.sgd); });
  EXPECT_NE(twice.find("LossScaler::unscale: already unscaled this step"), std::string::npos) << twice;
  s.step(p.sgd);
  const std::string after_step = test::error_of([&] { s.unscale(p.sgd); });
  EXPECT_NE(after_step.find("LossScaler::unscale: already stepped this step"), std::string::npos) << after_step;
  s.update();
  EXPECT_TRUE(p.step(s));  // update() ends the step: the next one runs whole
}

TEST(Amp, ScaleHistoryReadsOnlyTheEntriesNotReadYet) {
  Probe p;
  LossScaler s(ScalerConfig::parse("dynamic"));
  int64_t before = debug::host_reads();
  EXPECT_TRUE(s.scale_history().empty());  // no update() yet: nothing to read, no read
  EXPECT_EQ(debug::host_reads(), before);
  EXPECT_TRUE(p.step(s));
  EXPECT_FALSE(p.step(s, INFINITY));
  before = debug::host_reads();
  EXPECT_EQ(s.scale_history(), (std::vector<double>{65536.0, 65536.0}));  // the scale each step ran at
  EXPECT_EQ(debug::host_reads(), before + 1);
  EXPECT_EQ(s.scale_history().size(), 2u);  // all read already: no second read
  EXPECT_EQ(debug::host_reads(), before + 1);
  EXPECT_TRUE(p.step(s));
  before = debug::host_reads();
  EXPECT_EQ(s.scale_history(), (std::vector<double>{65536.0, 65536.0, 32768.0}));  // one new entry, one read
  EXPECT_EQ(debug::host_reads(), before + 1);
}

TEST(Amp, ARestoredScalerHasNoLastStepToHaveSkipped) {
  // state() does not save last_step_skipped(): it describes a step of this object, and a restored
  // scaler has taken none yet. The count of skipped steps is restored.
  Probe p;
  LossScaler s(ScalerConfig::parse("dynamic"));
  EXPECT_FALSE(p.step(s, INFINITY));
  ASSERT_TRUE(s.last_step_skipped());
  s.load_state(s.state());
  EXPECT_FALSE(s.last_step_skipped());
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.get_scale(), 32768.0);
}

}  // namespace
