// The CPU optimizer passes (kernels/optim.h) called directly, without the framework's optimizers:
// their argument checks, which must leave every slot as it was, and the edges of the loss scaler's
// and the gradient clipper's passes that the framework's tests (tests/framework/test_nn_optim.cpp,
// test_amp.cpp) do not reach: f64 unscaling into a separate output, the flags' exact values, and a
// gradient norm exactly at the clipping bound. The CUDA passes are held to the same rules in
// tests/kernels/test_cuda_kernels.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/optim.h"
#include "tests/test_util.h"

namespace hl::kernels {
namespace {

constexpr DeviceType kCpu = DeviceType::cpu;

// One f32 parameter of 3 elements with its gradient, master-less, and both moment buffers.
struct Slot {
  std::vector<float> w{1.0f, -2.0f, 0.5f}, g{0.25f, 0.5f, -1.0f}, m{0, 0, 0}, v{0, 0, 0};
  ParamSlot slot() {
    ParamSlot s;
    s.param = w.data();
    s.grad = g.data();
    s.buf1 = m.data();
    s.buf2 = v.data();
    s.n = static_cast<int64_t>(w.size());
    return s;
  }
};

const std::vector<float> kW0{1.0f, -2.0f, 0.5f};

TEST(OptimCpu, EverySlotIsCheckedBeforeAnyIsUpdated) {
  // The first slot is valid, the second is not: the error names the op and the fault, and the first
  // parameter keeps its values (no partial step), as in the CUDA passes, which check before launching.
  struct Case {
    const char* what;
    void (*spoil)(ParamSlot&);
    std::string sgd_error, adam_error;
  };
  const std::vector<Case> cases = {
      {"f16 state", [](ParamSlot& s) { s.state_type = DType::f16; },
       "sgd_update: optimizer state must be f32 or f64, got f16",
       "adam_update: optimizer state must be f32 or f64, got f16"},
      {"i32 state", [](ParamSlot& s) { s.state_type = DType::i32; },
       "sgd_update: optimizer state must be f32 or f64, got i32",
       "adam_update: optimizer state must be f32 or f64, got i32"},
      {"i32 parameter", [](ParamSlot& s) { s.param_type = DType::i32; },
       "sgd_update: needs a floating dtype, got i32", "adam_update: needs a floating dtype, got i32"},
      {"no first moment", [](ParamSlot& s) { s.buf1 = nullptr; }, "sgd_update: momentum 0.9 needs a momentum buffer",
       "adam_update: needs both moment buffers"},
      {"no second moment", [](ParamSlot& s) { s.buf2 = nullptr; }, "", "adam_update: needs both moment buffers"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    for (bool skip_set : {false, true}) {  // the checks come first: a skipped step does not hide them
      SCOPED_TRACE(skip_set ? "skip flag set" : "no skip flag");
      const int32_t skip = 1;
      Slot a, b;
      std::vector<ParamSlot> slots{a.slot(), b.slot()};
      c.spoil(slots[1]);
      SgdParams sp;
      sp.momentum = 0.9;
      sp.skip = skip_set ? &skip : nullptr;
      const std::string sgd = test::error_of([&] { sgd_update(kCpu, slots, sp); });
      if (c.sgd_error.empty()) {
        EXPECT_EQ(sgd, "(no error)");  // SGD never reads the second moment
      } else {
        EXPECT_EQ(sgd, c.sgd_error);
        EXPECT_EQ(a.w, kW0);
        EXPECT_EQ(a.m, std::vector<float>(3, 0.0f));
      }
      Slot a2, b2;
      std::vector<ParamSlot> slots2{a2.slot(), b2.slot()};
      c.spoil(slots2[1]);
      AdamParams ap;
      ap.skip = skip_set ? &skip : nullptr;
      EXPECT_EQ(test::error_of([&] { adam_update(kCpu, slots2, ap); }), c.adam_error);
      EXPECT_EQ(a2.w, kW0);
      EXPECT_EQ(a2.m, std::vector<float>(3, 0.0f));
      EXPECT_EQ(a2.v, std::vector<float>(3, 0.0f));
    }
  }
}

TEST(OptimCpu, UnscaleChecksEveryGradientBeforeWritingAny) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> g{2.0, 4.0};
  for (const auto& [grad_type, out_type, error] :
       std::vector<std::tuple<DType, DType, std::string>>{
           {DType::i32, DType::f32, "unscale_grads: needs a floating dtype, got i32"},
           {DType::f64, DType::f16, "unscale_grads: output must be f32 or f64, got f16"},
           {DType::f32, DType::i32, "unscale_grads: output must be f32 or f64, got i32"}}) {
    SCOPED_TRACE(error);
    std::vector<double> out0{nan, nan}, g1(2, 1.0), out1(2, nan);
    std::vector<GradSlot> slots(2);
    slots[0] = {g.data(), DType::f64, out0.data(), DType::f64, 2};
    slots[1] = {g1.data(), grad_type, out1.data(), out_type, 2};
    int32_t found = 0;
    EXPECT_EQ(test::error_of([&] { unscale_grads(kCpu, slots, 0.5f, &found); }), error);
    EXPECT_TRUE(std::isnan(out0[0]) && std::isnan(out0[1])) << "the first gradient was written";
  }
}

TEST(OptimCpu, UnscaleIntoASeparateOutputInF64AndF32) {
  // Every element, the first included, is multiplied by 1/S into a poisoned output; the gradient is
  // left alone. A power-of-two scale makes the products exact.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> g64{3.0, -5.0, 0.75, 1e-300};
  const std::vector<float> g32{3.0f, -5.0f, 0.75f, 1e-30f};
  for (bool device_scale : {false, true}) {  // 1/8 given, or computed from a scale of 8 "on the device"
    SCOPED_TRACE(device_scale ? "scale pointer" : "inv_scale");
    const double scale = 8.0;
    const float inv = device_scale ? 1024.0f : 0.125f;  // ignored when the scale pointer is given
    std::vector<double> o64(4, nan);
    std::vector<float> o32(4, std::numeric_limits<float>::quiet_NaN());
    std::vector<GradSlot> slots(2);
    slots[0] = {g64.data(), DType::f64, o64.data(), DType::f64, 4};
    slots[1] = {g32.data(), DType::f32, o32.data(), DType::f32, 4};
    int32_t found = 0;
    unscale_grads(kCpu, slots, inv, &found, device_scale ? &scale : nullptr);
    EXPECT_EQ(o64, (std::vector<double>{0.375, -0.625, 0.09375, 1e-300 / 8}));
    EXPECT_EQ(o32, (std::vector<float>{0.375f, -0.625f, 0.09375f, 1e-30f / 8}));
    EXPECT_EQ(g64[0], 3.0);
    EXPECT_EQ(found, 0);
  }
}

TEST(OptimCpu, FoundInfIsSetToOneAndNeverCleared) {
  // kernels/optim.h: "set *found_inf to 1", which the loss scaler's update and the skip test read.
  for (DType t : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(t));
    for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
      std::vector<double> g64{1.0, bad};
      std::vector<float> g32{1.0f, static_cast<float>(bad)};
      std::vector<double> o64(2);
      std::vector<float> o32(2);
      void* g = t == DType::f64 ? static_cast<void*>(g64.data()) : static_cast<void*>(g32.data());
      void* o = t == DType::f64 ? static_cast<void*>(o64.data()) : static_cast<void*>(o32.data());
      std::vector<GradSlot> slots{{g, t, o, t, 2}};
      int32_t found = 0;
      unscale_grads(kCpu, slots, 0.5f, &found);
      EXPECT_EQ(found, 1) << bad;
    }
    std::vector<double> g64{1.0, 2.0};
    std::vector<float> g32{1.0f, 2.0f};
    void* g = t == DType::f64 ? static_cast<void*>(g64.data()) : static_cast<void*>(g32.data());
    std::vector<GradSlot> slots{{g, t, g, t, 2}};  // in place
    int32_t found = 1;  // raised by an earlier pass: finite gradients leave it raised
    unscale_grads(kCpu, slots, 0.5f, &found);
    EXPECT_EQ(found, 1);
  }
}

TEST(OptimCpu, ClipAtExactlyTheBoundStillScalesByMaxOverNormPlusEpsilon) {
  // PyTorch's factor max_norm / (norm + 1e-6): at norm == max_norm it is just below 1, so the
  // gradients shrink by 1e-6 relative; at twice the bound they are left alone.
  for (double max_norm : {1.0, 2.0}) {
    SCOPED_TRACE(max_norm);
    std::vector<double> g{0.6, -0.8};
    const float sum_sq = 1.0f;  // norm 1
    double norm = -1.0;
    std::vector<Span> spans{{g.data(), DType::f64, 2}};
    clip_by_norm(kCpu, spans, &sum_sq, max_norm, &norm);
    EXPECT_EQ(norm, 1.0);
    const double factor = max_norm == 1.0 ? 1.0 / (1.0 + 1e-6) : 1.0;
    EXPECT_DOUBLE_EQ(g[0], 0.6 * factor);
    EXPECT_DOUBLE_EQ(g[1], -0.8 * factor);
  }
}

TEST(OptimCpu, ClipChecksEveryGradientBeforeWritingAnything) {
  std::vector<double> g{3.0, 4.0};
  std::vector<int32_t> bad{1, 2};
  const float sum_sq = 30.0f;  // a norm above the bound: the first gradient would be scaled
  double norm = -1.0;
  std::vector<Span> spans{{g.data(), DType::f64, 2}, {bad.data(), DType::i32, 2}};
  EXPECT_EQ(test::error_of([&] { clip_by_norm(kCpu, spans, &sum_sq, 1.0, &norm); }),
            "clip_by_norm: needs a floating dtype, got i32");
  EXPECT_EQ(g, (std::vector<double>{3.0, 4.0}));
  EXPECT_EQ(norm, -1.0);
}

TEST(OptimCpu, FinishCountsTheStepAndMarksEachFlagWithOne) {
  // optim_finish sets "momentum buffer initialized" to 1 (the header's word), and counts the step,
  // unless the skip flag is raised; no skip flag means the step was applied.
  for (int32_t skip : {0, 1, -1}) {
    SCOPED_TRACE(skip);
    int64_t steps = 5;
    int32_t a = 0, b = 0;
    optim_finish(kCpu, skip == -1 ? nullptr : &skip, &steps, {&a, &b});
    const bool applied = skip != 1;
    EXPECT_EQ(steps, applied ? 6 : 5);
    EXPECT_EQ(a, applied ? 1 : 0);
    EXPECT_EQ(b, applied ? 1 : 0);
    // Without a counter only the flags are set, as the GPU's kernel does.
    a = 0;
    optim_finish(kCpu, skip == -1 ? nullptr : &skip, nullptr, {&a});
    EXPECT_EQ(a, applied ? 1 : 0);
  }
}

// The gradient norm for clipping gives the same bits with any number of threads (cpu_common.h's
// ordered_sum), where an OpenMP reduction's order followed the thread count (found by review,
// 2026-11-29). The squares here are 1 + 2^-24 (a tie in f32) and 65534 times 2^-54: one thread adding
// in order gave 1, two threads 1.00000012.
TEST(OptimCpu, SumOfSquaresIsTheSameForAnyThreadCount) {
  const int saved_threads = omp_get_max_threads();
  std::vector<float> x(65536, 0x1p-27f);
  x[0] = 1.0f;
  x[1] = 0x1p-12f;
  std::vector<double> wide(x.begin(), x.end());
  const std::vector<ConstSpan> spans = {{x.data(), DType::f32, 65536}, {wide.data(), DType::f64, 65536}};
  const auto with = [&](int threads) {
    omp_set_num_threads(threads);
    float out = -1.0f;
    sum_of_squares(kCpu, spans, &out);
    return out;
  };
  const float one = with(1);
  for (int threads : {2, 3, 4}) EXPECT_EQ(with(threads), one) << threads << " threads";
  // Each tensor: 1 + 2^-24 from the first chunk (whose 2^-54s fall below its double's last bit) and
  // 2^-39 from the second; twice that is just above the tie 2 + 2^-23, so f32 rounds it up.
  EXPECT_EQ(one, 2.0f + 0x1p-22f);
  omp_set_num_threads(saved_threads);
}

// Multi-tensor launches are the default (kernels/optim.h), and the switch holds what it is given. Only the
// CUDA passes read it, so this checks the setting, not a launch count (test_cuda_kernels.cpp counts those).
TEST(OptimCpu, MultiTensorLaunchesAreTheDefault) {
  EXPECT_TRUE(multi_tensor());
  set_multi_tensor(false);
  EXPECT_FALSE(multi_tensor());
  set_multi_tensor(true);
  EXPECT_TRUE(multi_tensor());
}

}  // namespace
}  // namespace hl::kernels
