// The variant registry's selection rules (kernels/registry.h), on a toy family of its own so the
// test does not depend on which real kernels a build has.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/error.h"
#include "kernels/registry.h"

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

}  // namespace
