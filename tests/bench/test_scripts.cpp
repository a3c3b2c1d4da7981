// The entry-point scripts scripts/setup.sh, scripts/build.sh and scripts/sanitize.sh, run against
// stand-ins: small shell scripts put first on the PATH in place of apt-get, dpkg-query, sudo, cmake,
// ctest, nvcc and the like, which record how they were called. So what each script asks of the
// system is checked in a second, without root, a network, a compiler run or a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/datasets/data_files.h"  // TempDir
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::string script(const std::string& name) { return (fs::path(HALFLING_SOURCE_DIR) / "scripts" / name).string(); }

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A folder of stand-in commands, and the log they append their calls to.
class Stubs {
 public:
  Stubs() { fs::create_directories(bin()); }
  fs::path bin() const { return fs::path(tmp_.str()) / "bin"; }
  fs::path dir() const { return tmp_.str(); }
  fs::path log() const { return dir() / "calls.log"; }
  std::string calls() const { return read_text(log()); }

  // A bash script named `name` in bin(); $LOG in `body` is the calls log.
  void add(const std::string& name, const std::string& body) const {
    const fs::path p = bin() / name;
    std::ofstream(p) << "#!/usr/bin/env bash\nLOG='" << log().string() << "'\n" << body << "\n";
    fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  }

  // Runs `command` with the stand-ins first on the PATH.
  std::pair<int, std::string> run(const std::string& env_and_command) const {
    return hl::test::run_command("PATH='" + bin().string() + "':\"$PATH\" " + env_and_command);
  }

 private:
  hl::test::TempDir tmp_;
};

// ---- scripts/setup.sh --------------------------------------------------------------------------

// Every package missing; apt-get records its environment's DEBIAN_FRONTEND and its arguments, and its
// `update` finds the package lists locked the first `locked` times.
void add_apt_stubs(const Stubs& s, int uid, int locked, const std::string& cmake_version = "3.25.1") {
  s.add("dpkg-query", "exit 1");
  s.add("id", "[[ ${1:-} == -u ]] && echo " + std::to_string(uid));
  s.add("sleep", "echo \"sleep $*\" >>\"$LOG\"");
  s.add("cmake", "[[ ${1:-} == --version ]] && echo 'cmake version " + cmake_version + "'");
  s.add("apt-get",
        "echo \"apt-get DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-unset} $*\" >>\"$LOG\"\n"
        "if [[ \" $* \" == *' update '* ]]; then\n"
        "  n=$(cat '" + (s.dir() / "updates").string() + "' 2>/dev/null || echo 0)\n"
        "  echo $((n + 1)) >'" + (s.dir() / "updates").string() + "'\n"
        "  if ((n < " + std::to_string(locked) + ")); then\n"
        "    echo 'E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1 (apt-get)' >&2\n"
        "    exit 100\n"
        "  fi\n"
        "fi");
}

TEST(SetupScript, InstallsClangsRuntimeAndOpenMpWithoutQuestionsAndWaitsForTheLock) {
  const Stubs s;
  add_apt_stubs(s, 0, 2);  // root; the lists locked twice
  const auto [status, out] = s.run("bash " + script("setup.sh"));
  ASSERT_EQ(status, 0) << out << s.calls();
  const std::string calls = s.calls();
  // clang's OpenMP (find_package(OpenMP) with clang) and the sanitizer/libFuzzer runtime of whatever
  // clang the distribution has, not of clang 14 alone.
  EXPECT_TRUE(contains(calls, " libomp-dev")) << calls;
  EXPECT_TRUE(contains(calls, " libclang-rt-dev")) << calls;
  EXPECT_FALSE(contains(calls, "libclang-rt-14-dev")) << calls;
  EXPECT_TRUE(contains(out, "waiting for it")) << out;
  EXPECT_EQ(read_text(s.dir() / "updates"), "3\n") << calls;
  int apt_calls = 0;
  for (size_t at = calls.find("apt-get "); at != std::string::npos; at = calls.find("apt-get ", at + 1)) {
    const std::string line = calls.substr(at, calls.find('\n', at) - at);
    EXPECT_TRUE(contains(line, "DEBIAN_FRONTEND=noninteractive")) << line;
    EXPECT_TRUE(contains(line, "-o DPkg::Lock::Timeout=600")) << line;
    ++apt_calls;
  }
  EXPECT_EQ(apt_calls, 4) << "three updates and one install\n" << calls;
}

TEST(SetupScript, KeepsTheNoninteractiveFrontendThroughSudo) {
  const Stubs s;
  add_apt_stubs(s, 1000, 0);
  // sudo with Debian's env_reset: the command gets none of the caller's environment but the PATH.
  s.add("sudo", "[[ ${1:-} == -n ]] && shift\nexec env -i PATH=\"$PATH\" \"$@\"");
  const auto [status, out] = s.run("DEBIAN_FRONTEND=noninteractive bash " + script("setup.sh"));
  ASSERT_EQ(status, 0) << out << s.calls();
  const std::string calls = s.calls();
  EXPECT_TRUE(contains(calls, "apt-get DEBIAN_FRONTEND=noninteractive -o DPkg::Lock::Timeout=600 update")) << calls;
  EXPECT_TRUE(contains(calls, "apt-get DEBIAN_FRONTEND=noninteractive -o DPkg::Lock::Timeout=600 install")) << calls;
  EXPECT_FALSE(contains(calls, "DEBIAN_FRONTEND=unset")) << calls;
}

TEST(SetupScript, RefusesACmakeOlderThanCMakeListsAsksFor) {
  const Stubs s;
  add_apt_stubs(s, 1000, 0, "3.22.1");  // Ubuntu 22.04's
  s.add("dpkg-query", "echo 'install ok installed'");  // everything installed
  auto [status, out] = s.run("bash " + script("setup.sh"));
  EXPECT_NE(status, 0) << out;
  EXPECT_TRUE(contains(out, "CMake 3.22.1")) << out;
  EXPECT_TRUE(contains(out, "needs CMake 3.24 or newer")) << out;
  add_apt_stubs(s, 1000, 0, "3.25.1");  // Debian 12's
  s.add("dpkg-query", "echo 'install ok installed'");
  std::tie(status, out) = s.run("bash " + script("setup.sh"));
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "");
  EXPECT_EQ(s.calls(), "") << "nothing to install";
}

// ---- scripts/build.sh --------------------------------------------------------------------------

// cmake records its arguments (configure: "configure ARGS", build: "build ARGS"); nvcc is there and
// nvidia-smi lists no GPU, so a build that chose nothing is the compile-check one.
void add_build_stubs(const Stubs& s) {
  s.add("cmake",
        "if [[ ${1:-} == --build ]]; then echo \"build $*\" >>\"$LOG\"; exit 0; fi\n"
        "echo \"configure $*\" >>\"$LOG\"\n"
        "if [[ -n ${STUB_CONFIGURE_FAILS:-} ]]; then echo 'CMake Error: stub says no' >&2; exit 1; fi\n"
        "echo '-- halfling: CUDA backend OFF'");
  s.add("nvcc", "exit 0");
  s.add("nvidia-smi", "exit 9");
}

TEST(BuildScript, ReadsEverySpellingOfACpuOnlyBuildAndCreatesTheFolder) {
  const Stubs s;
  add_build_stubs(s);
  const fs::path build = s.dir() / "not" / "yet" / "build";  // its parents missing too
  const std::string run = "HALFLING_BUILD='" + build.string() + "' bash " + script("build.sh");
  for (const char* cpu_only : {"-DHALFLING_CUDA=OFF", "-DHALFLING_CUDA:STRING=OFF", "-D HALFLING_CUDA=OFF",
                               "-DCMAKE_CUDA_ARCHITECTURES:STRING=90"}) {
    fs::remove(s.log());
    const auto [status, out] = s.run(run + " " + cpu_only);
    ASSERT_EQ(status, 0) << cpu_only << ": " << out;
    EXPECT_FALSE(contains(out, "no GPU visible")) << cpu_only << ": " << out;
    EXPECT_FALSE(contains(s.calls(), "75;90")) << cpu_only << ": " << s.calls();
    EXPECT_TRUE(contains(out, "halfling: CUDA backend OFF")) << out;
    EXPECT_TRUE(fs::exists(build / "configure.log")) << out;
  }
  // Nothing chosen, and no GPU: the compile-check build for sm_75 and sm_90.
  fs::remove(s.log());
  auto [status, out] = s.run(run);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "no GPU visible")) << out;
  EXPECT_TRUE(contains(s.calls(), "-DCMAKE_CUDA_ARCHITECTURES=75;90 -DHALFLING_CUDA_CHECK_ONLY=ON")) << s.calls();
  // A build configured CPU-only before: left CPU-only, without the message.
  std::ofstream(build / "CMakeCache.txt") << "HALFLING_CUDA:STRING=OFF\n";
  fs::remove(s.log());
  std::tie(status, out) = s.run(run);
  ASSERT_EQ(status, 0) << out;
  EXPECT_FALSE(contains(out, "no GPU visible")) << out;
  EXPECT_FALSE(contains(s.calls(), "75;90")) << s.calls();
}

TEST(BuildScript, BuildsOnlyTheTargetsItIsGivenAndSaysWhenConfiguringFails) {
  const Stubs s;
  add_build_stubs(s);
  const std::string run = "HALFLING_BUILD='" + (s.dir() / "build").string() + "' HALFLING_JOBS=3 bash " + script("build.sh");
  auto [status, out] = s.run(run + " -DHALFLING_CUDA=OFF --target 05_mixed_precision --target=03_mlp_mnist -DX=1");
  ASSERT_EQ(status, 0) << out;
  const std::string calls = s.calls();
  EXPECT_TRUE(contains(calls, "-DHALFLING_CUDA=OFF -DX=1\n")) << calls;
  EXPECT_FALSE(contains(calls.substr(0, calls.find("\nbuild ")), "--target")) << "configure got a build option\n" << calls;
  EXPECT_TRUE(contains(calls, "build --build " + (s.dir() / "build").string() +
                                  " -j3 --target 05_mixed_precision 03_mlp_mnist\n"))
      << calls;

  fs::remove(s.log());
  std::tie(status, out) = s.run("STUB_CONFIGURE_FAILS=1 " + run + " -DHALFLING_CUDA=OFF");
  EXPECT_NE(status, 0) << out;
  EXPECT_TRUE(contains(out, "CMake Error: stub says no")) << out;
  EXPECT_TRUE(contains(out, "configuring " + (s.dir() / "build").string() + " failed")) << out;
  EXPECT_FALSE(contains(s.calls(), "build --build")) << s.calls();

  std::tie(status, out) = s.run(run + " --target");
  EXPECT_EQ(status, 2) << out;
  EXPECT_TRUE(contains(out, "--target needs a target name")) << out;
}

// ---- scripts/sanitize.sh -----------------------------------------------------------------------

// clang is "installed" (so the choice of compiler does not depend on this machine); cmake writes
// the cache and compile commands a configure would, from its -D arguments, and records whether a
// cache was there before; ctest records its arguments and passes.
//   STUB_DROP_SANITIZE=1: the configure leaves HALFLING_SANITIZE empty, as CMake's own cache wipe
//                         after a compiler change does;
//   STUB_NO_FLAGS=1: the cache is right but the compile commands lack -fsanitize.
void add_sanitize_stubs(const Stubs& s) {
  s.add("clang", "exit 0");
  s.add("clang++", "exit 0");
  s.add("cmake",
        "if [[ ${1:-} == --build ]]; then echo \"build $*\" >>\"$LOG\"; exit 0; fi\n"
        "echo \"configure-args $*\" >>\"$LOG\"\n"
        "build='' ; declare -A def\n"
        "while (($# > 0)); do\n"
        "  case $1 in\n"
        "    -B) build=$2; shift 2 ;;\n"
        "    -S) shift 2 ;;\n"
        "    -D*) d=${1#-D}; n=${d%%=*}; def[${n%%:*}]=${d#*=}; shift ;;\n"
        "    *) shift ;;\n"
        "  esac\n"
        "done\n"
        "echo \"configure cache-before=$([[ -f $build/CMakeCache.txt ]] && echo yes || echo no)\" >>\"$LOG\"\n"
        "san=${def[HALFLING_SANITIZE]:-}\n"
        "[[ -z ${STUB_DROP_SANITIZE:-} ]] || san=''\n"
        "mkdir -p \"$build/CMakeFiles\"\n"
        "printf 'CMAKE_CXX_COMPILER:FILEPATH=%s\\nHALFLING_SANITIZE:STRING=%s\\nHALFLING_CUDA:STRING=%s\\n' \\\n"
        "  \"${def[CMAKE_CXX_COMPILER]:-/usr/bin/c++}\" \"$san\" \"${def[HALFLING_CUDA]:-AUTO}\" >\"$build/CMakeCache.txt\"\n"
        "flags=''\n"
        "[[ -z $san || -n ${STUB_NO_FLAGS:-} ]] || flags=\"-fsanitize=$san\"\n"
        "echo \"[{\\\"command\\\": \\\"c++ $flags -c x.cpp\\\"}]\" >\"$build/compile_commands.json\"");
  s.add("ctest",
        "echo \"ctest $*\" >>\"$LOG\"\n"
        "echo \"ctest-env OMP_TOOL_LIBRARIES=${OMP_TOOL_LIBRARIES:-} TSAN_OPTIONS=${TSAN_OPTIONS:-}\" >>\"$LOG\"\n"
        "echo '100% tests passed, 0 tests failed out of 1'");
}

TEST(SanitizeScript, ConfiguresFromScratchWhenTheCompilerOrTheSanitizersChanged) {
  const Stubs s;
  add_sanitize_stubs(s);
  const fs::path build = s.dir() / "asan";
  const std::string run = "HALFLING_ASAN_BUILD='" + build.string() + "' bash " + script("sanitize.sh");
  // A build made with another compiler: asked for clang++, CMake would wipe this cache itself and
  // configure without the sanitizers. The script removes it first.
  fs::create_directories(build / "CMakeFiles" / "stale");
  std::ofstream(build / "CMakeCache.txt") << "CMAKE_CXX_COMPILER:FILEPATH=/usr/bin/g++-old\n"
                                          << "HALFLING_SANITIZE:STRING=address,undefined\n";
  auto [status, out] = s.run("HALFLING_TEST_TIMEOUT= " + run);  // the default, whatever the caller set
  ASSERT_EQ(status, 0) << out << s.calls();
  EXPECT_TRUE(contains(out, "from scratch: it was configured with /usr/bin/g++-old, this run uses " +
                                (s.bin() / "clang++").string()))
      << out;
  EXPECT_TRUE(contains(s.calls(), "configure cache-before=no")) << s.calls();
  EXPECT_FALSE(fs::exists(build / "CMakeFiles" / "stale"));
  EXPECT_TRUE(contains(read_text(build / "CMakeCache.txt"), "CMAKE_CXX_COMPILER:FILEPATH=" + (s.bin() / "clang++").string()));
  // ctest: a per-test timeout (HALFLING_TEST_TIMEOUT, default 900 s), and no tests is an error.
  EXPECT_TRUE(contains(s.calls(), "ctest --test-dir " + build.string())) << s.calls();
  EXPECT_TRUE(contains(s.calls(), "--timeout 900 --no-tests=error")) << s.calls();
  // libstdc++'s bounds checks, which see what ASan cannot (v[i] past size() but inside capacity()).
  EXPECT_TRUE(contains(s.calls(), "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG -D_GLIBCXX_ASSERTIONS "))
      << s.calls();

  // The same compiler and sanitizers: the cache is kept.
  fs::remove(s.log());
  std::tie(status, out) = s.run("HALFLING_TEST_TIMEOUT=77 " + run + " -R Foo");
  ASSERT_EQ(status, 0) << out;
  EXPECT_FALSE(contains(out, "from scratch")) << out;
  EXPECT_TRUE(contains(s.calls(), "configure cache-before=yes")) << s.calls();
  EXPECT_TRUE(contains(s.calls(), "--timeout 77 --no-tests=error")) << s.calls();
  EXPECT_TRUE(contains(s.calls(), " -R Foo\n")) << s.calls();

  // What CMake's own wipe leaves behind: the right compiler, no sanitizers.
  std::ofstream(build / "CMakeCache.txt") << "CMAKE_CXX_COMPILER:FILEPATH=" << (s.bin() / "clang++").string() << "\n"
                                          << "HALFLING_SANITIZE:STRING=\n";
  fs::remove(s.log());
  std::tie(status, out) = s.run(run);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "from scratch: its HALFLING_SANITIZE is ''")) << out;
  EXPECT_TRUE(contains(s.calls(), "configure cache-before=no")) << s.calls();
}

TEST(SanitizeScript, StopsBeforeBuildingWhenTheConfiguredBuildHasNoSanitizers) {
  const Stubs s;
  add_sanitize_stubs(s);
  const fs::path build = s.dir() / "asan";
  const std::string run = "HALFLING_ASAN_BUILD='" + build.string() + "' bash " + script("sanitize.sh");
  for (const char* how : {"STUB_DROP_SANITIZE=1", "STUB_NO_FLAGS=1"}) {
    fs::remove(s.log());
    const auto [status, out] = s.run(std::string(how) + " " + run);
    EXPECT_NE(status, 0) << how << ": " << out;
    EXPECT_TRUE(contains(out, "is not the CPU-only ASan + UBSan build asked for")) << how << ": " << out;
    EXPECT_TRUE(contains(s.calls(), "configure ")) << s.calls();
    EXPECT_FALSE(contains(s.calls(), "build --build")) << how << ": " << s.calls();
    EXPECT_FALSE(contains(s.calls(), "ctest")) << how << ": " << s.calls();
  }
}

// --thread: ThreadSanitizer in a build of its own, with Archer (LLVM's OpenMP tool library, found beside
// the clang that builds) named for the OpenMP runtime, and refused where a run could not see OpenMP's
// barriers (no Archer) or its regions' races (one thread), before anything is configured.
TEST(SanitizeScript, ThreadModeRunsWithArcherInABuildOfItsOwn) {
  const Stubs s;
  add_sanitize_stubs(s);
  // The stand-in clang++ is s.bin()/clang++, so its installation's lib/ is s.dir()/lib.
  const fs::path archer = s.dir() / "lib" / "libarcher.so";
  fs::create_directories(archer.parent_path());
  std::ofstream(archer) << "";
  const fs::path asan = s.dir() / "asan", tsan = s.dir() / "tsan";
  const std::string run = "HALFLING_ASAN_BUILD='" + asan.string() + "' HALFLING_TSAN_BUILD='" + tsan.string() +
                          "' bash " + script("sanitize.sh");
  // This suite may itself run under `sanitize.sh --thread`, which exports what is checked here.
  const std::string env = "OMP_TOOL_LIBRARIES= TSAN_OPTIONS= OMP_NUM_THREADS= ";
  auto [status, out] = s.run(env + run + " --thread -R Foo");
  ASSERT_EQ(status, 0) << out << s.calls();
  EXPECT_TRUE(contains(read_text(tsan / "CMakeCache.txt"), "HALFLING_SANITIZE:STRING=thread"));
  EXPECT_FALSE(fs::exists(asan)) << "the ThreadSanitizer run used the ASan build folder";
  std::string calls = s.calls();
  EXPECT_TRUE(contains(calls, "ctest --test-dir " + tsan.string())) << calls;
  EXPECT_TRUE(contains(calls, " -R Foo\n")) << calls;  // --thread itself is not passed on
  EXPECT_FALSE(contains(calls, "--thread")) << calls;
  EXPECT_TRUE(contains(calls, "OMP_TOOL_LIBRARIES=" + archer.string() + " ")) << calls;
  EXPECT_TRUE(contains(calls, "TSAN_OPTIONS=ignore_noninstrumented_modules=1")) << calls;
  EXPECT_TRUE(contains(out, "(ThreadSanitizer, CPU only, ")) << out;

  // The default run is unchanged: ASan + UBSan in its own folder, no OpenMP tool.
  fs::remove(s.log());
  std::tie(status, out) = s.run(env + run);
  ASSERT_EQ(status, 0) << out << s.calls();
  EXPECT_TRUE(contains(read_text(asan / "CMakeCache.txt"), "HALFLING_SANITIZE:STRING=address,undefined"));
  calls = s.calls();
  EXPECT_TRUE(contains(calls, "ctest --test-dir " + asan.string())) << calls;
  EXPECT_TRUE(contains(calls, "OMP_TOOL_LIBRARIES= ")) << calls;
  EXPECT_TRUE(contains(out, "(ASan + UBSan, CPU only, ")) << out;

  // One OpenMP thread: refused before configuring.
  fs::remove(s.log());
  std::tie(status, out) = s.run("OMP_TOOL_LIBRARIES= TSAN_OPTIONS= OMP_NUM_THREADS=1 " + run + " --thread");
  EXPECT_NE(status, 0) << out;
  EXPECT_TRUE(contains(out, "OMP_NUM_THREADS=1 would run every OpenMP region on one thread")) << out;
  EXPECT_FALSE(contains(s.calls(), "configure")) << s.calls();

  // No Archer: refused before configuring, naming the file looked for.
  fs::remove(archer);
  fs::remove(s.log());
  std::tie(status, out) = s.run(env + run + " --thread");
  EXPECT_NE(status, 0) << out;
  EXPECT_TRUE(contains(out, "needs LLVM's libarcher.so")) << out;
  EXPECT_TRUE(contains(out, archer.string() + " is missing")) << out;
  EXPECT_FALSE(contains(s.calls(), "configure")) << s.calls();
}

// ---- scripts/coverage.sh ----------------------------------------------------------------------

// --show lists a file's lines that no test ran, from the last run's profile, with LLVM's tools found
// beside the compiler (here the stand-ins, next to the stand-in clang++); without a file, a profile or
// the file itself it says what is missing.
TEST(CoverageScript, ShowListsTheLinesNoTestRanAndSaysWhatIsMissing) {
  const Stubs s;
  s.add("clang++", "exit 0");
  s.add("llvm-profdata", "exit 0");
  s.add("llvm-cov",
        "echo \"llvm-cov $*\" >>\"$LOG\"\n"
        "printf '   12|      0|  int x = 1;\\n   13|      5|  return x;\\n'");
  const fs::path build = s.dir() / "cov";
  const std::string run = "HALFLING_COV_BUILD='" + build.string() + "' bash " + script("coverage.sh") + " --show";
  auto [status, out] = s.run(run);
  EXPECT_NE(status, 0);
  EXPECT_TRUE(contains(out, "--show needs a file")) << out;
  std::tie(status, out) = s.run(run + " framework/ops.cpp");
  EXPECT_NE(status, 0);
  EXPECT_TRUE(contains(out, "no profile in " + build.string() + "; run scripts/coverage.sh first")) << out;
  fs::create_directories(build);
  std::ofstream(build / "coverage.profdata") << "";
  std::tie(status, out) = s.run(run + " framework/no_such_file.cpp");
  EXPECT_NE(status, 0);
  EXPECT_TRUE(contains(out, "--show: no such file: framework/no_such_file.cpp")) << out;
  std::tie(status, out) = s.run(run + " framework/ops.cpp");
  ASSERT_EQ(status, 0) << out << s.calls();
  EXPECT_TRUE(contains(out, "   12|      0|  int x = 1;")) << out;
  EXPECT_FALSE(contains(out, "return x")) << "a line that ran is not listed: " << out;
  EXPECT_TRUE(contains(s.calls(), "-instr-profile=" + (build / "coverage.profdata").string())) << s.calls();
  EXPECT_TRUE(contains(s.calls(), fs::path(HALFLING_SOURCE_DIR).string() + "/framework/ops.cpp")) << s.calls();
}

}  // namespace
