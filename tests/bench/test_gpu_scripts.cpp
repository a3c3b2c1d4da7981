// The scripts of a GPU session (scripts/gpu_pack.sh here, scripts/gpu_unpack.sh on the GPU machine,
// scripts/gpu_check.sh): what can be checked without a GPU. They refuse what they cannot use with a
// message that says what to do, and every shell script of the project passes shellcheck.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

std::string script(const std::string& name) { return (fs::path(HALFLING_SOURCE_DIR) / "scripts" / name).string(); }

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(GpuScripts, PackRefusesWhatItCannotPack) {
  // An absolute path, and a folder with no build in it: nothing is built or written.
  auto [s1, o1] = hl::test::run_command("HALFLING_BUILD=/tmp " + script("gpu_pack.sh"));
  EXPECT_NE(s1, 0) << o1;
  EXPECT_TRUE(contains(o1, "must be a folder inside the repository")) << o1;
  auto [s2, o2] = hl::test::run_command("HALFLING_BUILD=no-such-build-dir " + script("gpu_pack.sh"));
  EXPECT_NE(s2, 0) << o2;
  EXPECT_TRUE(contains(o2, "no build in")) << o2;
  EXPECT_FALSE(fs::exists(fs::path(HALFLING_SOURCE_DIR) / "no-such-build-dir"));
}

TEST(GpuScripts, PackRefusesABuildWithoutCuda) {
#ifdef HALFLING_WITH_CUDA
  GTEST_SKIP() << "this is a CUDA build: gpu_pack.sh would build and pack it";
#else
  // This very build directory, if it lies inside the repository (scripts/test.sh's build/ does).
  const fs::path src = fs::weakly_canonical(HALFLING_SOURCE_DIR), bin = fs::weakly_canonical(HALFLING_BINARY_DIR);
  const fs::path rel = bin.lexically_relative(src);
  if (rel.empty() || rel.native().rfind("..", 0) == 0) GTEST_SKIP() << bin << " is outside " << src;
  auto [s, o] = hl::test::run_command("HALFLING_BUILD=" + rel.string() + " " + script("gpu_pack.sh"));
  EXPECT_NE(s, 0) << o;
  EXPECT_TRUE(contains(o, "was not configured with CUDA")) << o;
#endif
}

TEST(GpuScripts, UnpackSaysWhatToCarry) {
  const fs::path empty = fs::path(::testing::TempDir()) / "halfling_empty_carry";
  fs::create_directories(empty);
  auto [s, o] = hl::test::run_command("HALFLING_CARRY=" + empty.string() + " bash " + script("gpu_unpack.sh"));
  EXPECT_NE(s, 0) << o;
  EXPECT_TRUE(contains(o, "build.tar.xz")) << o;
  EXPECT_TRUE(contains(o, "gpu_pack.sh")) << o;
  fs::remove_all(empty);
}

TEST(GpuScripts, CheckNamesItsStages) {
  auto [s1, o1] = hl::test::run_command(script("gpu_check.sh"));
  EXPECT_NE(s1, 0);
  EXPECT_TRUE(contains(o1, "preflight|build|test|sanitize")) << o1;
  EXPECT_TRUE(contains(o1, "|bench-bn|")) << o1;
  EXPECT_TRUE(contains(o1, "|profile")) << o1;
  auto [s2, o2] = hl::test::run_command(script("gpu_check.sh") + " benchmark");
  EXPECT_NE(s2, 0);
  EXPECT_TRUE(contains(o2, "unknown stage 'benchmark'")) << o2;
}

// shellcheck (scripts/setup.sh installs it) on every shell script of the project, run from the
// repository root: the scripts' `# shellcheck source=scripts/...` directives are relative to it, and
// a sourced file is only followed when it is one of the inputs.
TEST(GpuScripts, EveryShellScriptPassesShellcheck) {
  if (hl::test::run_command("command -v shellcheck").first != 0) GTEST_SKIP() << "shellcheck not installed (scripts/setup.sh installs it)";
  const fs::path r = HALFLING_SOURCE_DIR;
  std::string files;
  for (const char* dir : {"scripts", "bench", "datasets"})
    for (const auto& e : fs::directory_iterator(r / dir))
      // append(" ").append(...), not += " " + ...: g++ 12 reports a false -Wrestrict on the latter.
      if (e.path().extension() == ".sh") files.append(" ").append((fs::path(dir) / e.path().filename()).string());
  files += " .ci/run";
  ASSERT_TRUE(contains(files, "gpu_pack.sh")) << files;
  auto [s, o] = hl::test::run_command("cd '" + r.string() + "' && shellcheck" + files);
  EXPECT_EQ(s, 0) << o;
}

}  // namespace
