// The variant registry's selection rules (kernels/registry.h), on a toy family of its own so the
// test does not depend on which real kernels a build has; and, on the real families, the list of CUDA
// variant names that a CPU-only build knows without the variants (kernels/nocuda/cuda_variant_names.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/error.h"
#include "kernels/gemm.h"
#include "kernels/nocuda/cuda_variant_names.h"
#include "kernels/registry.h"
#include "kernels/runtime.h"
#include "kernels/softmax.h"
#include "tests/test_util.h"

namespace {

using hl::DeviceType;
using hl::kernels::Variant;

struct ToyArgs {
  static constexpr const char* family = "toy";
  static constexpr const char* env_var = "HALFLING_TOY_TEST_VARIANT";
  DeviceType device = DeviceType::cpu;
  bool odd = false;  // "fast" refuses odd problems
  std::string describe() const { return std::string("toy ") + (odd ? "odd" : "even"); }
};

std::string last_run;
void run_slow(const ToyArgs&) { last_run = "slow"; }
void run_fast(const ToyArgs&) { last_run = "fast"; }
void run_gpu(const ToyArgs&) { last_run = "gpu"; }
const char* fast_refuses_odd(const ToyArgs& a) { return a.odd ? "fast needs an even problem" : nullptr; }

using Reg = hl::kernels::Registry<ToyArgs>;

Reg& toy() {
  static Reg* r = [] {
    auto* reg = new Reg;
    reg->add({"slow", DeviceType::cpu, 1, "the simple one", run_slow, nullptr});
    reg->add({"fast", DeviceType::cpu, 9, "the quick one", run_fast, fast_refuses_odd});
    reg->add({"gpu_only", DeviceType::cuda, 5, "a GPU rung", run_gpu, nullptr});
    return reg;
  }();
  return *r;
}

TEST(Registry, AutomaticChoiceIsTheHighestPrioritySupportingVariant) {
  toy().set_default("");
  EXPECT_EQ(toy().select({DeviceType::cpu, false}).name, "fast");
  EXPECT_EQ(toy().select({DeviceType::cpu, true}).name, "slow");  // fast refuses, the next one runs
  EXPECT_EQ(toy().select({DeviceType::cuda, false}).name, "gpu_only");
}

TEST(Registry, ExplicitNamesMustExistAndSupportTheArguments) {
  EXPECT_EQ(toy().select({DeviceType::cpu, false}, "slow").name, "slow");
  try {
    toy().select({DeviceType::cpu, true}, "fast");
    ADD_FAILURE() << "an explicit variant that refuses the problem must throw";
  } catch (const hl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fast needs an even problem"), std::string::npos) << e.what();
  }
  try {
    toy().select({DeviceType::cpu, false}, "gpu_only");
    ADD_FAILURE() << "an explicit name absent on the device must throw";
  } catch (const hl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no variant named 'gpu_only' on cpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("known: fast, slow"), std::string::npos) << e.what();
  }
}

TEST(Registry, APinnedNameAppliesOnlyWhereItExists) {
  // --gemm wmma_pipelined pins the GPU's choice; a CPU call (a host tensor, a gradient check) keeps
  // the automatic choice instead of failing.
  toy().set_default("gpu_only");
  EXPECT_EQ(toy().select({DeviceType::cuda, false}).name, "gpu_only");
  EXPECT_EQ(toy().select({DeviceType::cpu, false}).name, "fast");
  toy().set_default("slow");
  EXPECT_EQ(toy().select({DeviceType::cpu, false}).name, "slow");
  EXPECT_EQ(toy().select({DeviceType::cuda, false}).name, "gpu_only");
  // A name no device knows is a typo: it must be reported, not ignored.
  toy().set_default("fsat");
  EXPECT_THROW(toy().select({DeviceType::cpu, false}), hl::Error);
  toy().set_default("");
}

TEST(Registry, TheEnvironmentPinsLikeSetDefault) {
  ASSERT_EQ(setenv(ToyArgs::env_var, "slow", 1), 0);
  EXPECT_EQ(toy().select({DeviceType::cpu, false}).name, "slow");
  EXPECT_EQ(toy().select({DeviceType::cuda, false}).name, "gpu_only");
  toy().set_default("fast");  // set_default wins over the environment
  EXPECT_EQ(toy().select({DeviceType::cpu, false}).name, "fast");
  toy().set_default("");
  unsetenv(ToyArgs::env_var);
  EXPECT_EQ(toy().select({DeviceType::cpu, false}).name, "fast");
}

// A pinned variant that refuses the call says where the name came from: a user who forgot an exported
// variable must see it named. An explicit name is the caller's own and says nothing more.
TEST(Registry, APinnedVariantThatRefusesSaysWhereTheNameCameFrom) {
  const auto message = [](const std::string& requested) {
    return hl::test::error_of([&] { toy().select({DeviceType::cpu, true}, requested); });
  };
  toy().set_default("fast");
  EXPECT_NE(message("").find("variant 'fast' (pinned by --toy or set_default) cannot run toy odd: fast needs"),
            std::string::npos)
      << message("");
  toy().set_default("");
  ASSERT_EQ(setenv(ToyArgs::env_var, "fast", 1), 0);
  EXPECT_NE(message("").find("variant 'fast' (from HALFLING_TOY_TEST_VARIANT) cannot run"), std::string::npos)
      << message("");
  ASSERT_EQ(setenv(ToyArgs::env_var, "fsat", 1), 0);
  EXPECT_NE(message("").find("no variant named 'fsat' (from HALFLING_TOY_TEST_VARIANT) on cpu"), std::string::npos)
      << message("");
  unsetenv(ToyArgs::env_var);
  EXPECT_NE(message("fast").find("variant 'fast' cannot run toy odd"), std::string::npos) << message("fast");
}

// A CPU-only build registers no CUDA variant, yet a CUDA variant's name pinned for a GPU run
// (HALFLING_GEMM=wmma_pipelined, set_default from --gemm) must still leave its CPU calls to the
// automatic choice, as in a CUDA build, and a typo must still be an error. A family named "gemm" with
// CPU variants alone is such a build's GEMM registry.
struct CpuOnlyGemmArgs {
  static constexpr const char* family = "gemm";
  static constexpr const char* env_var = "HALFLING_TOY_CPU_ONLY_GEMM";
  DeviceType device = DeviceType::cpu;
  std::string describe() const { return "a cpu-only gemm"; }
};
void run_cpu_only(const CpuOnlyGemmArgs&) { last_run = "blocked"; }

TEST(Registry, ACpuOnlyBuildSkipsAPinnedCudaNameOnTheCpu) {
  hl::kernels::Registry<CpuOnlyGemmArgs> reg;
  reg.add({"blocked", DeviceType::cpu, 10, "the CPU's", run_cpu_only, nullptr});
  ASSERT_TRUE(reg.names(DeviceType::cuda).empty());
  reg.set_default("wmma_pipelined");
  EXPECT_EQ(reg.select({DeviceType::cpu}).name, "blocked");
  reg.set_default("");
  ASSERT_EQ(setenv(CpuOnlyGemmArgs::env_var, "wmma_pipelined", 1), 0);
  EXPECT_EQ(reg.select({DeviceType::cpu}).name, "blocked");
  ASSERT_EQ(setenv(CpuOnlyGemmArgs::env_var, "wmma_pipelind", 1), 0);
  EXPECT_NE(hl::test::error_of([&] { reg.select({DeviceType::cpu}); }).find("no variant named 'wmma_pipelind'"),
            std::string::npos);
  unsetenv(CpuOnlyGemmArgs::env_var);
}

// kernels/nocuda/cuda_variant_names.h lists exactly the CUDA variants a CUDA build registers (checked
// in every CUDA build, GPU or not), and every name on it counts as known in any build.
template <class Args>
void expect_cuda_names_listed() {
  const auto& reg = hl::kernels::Registry<Args>::instance();
  const auto listed_view = hl::kernels::cuda_variant_names(Args::family);
  const std::set<std::string> listed(listed_view.begin(), listed_view.end());
  const auto names = reg.names(DeviceType::cuda);
  const std::set<std::string> registered(names.begin(), names.end());
  EXPECT_FALSE(listed.empty()) << Args::family;
  if (hl::runtime::cuda_compiled()) {
    EXPECT_EQ(registered, listed) << Args::family << ": a CUDA variant added or renamed must be listed in "
                                  << "kernels/nocuda/cuda_variant_names.h";
  } else {
    EXPECT_TRUE(registered.empty()) << Args::family;
  }
  for (const auto& name : listed) {
    EXPECT_TRUE(reg.known_anywhere(name)) << Args::family << " " << name;
    EXPECT_TRUE(reg.cuda_name(name)) << Args::family << " " << name;
  }
  EXPECT_FALSE(reg.cuda_name("no_such_variant"));
}

TEST(Registry, CudaVariantNamesMatchTheRegistrations) {
  expect_cuda_names_listed<hl::kernels::GemmArgs>();
  expect_cuda_names_listed<hl::kernels::SoftmaxArgs>();
  expect_cuda_names_listed<hl::kernels::ConvArgs>();
  expect_cuda_names_listed<hl::kernels::BatchNormArgs>();
}

TEST(Registry, AnOptInVariantRunsOnlyWhenAskedForByName) {
  // A new rung lands opt-in until it has run on a GPU: the highest priority must not make it the
  // automatic choice, but every way of naming it must reach it.
  Reg reg;
  reg.add({"slow", DeviceType::cpu, 1, "the simple one", run_slow, nullptr});
  Variant<ToyArgs> unverified{"unverified", DeviceType::cpu, 99, "not yet measured", run_fast, nullptr};
  unverified.opt_in = true;
  reg.add(unverified);
  EXPECT_EQ(reg.all().front().name, "unverified");  // listings keep the priority order
  EXPECT_EQ(reg.select({DeviceType::cpu, false}).name, "slow");
  EXPECT_EQ(reg.select({DeviceType::cpu, false}, "unverified").name, "unverified");
  reg.set_default("unverified");
  EXPECT_EQ(reg.select({DeviceType::cpu, false}).name, "unverified");
  reg.set_default("");
  ASSERT_EQ(setenv(ToyArgs::env_var, "unverified", 1), 0);
  EXPECT_EQ(reg.select({DeviceType::cpu, false}).name, "unverified");
  unsetenv(ToyArgs::env_var);
  // With only opt-in variants there is no automatic choice: an error, not a silent pick.
  Reg only_new;
  only_new.add(unverified);
  EXPECT_THROW(only_new.select({DeviceType::cpu, false}), hl::Error);
}

const char* needs_even(const ToyArgs& a) { return a.odd ? "needs an even problem" : nullptr; }
const char* never(const ToyArgs&) { return "runs on Tuesdays only"; }
const char* not_asked(const ToyArgs&) { return "an opt-in variant's reason"; }

TEST(Registry, WhenNoVariantCanRunTheErrorGivesEachReasonOnce) {
  // The reasons, in priority order, each after the first variant that gave it: what to change, where
  // "no variant can run" alone would leave the user guessing. An opt-in variant is not asked.
  Reg reg;
  reg.add({"even_a", DeviceType::cpu, 9, "", run_fast, needs_even});
  reg.add({"even_b", DeviceType::cpu, 8, "", run_fast, needs_even});
  reg.add({"weekly", DeviceType::cpu, 7, "", run_slow, never});
  Variant<ToyArgs> hidden{"hidden", DeviceType::cpu, 5, "", run_slow, not_asked};
  hidden.opt_in = true;
  reg.add(hidden);
  EXPECT_EQ(reg.select({DeviceType::cpu, false}).name, "even_a");
  try {
    reg.select({DeviceType::cpu, true});
    ADD_FAILURE() << "every variant refuses: the choice must throw";
  } catch (const hl::Error& e) {
    EXPECT_STREQ(e.what(),
                 "toy: no cpu variant can run toy odd (even_a: needs an even problem; weekly: runs on Tuesdays only)");
  }
}

}  // namespace
