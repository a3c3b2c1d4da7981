// The flags every tutorial shares (tutorials/common/cli.h), parsed in-process: the defaults, the
// bounds of every checked flag (accepted at the bound, refused just past it, NaN and inf refused),
// and what apply_common_flags does with the device and the variant names.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/device.h"
#include "kernels/batchnorm.h"
#include "kernels/conv.h"
#include "kernels/gemm.h"
#include "kernels/runtime.h"
#include "kernels/softmax.h"
#include "tests/test_util.h"
#include "tutorials/common/cli.h"

namespace {

using hl::tutorial::CommonFlags;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Parse `line` as a tutorial's command line (both flag groups registered); "" when it is accepted,
// else CLI11's message.
std::string parse(const std::string& line, CommonFlags& f,
                  const std::vector<std::string>& precisions = {"fp32", "fp16", "mixed"}) {
  CLI::App app("test");
  hl::tutorial::add_common_flags(app, f, precisions);
  hl::tutorial::add_schedule_flags(app, f);
  try {
    app.parse(line, false);
    return "";
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
}

std::string parse(const std::string& line) {
  CommonFlags f;
  return parse(line, f);
}

TEST(CommonFlags, NoFlagsKeepTheDefaults) {
  CommonFlags f;
  ASSERT_EQ(parse("", f), "");
  EXPECT_EQ(f.device, "auto");
  EXPECT_EQ(f.precision, "fp32");
  EXPECT_EQ(f.loss_scale, "dynamic");
  EXPECT_EQ(f.epochs, 2);
  EXPECT_EQ(f.batch, 128);
  EXPECT_EQ(f.lr, 0.05);
  EXPECT_EQ(f.momentum, 0.9);
  EXPECT_EQ(f.seed, 0u);
  EXPECT_EQ(f.schedule, "constant");
  EXPECT_EQ(f.warmup_epochs, 0.0);
  EXPECT_FALSE(f.smoke || f.detect_anomaly || f.list_variants);
  EXPECT_TRUE(f.data.empty() && f.gemm.empty() && f.softmax.empty() && f.conv.empty() && f.bn.empty() && f.csv.empty());
}

// --smoke's epoch count gives way to an explicit --epochs in every tutorial (smoke_epochs), also to one
// equal to the default (2): what counts is that it was written.
TEST(CommonFlags, AnExplicitEpochCountWinsOverSmoke) {
  for (const auto& [line, want] : std::vector<std::pair<std::string, int64_t>>{
           {"--smoke", 1}, {"--smoke --epochs 3", 3}, {"--epochs 2 --smoke", 2}, {"--smoke --epochs=1", 1}}) {
    CommonFlags f;
    ASSERT_EQ(parse(line, f), "") << line;
    EXPECT_EQ(hl::tutorial::smoke_epochs(f, 1), want) << line;
  }
  CommonFlags f;
  ASSERT_EQ(parse("--smoke", f), "");
  EXPECT_EQ(hl::tutorial::smoke_epochs(f, 2), 2) << "09's smoke count";
  EXPECT_FALSE(f.epochs_given);
}

TEST(CommonFlags, EveryFlagReachesItsField) {
  CommonFlags f;
  ASSERT_EQ(parse("--device gpu --precision mixed --loss-scale static:512 --epochs 7 --batch 32 --lr 0.25 "
                  "--momentum 0.5 --seed 42 --data /tmp/d --gemm g --softmax s --conv c --bn b --csv out.csv --smoke "
                  "--detect-anomaly --list-variants --schedule cosine --warmup-epochs 1.5",
                  f),
            "");
  EXPECT_EQ(f.device, "gpu");
  EXPECT_EQ(f.precision, "mixed");
  EXPECT_EQ(f.loss_scale, "static:512");
  EXPECT_EQ(f.epochs, 7);
  EXPECT_EQ(f.batch, 32);
  EXPECT_EQ(f.lr, 0.25);
  EXPECT_EQ(f.momentum, 0.5);
  EXPECT_EQ(f.seed, 42u);
  EXPECT_EQ(f.data, "/tmp/d");
  EXPECT_EQ(f.gemm, "g");
  EXPECT_EQ(f.softmax, "s");
  EXPECT_EQ(f.conv, "c");
  EXPECT_EQ(f.bn, "b");
  EXPECT_EQ(f.csv, "out.csv");
  EXPECT_TRUE(f.smoke && f.detect_anomaly && f.list_variants);
  EXPECT_EQ(f.schedule, "cosine");
  EXPECT_EQ(f.warmup_epochs, 1.5);
}

// Each bound: accepted at it, refused just past it. NaN and inf are refused by every real-valued flag
// (CLI11's Range alone lets NaN through).
TEST(CommonFlags, BoundsAreCheckedAtTheEdge) {
  for (const char* ok : {"--epochs 1", "--epochs 100000", "--batch 1", "--batch 1048576", "--lr 0", "--lr 100",
                         "--momentum 0", "--momentum 1", "--warmup-epochs 0", "--warmup-epochs 1000",
                         "--device cpu", "--device cuda", "--device auto", "--schedule step"}) {
    EXPECT_EQ(parse(ok), "") << ok;
  }
  for (const char* bad : {"--epochs 0", "--epochs 100001", "--batch 0", "--batch 1048577", "--lr -0.001",
                          "--lr 100.001", "--momentum -0.001", "--momentum 1.001", "--warmup-epochs -0.5",
                          "--warmup-epochs 1000.5", "--device tpu", "--precision bf16", "--schedule linear",
                          "--epochs two"}) {
    EXPECT_NE(parse(bad), "") << bad;
  }
  for (const char* flag : {"--lr", "--momentum", "--warmup-epochs"}) {
    for (const char* value : {"nan", "inf", "-inf"}) {
      const std::string message = parse(std::string(flag).append(" ").append(value));
      EXPECT_TRUE(contains(message, "must be a finite number")) << flag << " " << value << ": " << message;
    }
  }
}

// Numbers are read whole and in decimal, as kernels/dtype.cpp's parse_double / parse_int64 read them, and
// every refusal names the flag and says what is wrong: not a number, not an integer, out of range. A
// seed is 0 to 2^64 - 1: CLI11 alone took -1 as 2^64 - 1 (strtoull negates) and saturated past the
// top, so two different seeds ran as one.
TEST(CommonFlags, NumbersAreReadWholeInDecimalAndRefusedByName) {
  CommonFlags f;
  ASSERT_EQ(parse("--seed 18446744073709551615", f), "");
  EXPECT_EQ(f.seed, std::numeric_limits<uint64_t>::max());
  ASSERT_EQ(parse("--seed 010 --epochs 010 --batch +64", f), "");
  EXPECT_EQ(f.seed, 10u) << "decimal, not octal";
  EXPECT_EQ(f.epochs, 10);
  EXPECT_EQ(f.batch, 64);
  const std::string seed_range = " is out of range (0 to 18446744073709551615)";
  for (const char* bad : {"-1", "-5", "18446744073709551616", "99999999999999999999999", "-18446744073709551616"})
    EXPECT_EQ(parse(std::string("--seed ") + bad), std::string("--seed: '") + bad + "'" + seed_range) << bad;
  EXPECT_EQ(parse("--seed -0", f), "") << "-0 is 0";
  EXPECT_EQ(f.seed, 0u);
  EXPECT_EQ(parse("--seed abc"), "--seed: 'abc' is not a number");
  EXPECT_EQ(parse("--seed=-"), "--seed: '-' is not a number") << "a sign needs a digit after it";
  EXPECT_EQ(parse("--epochs=+"), "--epochs: '+' is not a number");
  EXPECT_EQ(parse("--seed 1.5"), "--seed: '1.5' is not an integer (decimal digits only)");
  EXPECT_EQ(parse("--epochs abc"), "--epochs: 'abc' is not a number");
  EXPECT_EQ(parse("--epochs 2.5"), "--epochs: '2.5' is not an integer (decimal digits only)");
  EXPECT_EQ(parse("--epochs 0x10"), "--epochs: '0x10' is not an integer (decimal digits only)");
  EXPECT_EQ(parse("--epochs ' 3'"), "--epochs: ' 3' is not a number");
  EXPECT_EQ(parse("--epochs 0"), "--epochs: '0' is out of range (1 to 100000)");
  EXPECT_EQ(parse("--epochs 9223372036854775808"), "--epochs: '9223372036854775808' is out of range (1 to 100000)");
  EXPECT_EQ(parse("--batch -1"), "--batch: '-1' is out of range (1 to 1048576)");
  EXPECT_EQ(parse("--lr abc"), "--lr: 'abc' is not a number");
  EXPECT_EQ(parse("--lr 0.1x"), "--lr: '0.1x' is not a number");
  EXPECT_EQ(parse("--lr 1e400"), "--lr: '1e400' is out of range (0 to 100)") << "too large, not 'not finite'";
  EXPECT_EQ(parse("--momentum 1.5"), "--momentum: '1.5' is out of range (0 to 1)");
  EXPECT_EQ(parse("--warmup-epochs nan"), "--warmup-epochs: must be a finite number, got 'nan'");
  errno = ERANGE;  // left by some earlier call: not read as this value's overflow
  EXPECT_EQ(parse("--lr inf"), "--lr: must be a finite number, got 'inf'");
  // Underflow is a number (strtod rounds it to 0 or a subnormal): accepted, as parse_double does.
  ASSERT_EQ(parse("--lr 1e-400 --momentum 4.9406564584124654e-324", f), "");
  EXPECT_EQ(f.lr, 0.0);
  EXPECT_EQ(f.momentum, std::numeric_limits<double>::denorm_min());
  // Reals keep every bit of the value strtod reads (CLI11 converts through long double).
  ASSERT_EQ(parse("--lr 0.1 --momentum 0.30000000000000004", f), "");
  EXPECT_EQ(f.lr, 0.1);
  EXPECT_EQ(f.momentum, 0.30000000000000004);
  // Just above the midpoint of 1 and the next double: strtod rounds up, while x86's strtold lands on
  // the midpoint exactly (its long double has 64 bits), and the double of that rounds to even, to 1.
  ASSERT_EQ(parse("--lr 1.000000000000000111022302462515654042363166809082031251", f), "");
  EXPECT_EQ(f.lr, std::nextafter(1.0, 2.0));
}

// integer_in with a lower bound below zero (no shared flag has one, a program's own flag may): each
// bound accepted, one past it refused, down to INT64_MIN, whose magnitude int64_t cannot hold.
TEST(CommonFlags, IntegerInTakesNegativeLowerBounds) {
  const auto parse_in = [](int64_t lo, uint64_t hi, const std::string& value, int64_t& n) -> std::string {
    CLI::App app("test");
    app.add_option("--n", n)->transform(hl::tutorial::integer_in("INT", lo, hi));
    try {
      app.parse("--n=" + value, false);
      return "";
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
  };
  int64_t n = 99;
  for (const auto& [value, want] : std::vector<std::pair<std::string, int64_t>>{
           {"-5", -5}, {"-1", -1}, {"-0", 0}, {"0", 0}, {"5", 5}}) {
    EXPECT_EQ(parse_in(-5, 5, value, n), "") << value;
    EXPECT_EQ(n, want) << value;
  }
  for (const char* bad : {"-6", "6", "-18446744073709551615"})
    EXPECT_EQ(parse_in(-5, 5, bad, n), std::string("--n: '") + bad + "' is out of range (-5 to 5)") << bad;
  const int64_t min = std::numeric_limits<int64_t>::min();
  ASSERT_EQ(parse_in(min, 0, "-9223372036854775808", n), "");
  EXPECT_EQ(n, min);
  EXPECT_EQ(parse_in(min, 0, "-9223372036854775809", n),
            "--n: '-9223372036854775809' is out of range (-9223372036854775808 to 0)");
  EXPECT_EQ(parse_in(min, 0, "1", n), "--n: '1' is out of range (-9223372036854775808 to 0)");
}

// --loss-scale exists only on tutorials with more than one precision, and its value is checked by
// the scaler's own parser, whose message the user sees.
TEST(CommonFlags, LossScaleIsCheckedAndOnlyWhereThereIsAChoice) {
  EXPECT_EQ(parse("--loss-scale dynamic:init=1024,interval=10"), "");
  EXPECT_EQ(parse("--loss-scale none"), "");
  const std::string bad = parse("--loss-scale static:-1");
  EXPECT_TRUE(contains(bad, "static")) << bad;
  EXPECT_NE(parse("--loss-scale sometimes"), "");
  CommonFlags f;
  EXPECT_NE(parse("--loss-scale none", f, {"fp32"}), "") << "fp32 only: no --loss-scale flag";
  EXPECT_NE(parse("--precision mixed", f, {"fp32"}), "");
  EXPECT_EQ(parse("--precision fp32", f, {"fp32"}), "");
  EXPECT_EQ(parse("--loss-scale static:8 --precision mixed", f, {"fp32", "mixed"}), "") << "two precisions: a choice";
  EXPECT_EQ(f.loss_scale, "static:8");
}

// --help lists the precisions the program accepts, not every mode there is: 08 takes fp32 only, and
// its help once offered "fp32, fp16 or mixed" (then: "--precision: mixed not in {fp32}").
TEST(CliHelp, PrecisionListsTheModesThisProgramAccepts) {
  const auto help = [](const std::vector<std::string>& precisions) {
    CLI::App app("test");
    CommonFlags f;
    f.precision = precisions.front();  // the default shown, as a program sets it
    hl::tutorial::add_common_flags(app, f, precisions);
    return app.help();
  };
  const std::string one = help({"fp32"});
  EXPECT_TRUE(contains(one, "arithmetic: fp32 (the only mode here)")) << one;
  EXPECT_FALSE(contains(one, "fp16")) << one;
  EXPECT_FALSE(contains(one, "mixed")) << one;
  const std::string fp16 = help({"fp16"});
  EXPECT_TRUE(contains(fp16, "arithmetic: fp16 (the only mode here)")) << fp16;
  EXPECT_FALSE(contains(fp16, "fp32")) << fp16;
  const std::string two = help({"fp32", "mixed"});
  EXPECT_TRUE(contains(two, "arithmetic: fp32 or mixed")) << two;
  EXPECT_FALSE(contains(two, "fp16")) << two;
  EXPECT_TRUE(contains(help({"fp32", "fp16", "mixed"}), "arithmetic: fp32, fp16 or mixed"));
  // The programs themselves: what each accepts is what its --help says.
  const auto program_help = [](const std::string& name) {
    return hl::test::run_command(hl::test::tutorial_program(name) + " --help").second;
  };
  EXPECT_TRUE(contains(program_help("03_mlp_mnist"), "arithmetic: fp32 (the only mode here)"));
  EXPECT_TRUE(contains(program_help("04_gemm_ladder"), "arithmetic: fp16 (the only mode here)"));
  EXPECT_TRUE(contains(program_help("06_loss_scaling"), "arithmetic: fp32 or mixed"));
  EXPECT_TRUE(contains(program_help("08_softmax"), "arithmetic: fp32 (the only mode here)"));
  EXPECT_TRUE(contains(program_help("09_cifar10_vgg"), "arithmetic: fp32, fp16 or mixed"));
}

// --list-variants, in every program that takes it (07's and 08's own tests check their families in more
// detail): the variants of each family on each device, and the program stops there (no data needed).
TEST(CommonFlagsOutput, EveryProgramListsItsVariants) {
  for (const char* name : {"03_mlp_mnist", "04_gemm_ladder", "05_mixed_precision", "06_loss_scaling", "07_conv_lenet",
                           "08_softmax", "09_cifar10_vgg"}) {
    SCOPED_TRACE(name);
    const auto [status, out] =
        hl::test::run_command(hl::test::tutorial_program(name) + " --list-variants --data /nonexistent");
    EXPECT_EQ(status, 0) << out;
    for (const char* family : {"gemm on cpu:\n  ", "softmax on cpu:\n  ", "conv on cpu:\n  ", "gemm on cuda:",
                               "bn on cuda"})
      EXPECT_TRUE(contains(out, family)) << family << " in\n" << out;
    EXPECT_FALSE(contains(out, "epoch")) << "it trained: " << out;
  }
}

// check_writable: the up-front check of --save and --csv. It names the flag and the path, says why,
// and leaves nothing behind.
TEST(CliCheckWritable, RefusesWhatCannotBeWrittenAndLeavesNothingBehind) {
  namespace fs = std::filesystem;
  using hl::tutorial::WrittenBy;
  const fs::path dir = fs::temp_directory_path() / ("halfling_writable_" + std::to_string(hl::test::fresh_seed()));
  fs::create_directories(dir);
  const auto check = [](const std::string& flag, const fs::path& path, WrittenBy how) {
    return hl::test::error_of([&] { hl::tutorial::check_writable(flag, path.string(), how); });
  };
  for (const WrittenBy how : {WrittenBy::stream, WrittenBy::atomic_replace}) {
    SCOPED_TRACE(how == WrittenBy::stream ? "stream" : "atomic_replace");
    EXPECT_EQ(check("--save", dir / "nodir" / "m.safetensors", how),
              "--save: cannot write " + (dir / "nodir" / "m.safetensors").string() + ": the folder " +
                  (dir / "nodir").string() + " does not exist");
    EXPECT_FALSE(fs::exists(dir / "nodir")) << "no folder is made";
    EXPECT_EQ(check("--csv", dir, how), "--csv: cannot write " + dir.string() + ": it is a folder (give a file name in it)");
    std::ofstream(dir / "file") << "x";
    EXPECT_EQ(check("--save", dir / "file" / "m.safetensors", how),
              "--save: cannot write " + (dir / "file" / "m.safetensors").string() + ": the folder " +
                  (dir / "file").string() + " is not a folder");
    EXPECT_EQ(check("--save", "", how), "--save: cannot write : no file name given");
    // Writable: a new file, an existing one (left as it is), and the folder holds nothing new.
    EXPECT_EQ(check("--save", dir / "new.safetensors", how), "(no error)");
    EXPECT_EQ(check("--csv", dir / "file", how), "(no error)");
    std::ifstream in(dir / "file");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "x") << "an existing file is not truncated";
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
    EXPECT_EQ(left, std::vector<std::string>{"file"}) << "the check left a file behind";
  }
  // Written in place, an existing file need only be writable itself (--csv /dev/stdout works for anyone).
  EXPECT_EQ(check("--csv", "/dev/null", WrittenBy::stream), "(no error)");
  // A folder where no file can be made, not even by root (/proc): an existing file there can still be
  // written in place, but not replaced through a temporary file beside it.
  ASSERT_TRUE(fs::exists("/proc/self/comm"));
  EXPECT_EQ(check("--csv", "/proc/self/comm", WrittenBy::stream), "(no error)");
  EXPECT_TRUE(check("--save", "/proc/self/comm", WrittenBy::atomic_replace)
                  .starts_with("--save: cannot write /proc/self/comm: cannot create a file in /proc/self: "));
  // Started with stdin closed, the temporary file gets descriptor 0: a file like any other.
  const int saved_stdin = ::dup(0);  // -1 when this process was started with stdin closed already
  if (saved_stdin >= 0) ::close(0);
  const std::string with_stdin_closed = check("--save", dir / "new.safetensors", WrittenBy::atomic_replace);
  if (saved_stdin >= 0) {
    ASSERT_EQ(::dup2(saved_stdin, 0), 0);
    ::close(saved_stdin);
  }
  EXPECT_EQ(with_stdin_closed, "(no error)");
  // Permissions (root writes anywhere: not checked then).
  if (geteuid() != 0) {
    fs::create_directories(dir / "locked");
    std::ofstream(dir / "locked" / "old.safetensors") << "x";
    fs::permissions(dir / "locked", fs::perms::owner_read | fs::perms::owner_exec);
    const std::string denied = ": cannot create a file in " + (dir / "locked").string() + ": Permission denied";
    EXPECT_EQ(check("--save", dir / "locked" / "m.safetensors", WrittenBy::atomic_replace),
              "--save: cannot write " + (dir / "locked" / "m.safetensors").string() + denied);
    // Replaced through a temporary file in the folder, an existing file needs the folder writable too.
    EXPECT_EQ(check("--save", dir / "locked" / "old.safetensors", WrittenBy::atomic_replace),
              "--save: cannot write " + (dir / "locked" / "old.safetensors").string() + denied);
    EXPECT_EQ(check("--csv", dir / "locked" / "old.safetensors", WrittenBy::stream), "(no error)");
    fs::permissions(dir / "locked", fs::perms::owner_all);
  }
  fs::remove_all(dir);
}

// A HALFLING_* variable that names no variant of its family on any device is a typo, refused with the
// names per device, whichever device runs. HALFLING_BN once passed unchecked on the CPU, which has no
// batch-norm variants, so a CPU run ignored a typo silently.
class CliEnvironment : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* var : {"HALFLING_GEMM", "HALFLING_SOFTMAX", "HALFLING_CONV", "HALFLING_BN"}) {
      const auto it = saved_.find(var);
      if (it != saved_.end())
        setenv(var, it->second.c_str(), 1);
      else
        unsetenv(var);
    }
    hl::kernels::GemmRegistry::instance().set_default("");
  }
  void SetUp() override {
    for (const char* var : {"HALFLING_GEMM", "HALFLING_SOFTMAX", "HALFLING_CONV", "HALFLING_BN"}) {
      if (const char* v = std::getenv(var)) saved_[var] = v;
      unsetenv(var);
    }
  }
  std::map<std::string, std::string> saved_;
};

TEST_F(CliEnvironment, AVariantNameNoDeviceHasIsRefusedNamingTheVariable) {
  const auto message = [] {
    return hl::test::error_of([] { hl::tutorial::apply_common_flags(CommonFlags{.device = "cpu"}); });
  };
  ASSERT_EQ(setenv("HALFLING_BN", "bogus", 1), 0);
  EXPECT_EQ(message(),
            "HALFLING_BN=bogus: no bn variant of that name on any device (known on cpu: none: this family has one "
            "implementation there; on cuda: split, per_channel; unset HALFLING_BN for the automatic choice)");
  EXPECT_EQ(hl::test::error_of([] { hl::tutorial::check_variant_environment(); }), message()) << "the one check";
  // A name some device has is accepted on every device: the registry applies it where it exists.
  ASSERT_EQ(setenv("HALFLING_BN", "per_channel", 1), 0);
  EXPECT_EQ(message(), "(no error)");
  ASSERT_EQ(setenv("HALFLING_BN", "", 1), 0);
  EXPECT_EQ(message(), "(no error)") << "an empty variable means unset";
  unsetenv("HALFLING_BN");

  const auto known = [](const auto& registry, hl::DeviceType d) {
    std::string out;
    for (const auto& n : registry.names(d)) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  const auto expect_refused = [&](const char* var, const std::string& family, const auto& registry) {
    SCOPED_TRACE(var);
    ASSERT_EQ(setenv(var, "bogus", 1), 0);
    const std::string m = message();
    EXPECT_TRUE(contains(m, std::string(var) + "=bogus: no " + family + " variant of that name on any device (known on cpu: " +
                                known(registry, hl::DeviceType::cpu) + "; on cuda: "))
        << m;
    for (const auto& n : hl::kernels::cuda_variant_names(family)) EXPECT_TRUE(contains(m, std::string(n))) << m;
    // The same on a CUDA run (or its fallback to the CPU, without a GPU).
    EXPECT_EQ(hl::test::error_of([] { hl::tutorial::apply_common_flags(CommonFlags{.device = "cuda"}); }), m);
    unsetenv(var);
  };
  expect_refused("HALFLING_GEMM", "gemm", hl::kernels::GemmRegistry::instance());
  expect_refused("HALFLING_SOFTMAX", "softmax", hl::kernels::SoftmaxRegistry::instance());
  expect_refused("HALFLING_CONV", "conv", hl::kernels::ConvRegistry::instance());
  // Each CPU name and each CUDA name is accepted with --device cpu.
  for (const auto& n : hl::kernels::GemmRegistry::instance().names(hl::DeviceType::cpu)) {
    ASSERT_EQ(setenv("HALFLING_GEMM", n.c_str(), 1), 0);
    EXPECT_EQ(message(), "(no error)") << n;
  }
  for (const auto& n : hl::kernels::cuda_variant_names("gemm")) {
    ASSERT_EQ(setenv("HALFLING_GEMM", std::string(n).c_str(), 1), 0);
    EXPECT_EQ(message(), "(no error)") << n;
  }
}

// apply_common_flags turns --device into a Device, switches anomaly detection, and pins each
// registry's default after checking the name exists on that device (restored after the test).
class ApplyCommonFlags : public ::testing::Test {
 protected:
  void TearDown() override {
    hl::kernels::GemmRegistry::instance().set_default("");
    hl::kernels::SoftmaxRegistry::instance().set_default("");
    hl::kernels::ConvRegistry::instance().set_default("");
    hl::kernels::BatchNormRegistry::instance().set_default("");
    hl::set_detect_anomaly(false);
  }
};

TEST_F(ApplyCommonFlags, DeviceAndAnomalyDetection) {
  CommonFlags f;
  f.device = "cpu";
  f.detect_anomaly = true;
  EXPECT_EQ(hl::tutorial::apply_common_flags(f), hl::Device::cpu);
  EXPECT_TRUE(hl::detect_anomaly());
  f.detect_anomaly = false;
  f.device = "auto";
  const hl::Device want = hl::runtime::cuda_available() ? hl::Device::cuda : hl::Device::cpu;
  EXPECT_EQ(hl::tutorial::apply_common_flags(f), want);
  EXPECT_FALSE(hl::detect_anomaly());
  f.device = "tpu";
  EXPECT_THROW(hl::tutorial::apply_common_flags(f), hl::Error);
}

TEST_F(ApplyCommonFlags, KnownNamesArePinnedOnEveryRegistry) {
  CommonFlags f;
  f.device = "cpu";
  const auto gemms = hl::kernels::GemmRegistry::instance().names(hl::DeviceType::cpu);
  const auto softmaxes = hl::kernels::SoftmaxRegistry::instance().names(hl::DeviceType::cpu);
  const auto convs = hl::kernels::ConvRegistry::instance().names(hl::DeviceType::cpu);
  ASSERT_GE(gemms.size(), 2u);
  ASSERT_GE(softmaxes.size(), 1u);
  ASSERT_GE(convs.size(), 1u);
  f.gemm = gemms.back();  // the lowest priority: never the automatic choice
  f.softmax = softmaxes.back();
  f.conv = convs.back();
  hl::tutorial::apply_common_flags(f);
  EXPECT_EQ(hl::kernels::GemmRegistry::instance().default_name(), gemms.back());
  EXPECT_EQ(hl::kernels::SoftmaxRegistry::instance().default_name(), softmaxes.back());
  EXPECT_EQ(hl::kernels::ConvRegistry::instance().default_name(), convs.back());
  EXPECT_EQ(hl::tutorial::conv_variant_for(hl::Device::cpu, hl::DType::f32), convs.back());
  // Empty names leave the pins alone.
  hl::tutorial::apply_common_flags(CommonFlags{.device = "cpu"});
  EXPECT_EQ(hl::kernels::GemmRegistry::instance().default_name(), gemms.back());
}

TEST_F(ApplyCommonFlags, UnknownNamesAreRefusedWithTheChoices) {
  auto message = [](CommonFlags f) {
    f.device = "cpu";
    try {
      hl::tutorial::apply_common_flags(f);
    } catch (const hl::Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::string known;
  for (const auto& n : hl::kernels::GemmRegistry::instance().names(hl::DeviceType::cpu))
    known.append(known.empty() ? "" : ", ").append(n);
  EXPECT_EQ(message({.gemm = "fastest"}), "--gemm: no variant 'fastest' on cpu (known: " + known + ")");
  EXPECT_TRUE(contains(message({.softmax = "nope"}), "--softmax: no variant 'nope' on cpu (known: "));
  EXPECT_TRUE(contains(message({.conv = "nope"}), "--conv: no variant 'nope' on cpu (known: "));
  // The CPU has no batch-norm registry variants: the message says why rather than listing nothing.
  ASSERT_TRUE(hl::kernels::BatchNormRegistry::instance().names(hl::DeviceType::cpu).empty());
  EXPECT_EQ(message({.bn = "per_channel"}),
            "--bn: no variant 'per_channel' on cpu (known: none: this family has one implementation there)");
  EXPECT_EQ(hl::kernels::GemmRegistry::instance().default_name(), "") << "nothing pinned by a refused flag";
  EXPECT_EQ(hl::kernels::BatchNormRegistry::instance().default_name(), "");
}

// `--device cuda` on a machine without a usable GPU runs on the CPU (DESIGN.md §2): a CUDA variant that
// the command names, by flag or in the environment, is dropped with one notice naming it, instead of
// failing the run. A name no build has is still refused, and so is a CUDA name with --device cpu.
TEST_F(ApplyCommonFlags, ACudaVariantIsDroppedWithANoticeWhenTheCpuRunsInstead) {
  if (hl::runtime::cuda_available()) GTEST_SKIP() << "a GPU is present: --device cuda does not fall back";
  const auto run = [](const CommonFlags& f, std::string& err) {
    testing::internal::CaptureStderr();
    std::string message;
    try {
      EXPECT_EQ(hl::tutorial::apply_common_flags(f), hl::Device::cpu);
    } catch (const hl::Error& e) {
      message = e.what();
    }
    err = testing::internal::GetCapturedStderr();
    return message;
  };
  std::string err;
  EXPECT_EQ(run({.device = "cuda", .gemm = "wmma_pipelined", .bn = "split"}, err), "");
  EXPECT_TRUE(contains(err, "halfling: --gemm wmma_pipelined is a CUDA variant, and this run is on the CPU: ignored"))
      << err;
  EXPECT_TRUE(contains(err, "halfling: --bn split is a CUDA variant")) << err;
  EXPECT_EQ(hl::kernels::GemmRegistry::instance().default_name(), "") << "nothing pinned";
  EXPECT_EQ(hl::kernels::BatchNormRegistry::instance().default_name(), "");
  // "auto" found no GPU: the same.
  EXPECT_EQ(run({.device = "auto", .conv = "implicit_gemm_nhwc"}, err), "");
  EXPECT_TRUE(contains(err, "--conv implicit_gemm_nhwc is a CUDA variant")) << err;
  // A CPU name is pinned as usual; a typo and an explicit --device cpu are refused as before.
  const std::string cpu_gemm = hl::kernels::GemmRegistry::instance().names(hl::DeviceType::cpu).back();
  EXPECT_EQ(run({.device = "cuda", .gemm = cpu_gemm}, err), "");
  EXPECT_EQ(hl::kernels::GemmRegistry::instance().default_name(), cpu_gemm);
  EXPECT_TRUE(contains(run({.device = "cuda", .gemm = "wmma_pipelind"}, err), "--gemm: no variant 'wmma_pipelind'"));
  EXPECT_TRUE(contains(run({.device = "cpu", .gemm = "wmma_pipelined"}, err), "--gemm: no variant 'wmma_pipelined'"));
  hl::kernels::GemmRegistry::instance().set_default("");

  // The environment: one notice too, and the CPU's GEMM runs (the registry skips the CUDA name).
  const char* old = std::getenv("HALFLING_GEMM");
  const std::string saved = old != nullptr ? old : "";
  ASSERT_EQ(setenv("HALFLING_GEMM", "wmma_pipelined", 1), 0);
  EXPECT_EQ(run({.device = "cuda"}, err), "");
  EXPECT_TRUE(contains(err, "halfling: HALFLING_GEMM=wmma_pipelined is a CUDA variant")) << err;
  EXPECT_EQ(run({.device = "cpu"}, err), "");
  EXPECT_FALSE(contains(err, "HALFLING_GEMM")) << "asked for the CPU: nothing fell back\n" << err;
  std::vector<float> A(64, 1.0f), B(64, 1.0f), C(64, 0.0f);
  hl::kernels::GemmArgs g;
  g.M = g.N = g.K = 8;
  g.A = A.data();
  g.B = B.data();
  g.C = C.data();
  hl::kernels::set_dense_ld(g);
  EXPECT_EQ(hl::test::error_of([&] { hl::kernels::gemm(g); }), "(no error)");
  EXPECT_EQ(C[0], 8.0f);
  if (old != nullptr)
    setenv("HALFLING_GEMM", saved.c_str(), 1);
  else
    unsetenv("HALFLING_GEMM");
}

// The lines under `header`, up to the next line that does not start with two spaces (each with its
// newline).
std::string section(const std::string& s, const std::string& header) {
  const size_t at = s.find(header);
  if (at == std::string::npos) return "";
  size_t end = s.find('\n', at);
  while (end != std::string::npos && s.compare(end + 1, 2, "  ") == 0) end = s.find('\n', end + 1);
  return s.substr(at, end == std::string::npos ? std::string::npos : end + 1 - at);
}

// Every variant of `registry`, once, in the section of its own device, with its priority; opt-in
// ones say so.
template <class Registry>
void expect_listed(const std::string& s, const Registry& registry, const std::string& family) {
  for (const auto& v : registry.all()) {
    std::ostringstream line;
    line << "  " << v.name << "  (priority " << v.priority << (v.opt_in ? ", opt-in: by name only" : "") << ")  "
         << v.summary << "\n";
    const std::string header = family == "bn" ? "bn on cuda" : family + " on " + hl::device_name(v.device) + ":";
    EXPECT_TRUE(contains(section(s, header), line.str())) << line.str() << "under " << header << " in:\n" << s;
    const hl::DeviceType other_device = v.device == hl::DeviceType::cpu ? hl::DeviceType::cuda : hl::DeviceType::cpu;
    if (registry.find(v.name, other_device) != nullptr) continue;  // a name both devices have
    const std::string other = family + " on " + hl::device_name(other_device) + ":";
    EXPECT_FALSE(contains(section(s, other), "  " + v.name + "  (priority")) << v.name << " under " << other;
  }
}

TEST(CommonFlagsOutput, PrintVariantsListsEveryVariantUnderItsDevice) {
  std::ostringstream out;
  std::streambuf* old = std::cout.rdbuf(out.rdbuf());
  hl::tutorial::print_variants();
  std::cout.rdbuf(old);
  const std::string s = out.str();
  for (const char* header : {"gemm on cpu:\n", "gemm on cuda:\n", "softmax on cpu:\n", "softmax on cuda:\n",
                             "conv on cpu:\n", "conv on cuda:\n", "bn on cuda (the CPU has one batch-norm"}) {
    EXPECT_TRUE(contains(s, header)) << header;
  }
  ASSERT_FALSE(hl::kernels::GemmRegistry::instance().names(hl::DeviceType::cpu).empty());
  expect_listed(s, hl::kernels::GemmRegistry::instance(), "gemm");
  expect_listed(s, hl::kernels::SoftmaxRegistry::instance(), "softmax");
  expect_listed(s, hl::kernels::ConvRegistry::instance(), "conv");
  expect_listed(s, hl::kernels::BatchNormRegistry::instance(), "bn");
  EXPECT_EQ(contains(s, "(no GPU here: "), !hl::runtime::cuda_available());
}

// The tutorials' header line names the convolution the registry would pick on each device. A CUDA
// build registers its variants with or without a GPU present, so the GPU's pick is checked there too.
TEST(CommonFlagsOutput, ConvVariantForNamesThePickOfThatDevice) {
  const auto& convs = hl::kernels::ConvRegistry::instance();
  const auto cpu = convs.names(hl::DeviceType::cpu);
  EXPECT_EQ(hl::tutorial::conv_variant_for(hl::Device::cpu, hl::DType::f32), cpu.front()) << "the highest priority";
  const auto cuda = convs.names(hl::DeviceType::cuda);
  if (cuda.empty()) GTEST_SKIP() << "a CPU-only build: no CUDA convolution registered";
  // The pick for a VGG-small layer: the registry's own choice for real arguments of that dtype.
  for (const hl::DType dt : {hl::DType::f16, hl::DType::f32}) {
    hl::kernels::ConvArgs layer;
    layer.device = hl::DeviceType::cuda;
    layer.N = 8;
    layer.C = layer.K = 64;
    layer.H = layer.W = 16;
    layer.R = layer.S = 3;
    layer.pad_h = layer.pad_w = 1;
    layer.in_type = layer.out_type = dt;
    const std::string pick = hl::tutorial::conv_variant_for(hl::Device::cuda, dt);
    EXPECT_NE(std::find(cuda.begin(), cuda.end(), pick), cuda.end()) << pick << " is not a CUDA variant";
    EXPECT_EQ(pick, convs.select(layer).name) << hl::dtype_name(dt);
  }
}

TEST(CommonFlagsOutput, DefaultDataDirFollowsHalflingData) {
  const char* old = std::getenv("HALFLING_DATA");
  const std::string saved = old != nullptr ? old : "";
  unsetenv("HALFLING_DATA");
  EXPECT_EQ(hl::tutorial::default_data_dir("mnist"), "data/mnist");
  setenv("HALFLING_DATA", "/srv/sets", 1);
  EXPECT_EQ(hl::tutorial::default_data_dir("cifar10"), "/srv/sets/cifar10");
  if (old != nullptr) {
    setenv("HALFLING_DATA", saved.c_str(), 1);
  } else {
    unsetenv("HALFLING_DATA");
  }
}

}  // namespace
