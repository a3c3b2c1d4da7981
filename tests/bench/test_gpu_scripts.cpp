// The scripts of a GPU session (scripts/gpu_pack.sh here, scripts/gpu_unpack.sh on the GPU machine,
// scripts/gpu_check.sh): what can be checked without a GPU. They refuse what they cannot use with a
// message that says what to do, and every shell script of the project passes shellcheck.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernels/cuda/gemm/wmma_pipelined_tiles.h"
#include "tests/datasets/data_files.h"  // TempDir
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

std::string script(const std::string& name) { return (fs::path(HALFLING_SOURCE_DIR) / "scripts" / name).string(); }

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// This very build directory, relative to the repository, for the tests that hand it to gpu_pack.sh;
// empty when it lies outside the repository (scripts/test.sh's build/ lies inside).
[[maybe_unused]] fs::path this_build_in_repository() {
  const fs::path src = fs::weakly_canonical(HALFLING_SOURCE_DIR), bin = fs::weakly_canonical(HALFLING_BINARY_DIR);
  const fs::path rel = bin.lexically_relative(src);
  return rel.empty() || rel.native().rfind("..", 0) == 0 ? fs::path() : rel;
}

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
  const fs::path rel = this_build_in_repository();
  if (rel.empty()) GTEST_SKIP() << HALFLING_BINARY_DIR << " is outside " << HALFLING_SOURCE_DIR;
  auto [s, o] = hl::test::run_command("HALFLING_BUILD=" + rel.string() + " " + script("gpu_pack.sh"));
  EXPECT_NE(s, 0) << o;
  EXPECT_TRUE(contains(o, "was not configured with CUDA")) << o;
#endif
}

TEST(GpuScripts, PackRefusesACompileCheckBuild) {
#ifndef HALFLING_CUDA_CHECK_ONLY
  GTEST_SKIP() << "this build's device code is optimized (HALFLING_CUDA_CHECK_ONLY is off or there is no CUDA)";
#else
  // scripts/test.sh's build/ where no GPU is visible: refused before anything is built or written.
  const fs::path rel = this_build_in_repository();
  if (rel.empty()) GTEST_SKIP() << HALFLING_BINARY_DIR << " is outside " << HALFLING_SOURCE_DIR;
  const fs::path bin = fs::path(HALFLING_SOURCE_DIR) / rel;
  const bool had_prebuilt = fs::exists(bin / "PREBUILT");
  auto [s, o] = hl::test::run_command("HALFLING_BUILD=" + rel.string() + " " + script("gpu_pack.sh"));
  EXPECT_NE(s, 0) << o;
  EXPECT_TRUE(contains(o, "is a compile-check build")) << o;
  EXPECT_EQ(fs::exists(bin / "PREBUILT"), had_prebuilt) << "gpu_pack.sh wrote into the build it refused";
#endif
}

TEST(GpuScripts, UnpackSaysWhatToCarry) {
  // An empty folder of its own (mkdtemp): a fixed name in /tmp would collide between users and runs.
  const hl::test::TempDir empty;
  auto [s, o] = hl::test::run_command("HALFLING_CARRY=" + empty.str() + " bash " + script("gpu_unpack.sh"));
  EXPECT_NE(s, 0) << o;
  EXPECT_TRUE(contains(o, "build.tar.xz")) << o;
  EXPECT_TRUE(contains(o, "gpu_pack.sh")) << o;
}

// A carried build (HALFLING_PREBUILT=1) of another commit than HALFLING_COMMIT is refused: its
// programs' results would be labelled with the commit asked for. What gpu_unpack.sh could not do (its
// UNPACK_WARNINGS) is a failed step of its own, and the rest goes on.
TEST(GpuScripts, ACarriedBuildOfAnotherCommitIsRefused) {
  const hl::test::TempDir dir;
  const fs::path build = fs::path(dir.str()) / "build-gpu", out = fs::path(dir.str()) / "out";
  fs::create_directories(build);
  std::ofstream(build / "CMakeCache.txt") << "# stand-in\n";
  std::ofstream(build / "PREBUILT") << "# packed 2026-11-29T10:30:22Z on vm (stand-in, commit 9bd1108)\n";
  const auto run = [&](const std::string& commit) {
    return hl::test::run_command("HALFLING_BUILD='" + build.string() + "' HALFLING_PREBUILT=1 HALFLING_COMMIT=" +
                                 commit + " HALFLING_RESULTS='" + out.string() + "' bash " + script("gpu_check.sh") +
                                 " build");
  };
  auto [s1, o1] = run("abc1234");
  EXPECT_NE(s1, 0) << o1;
  EXPECT_TRUE(contains(o1, "## build: FAILED (the carried build is of commit 9bd1108, not HALFLING_COMMIT=abc1234"))
      << o1;
  auto [s2, o2] = run("9bd1108");
  EXPECT_EQ(s2, 0) << o2;
  EXPECT_TRUE(contains(o2, "## build: skipped (prebuilt: # packed")) << o2;
  auto [s3, o3] = run("9bd1108a");  // a longer hash of the same commit
  EXPECT_EQ(s3, 0) << o3;
  std::ofstream(build / "UNPACK_WARNINGS") << "gpu_unpack.sh: libcudnn.so.9 still missing\n";
  auto [s4, o4] = run("9bd1108");
  EXPECT_NE(s4, 0) << o4;
  EXPECT_TRUE(contains(o4, "## unpack: FAILED (gpu_unpack.sh: libcudnn.so.9 still missing)")) << o4;
  EXPECT_TRUE(contains(o4, "## build: skipped (prebuilt")) << o4;
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

// Every test name of every test program, as "Suite.Test" ("Shapes/CudaGemmSweep.Every.../s1x1x1" for
// parameterized ones), from --gtest_list_tests.
std::vector<std::string> all_test_names() {
  std::vector<std::string> names;
  for (const char* program : {"kernels", "framework", "datasets", "tutorials", "bench"}) {
    const fs::path exe = fs::path(HALFLING_BINARY_DIR) / "tests" / (std::string("test_") + program);
    // append(), not "'" + ... + "'": g++ 12 reports a false -Wrestrict on the latter.
    std::string command = "'";
    command.append(exe.string()).append("' --gtest_list_tests");
    auto [status, out] = hl::test::run_command(command);
    EXPECT_EQ(status, 0) << exe << ": " << out;
    std::istringstream lines(out);
    std::string line, suite;
    while (std::getline(lines, line)) {
      const std::string word = line.substr(0, line.find("  #", 2));  // drop "  # GetParam() = ..."
      if (word.empty()) continue;
      if (word[0] != ' ') {
        suite = word;  // "Suite." (its own "  # TypeParam" comment already dropped)
      } else if (word.rfind("  ", 0) == 0) {
        names.push_back(suite + word.substr(2));
      }
    }
  }
  return names;
}

// A GoogleTest filter pattern ('*' any run, '?' one character) as a regular expression.
std::regex glob_regex(const std::string& pattern) {
  std::string re;
  for (char c : pattern) {
    if (c == '*') {
      re += ".*";
    } else if (c == '?') {
      re += '.';
    } else {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') re += '\\';  // '.', '/': literal
      re += c;
    }
  }
  return std::regex(re);
}

// The GPU scripts choose tests by name (--gtest_filter, and gpu_check.sh's cpu_only list for ctest -E).
// A name that matches nothing is silent there: a mistyped test would simply not run under the
// sanitizers. So every literal pattern in their filters (the quoted strings of filter assignments,
// --gtest_filter= and sanitize_kernels arguments, split at ':' and '-', shell variables left out)
// must match at least one test of the test programs.
TEST(GpuScripts, FiltersNameTestsThatExist) {
  const std::vector<std::string> names = all_test_names();
  ASSERT_GT(names.size(), 100u);
  const std::regex filter_line(R"re(^\s*[a-z_]+\+?=['"]|--gtest_filter=|sanitize_kernels ['"])re");
  const std::regex quoted(R"re('([^']*)'|"([^"]*)")re");
  const std::regex pattern_chars(R"([A-Za-z0-9_./*?]+)");
  int checked = 0;
  for (const char* file : {"scripts/gpu_check.sh", "scripts/gpu_common.sh", "bench/gpu_gemm.sh", "bench/gpu_conv.sh",
                           "bench/gpu_softmax.sh", "bench/gpu_bn.sh"}) {
    std::ifstream in(fs::path(HALFLING_SOURCE_DIR) / file);
    ASSERT_TRUE(in) << file;
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      const std::string code = line.substr(0, line.find("  #"));  // not the comment after the code
      if (code.find_first_not_of(" ") == std::string::npos || code[code.find_first_not_of(" ")] == '#') continue;
      if (!std::regex_search(code, filter_line)) continue;
      for (std::sregex_iterator q(code.begin(), code.end(), quoted), end; q != end; ++q) {
        const std::string text = (*q)[1].matched ? (*q)[1].str() : (*q)[2].str();
        std::string piece;
        std::istringstream pieces(std::regex_replace(text, std::regex("-"), ":"));
        while (std::getline(pieces, piece, ':')) {
          // Shell variables and words are not test patterns: a pattern has a suite's "." or a '*'.
          const bool is_pattern = std::regex_match(piece, pattern_chars) &&
                                  (piece.find('.') != std::string::npos || piece.find('*') != std::string::npos);
          if (!is_pattern) continue;
          const std::regex re = glob_regex(piece);
          const bool found = std::any_of(names.begin(), names.end(), [&](const std::string& n) { return std::regex_match(n, re); });
          EXPECT_TRUE(found) << file << ":" << number << ": '" << piece << "' matches no test";
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 40) << "the scripts' filters were not found: has their form changed?";
}

// Why scripts/ptx_changed.sh cannot run here (it compares two git trees' PTX), or "" when it can.
std::string ptx_changed_cannot_run() {
  if (hl::test::run_command("git -C '" + std::string(HALFLING_SOURCE_DIR) + "' rev-parse HEAD").first != 0)
    return "not a git checkout";
  if (hl::test::run_command("command -v nvcc || test -x /usr/local/cuda/bin/nvcc").first != 0) return "no nvcc";
  return "";
}

// scripts/ptx_changed.sh: a file compared with the commit it was last changed in reports every kernel
// the same; a bad commit is refused. (Needs nvcc and a git checkout; no GPU.)
TEST(GpuScripts, PtxChangedComparesKernelByKernel) {
  const std::string repo = HALFLING_SOURCE_DIR;
  if (const std::string why = ptx_changed_cannot_run(); !why.empty()) GTEST_SKIP() << why;
  const std::string file = "kernels/cuda/gemm/naive.cu";
  auto [ls, last] = hl::test::run_command("git -C '" + repo + "' log -1 --format=%h -- " + file);
  ASSERT_EQ(ls, 0) << last;
  last = last.substr(0, last.find_first_of("\r\n"));
  if (hl::test::run_command("git -C '" + repo + "' diff --quiet " + last + " -- " + file).first != 0)
    GTEST_SKIP() << file << " has uncommitted changes";
  auto [s, o] = hl::test::run_command(script("ptx_changed.sh") + " " + last + " " + file);
  EXPECT_EQ(s, 0) << o;
  EXPECT_TRUE(contains(o, file + ": unchanged: 2 same, 0 same code under a new signature, 0 changed, 0 new, 0 gone")) << o;
  auto [s2, o2] = hl::test::run_command(script("ptx_changed.sh") + " no-such-commit");
  EXPECT_EQ(s2, 2) << o2;
  EXPECT_TRUE(contains(o2, "'no-such-commit' is not a commit")) << o2;
  auto [s3, o3] = hl::test::run_command(script("ptx_changed.sh"));
  EXPECT_EQ(s3, 2) << o3;
  EXPECT_TRUE(contains(o3, "usage: scripts/ptx_changed.sh REV")) << o3;
}

// nvcc names a file's anonymous namespace after a hash of the file's text, comments included, and a
// static local of a function in it (a __shared__ array in a device function) carries that hash in its
// own prefix (_INTERNAL_<hash>...). So an edit to a comment changes the PTX's names, not its code, and
// must read "same". In a scratch worktree of HEAD, a comment is added to packed_kept.cu (whose
// merge_frames holds two such arrays), and the worktree's own script compares it with HEAD.
TEST(GpuScripts, PtxChangedIgnoresCommentsInFilesWithStaticSharedArrays) {
  const std::string repo = HALFLING_SOURCE_DIR;
  if (const std::string why = ptx_changed_cannot_run(); !why.empty()) GTEST_SKIP() << why;
  const std::string file = "kernels/cuda/softmax/packed_kept.cu";
  const fs::path tree = fs::temp_directory_path() / ("halfling_ptx_comment_" + std::to_string(::getpid()));
  auto [sa, oa] =
      hl::test::run_command("git -C '" + repo + "' worktree add --detach --quiet '" + tree.string() + "' HEAD");
  ASSERT_EQ(sa, 0) << oa;
  {
    std::ofstream out(tree / file, std::ios::app);
    out << "// a comment that changes the file's hash, not its code\n";
  }
  auto [s, o] = hl::test::run_command("'" + (tree / "scripts" / "ptx_changed.sh").string() + "' HEAD " + file);
  hl::test::run_command("git -C '" + repo + "' worktree remove --force '" + tree.string() + "'");
  EXPECT_EQ(s, 0) << o;
  EXPECT_TRUE(contains(o, file + ": unchanged: ")) << o;
  EXPECT_TRUE(contains(o, " 0 changed, 0 new, 0 gone")) << o;
}

// The names of every __global__ function in kernels/cuda/ (the declaration may span lines, and
// __launch_bounds__ may hold a call: min_blocks(P, N)).
std::set<std::string> kernel_names() {
  std::set<std::string> names;
  const std::regex global(R"(__global__\s+void\s+(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\()");
  for (const auto& e : fs::recursive_directory_iterator(fs::path(HALFLING_SOURCE_DIR) / "kernels" / "cuda")) {
    if (e.path().extension() != ".cu" && e.path().extension() != ".cuh") continue;
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::sregex_iterator m(text.begin(), text.end(), global), end; m != end; ++m) names.insert((*m)[1].str());
  }
  return names;
}

// Calls visit(suite, name, file, text, after) for every TEST, TEST_F and TEST_P in tests/**/*.cpp: the
// file's path and text, and where in the text the TEST's parenthesized name ends.
template <class Visit>
void for_each_test(Visit&& visit) {
  const std::regex test_re(R"(\bTEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\))");
  for (const auto& e : fs::recursive_directory_iterator(fs::path(HALFLING_SOURCE_DIR) / "tests")) {
    if (e.path().extension() != ".cpp") continue;
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::sregex_iterator m(text.begin(), text.end(), test_re), end; m != end; ++m)
      visit((*m)[1].str(), (*m)[2].str(), e.path(), text, static_cast<size_t>(m->position(0) + m->length(0)));
  }
}

// gpu_check.sh's ncu stage picks each launch by its kernel's name (ncu -k regex:...). A name that
// matches no kernel profiles nothing, and the step would still pass: so every alternative of every
// ncu_kernel pattern must be the name of a kernel in kernels/cuda/ ('.' takes whatever runs first).
TEST(GpuScripts, NcuProfilesKernelsThatExist) {
  const std::set<std::string> kernels = kernel_names();
  ASSERT_TRUE(kernels.count("gemm_wmma_pipelined_kernel")) << "the kernel scan found " << kernels.size() << " names";
  ASSERT_TRUE(kernels.count("register_warp_forward_kernel")) << "a __launch_bounds__ with a call in it";
  std::ifstream in(fs::path(HALFLING_SOURCE_DIR) / "scripts" / "gpu_check.sh");
  ASSERT_TRUE(in);
  // The step's name may hold a shell variable ("...-cluster$tile", one step per tile of a loop).
  const std::regex call(R"re(^\s*ncu_kernel "?([a-z0-9_x$-]+)"? '([^']*)' ([0-9]+) )re");
  std::string line;
  int calls = 0;
  std::set<std::string> steps;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, call)) continue;
    ++calls;
    EXPECT_TRUE(steps.insert(m[1].str()).second) << "two ncu steps named " << m[1];
    if (m[2].str() == ".") continue;
    std::istringstream alternatives(m[2].str());
    std::string name;
    while (std::getline(alternatives, name, '|'))
      EXPECT_TRUE(kernels.count(name)) << "ncu step " << m[1] << ": no __global__ function named '" << name << "'";
  }
  EXPECT_GE(calls, 10) << "the ncu_kernel calls were not found: has their form changed?";
}

// The ncu stage end to end with stand-ins for ncu and nvidia-smi (no GPU, no Nsight Compute): each
// ncu_kernel step leaves a report, and ncu_export prints its source and raw pages as CSV into one archive
// in the results folder (the device tool returns at most 8 files), remade after each step; a step that
// profiled nothing (the stand-in writes no report for the cluster tiles) is recorded as skipped, not
// exported, and the details page still reaches the log. The stand-in answers --import with a source page
// of two instructions, and prints no details when asked to --export without a --page, as ncu does.
TEST(GpuScripts, NcuStageExportsEverySourcePage) {
  if (hl::test::run_command("command -v tar && command -v bash").first != 0) GTEST_SKIP() << "no tar or bash";
  const fs::path dir = fs::path(::testing::TempDir()) / ("halfling_ncu_export_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "out");
  const auto write_script = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / "bin" / name) << text;
    fs::permissions(dir / "bin" / name, fs::perms::owner_all);
  };
  write_script("nvidia-smi", "#!/usr/bin/env bash\n"
                             "[[ $1 == -L ]] && { echo 'GPU 0: Stand-in GPU (UUID: GPU-0)'; exit 0; }\n"
                             "echo 'Stand-in GPU'\n");
  write_script("ncu", R"sh(#!/usr/bin/env bash
[[ $1 == --version ]] && { echo 'stand-in ncu'; exit 0; }
if [[ $1 == --import ]]; then
  [[ -s $2 ]] || { echo "no report $2" >&2; exit 1; }
  if [[ " $* " == *" --page source "* ]]; then
    printf '%s\n' '"Kernel Name","k(int)",""' \
      '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"' \
      '"0x7f00","      HMMA.16816.F32 R0, R2, R4, R0 ","5","64"' '"0x7f10","      EXIT ","1","8"'
    # A page too big for the archive the device tool returns: 24 MB of base64, about 18 MB gzipped.
    [[ -n ${STANDIN_BIG:-} && $2 == *"/$STANDIN_BIG.ncu-rep" ]] && head -c 18000000 /dev/urandom | base64
  else
    printf '%s\n' '"ID","Kernel Name"' '"0","k(int)"'
  fi
  exit 0
fi
out='' regex='' page=''
while (($#)); do
  case $1 in --export) out=$2; shift ;; -k) regex=$2; shift ;; --page) page=$2; shift ;; esac
  shift
done
[[ $regex == *cluster* ]] && exit 0
echo report >"$out.ncu-rep"
# As Nsight Compute does: with --export and no --page, nothing on the console.
[[ -z $out || -n $page ]] && echo "Section: GPU Speed Of Light Throughput ($regex)"
exit 0
)sh");
  // HALFLING_NCU: gpu_common.sh puts the CUDA toolkit's bin first on the PATH, where a real ncu may lie.
  const std::string cmd = "PATH='" + (dir / "bin").string() + "':$PATH HALFLING_NCU='" +
                          (dir / "bin" / "ncu").string() + "' HALFLING_BUILD='" + HALFLING_BINARY_DIR +
                          "' HALFLING_PREBUILT=1 HALFLING_RESULTS='" + (dir / "out").string() + "' bash " +
                          script("gpu_check.sh") + " ncu";
  auto [s, o] = hl::test::run_command(cmd);
  EXPECT_EQ(s, 0) << o;

  fs::path archive;
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir / "out")) {
    ++files;
    const std::string name = e.path().filename().string();
    if (name.rfind("ncu_source_ncu_stand_in_gpu_", 0) == 0 && e.path().extension() == ".gz") archive = e.path();
  }
  ASSERT_FALSE(archive.empty()) << "no ncu_source_ncu_stand_in_gpu_*.tar.gz in " << dir / "out" << "\n" << o;
  EXPECT_EQ(files, 2) << "the results file and the archive, nothing else (no .part left behind)";
  auto [ts, listing] = hl::test::run_command("tar -tzf '" + archive.string() + "' | sort");
  ASSERT_EQ(ts, 0) << listing;

  // Every ncu step of the stage's log: exported if it left a report, skipped if it did not.
  const std::regex step_line(R"(## ncu-([a-z0-9_x-]+): ok)");
  int exported = 0, skipped = 0;
  for (auto it = std::sregex_iterator(o.begin(), o.end(), step_line); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1];
    if (name == "version" || name.rfind("export-", 0) == 0) continue;
    if (contains(name, "cluster")) {
      EXPECT_TRUE(contains(o, "## ncu-export-" + name + ": skipped (no report")) << name << "\n" << o;
      EXPECT_FALSE(contains(listing, name + ".sass.csv")) << name;
      ++skipped;
    } else {
      EXPECT_TRUE(contains(o, "## ncu-export-" + name + ": ok (2 SASS instructions")) << name << "\n" << o;
      // The details page still reaches the log (the results file) beside the export.
      const size_t at = o.find("\n## ncu-" + name + "\n");
      EXPECT_TRUE(at != std::string::npos && contains(o.substr(at, o.find("## ncu-" + name + ": ok", at) - at),
                                                      "Section: GPU Speed Of Light Throughput"))
          << "no details page in step ncu-" << name;
      EXPECT_TRUE(contains(listing, name + ".sass.csv\n")) << name << "\n" << listing;
      EXPECT_TRUE(contains(listing, name + ".raw.csv\n")) << name << "\n" << listing;
      ++exported;
    }
  }
  EXPECT_GE(exported, 20) << o;
  EXPECT_EQ(skipped, 2) << "the stand-in profiles nothing for the two cluster tiles\n" << o;
  auto [cs, page] = hl::test::run_command("tar -xzOf '" + archive.string() + "' gemm-4096-cublas.sass.csv");
  EXPECT_EQ(cs, 0) << page;
  EXPECT_TRUE(contains(page, "HMMA.16816.F32")) << page;

  // One step whose pages would take the archive past the 16 MiB the device tool returns: left out, its
  // step failed, and the archive made again without it, with the steps before and after it.
  fs::remove_all(dir / "out");
  fs::create_directories(dir / "out");
  auto [bs, bo] = hl::test::run_command("STANDIN_BIG=gemm-4096-wgmma " + cmd);
  EXPECT_NE(bs, 0) << "a step left out must fail the stage\n" << bo;
  EXPECT_TRUE(contains(bo, "## ncu-export-gemm-4096-wgmma: FAILED (left out: with its pages")) << bo;
  auto [bts, big_listing] = hl::test::run_command("tar -tzf '" + archive.string() + "'");
  EXPECT_EQ(bts, 0) << big_listing;
  EXPECT_FALSE(contains(big_listing, "gemm-4096-wgmma.sass.csv")) << big_listing;
  EXPECT_TRUE(contains(big_listing, "gemm-4096-wmma_smem.sass.csv")) << "the step before\n" << big_listing;
  EXPECT_TRUE(contains(big_listing, "gemm-4096-wgmma_tma.sass.csv")) << "the step after\n" << big_listing;
  EXPECT_LT(fs::file_size(archive), 15u << 20);
  fs::remove_all(dir);
}

// The GPU scripts run and profile wmma_pipelined's cluster tiles apart from the other tiles, by number
// (scripts/gpu_common.sh's cluster_tiles, and own_tile for the row each is timed next to): those must be the
// table's clustered() tiles and its kOwnTile, or a new cluster tile would run among the others, or a
// renumbered one not at all. Its ahead_tiles, which the ncu steps profile, must be the tiles with `ahead`.
TEST(GpuScripts, ClusterTilesNameTheTablesTiles) {
  namespace tiles = hl::kernels::wmma_pipelined;
  std::vector<int> clustered, ahead;
  for (int i = 0; i < tiles::kBigTileCount; ++i) {
    if (tiles::kBigTiles[i].clustered()) clustered.push_back(i);
    if (tiles::kBigTiles[i].ahead) ahead.push_back(i);
  }
  std::ifstream in(fs::path(HALFLING_SOURCE_DIR) / "scripts" / "gpu_common.sh");
  ASSERT_TRUE(in);
  const std::regex tiles_line(R"(^(cluster|ahead)_tiles=\(([0-9 ]*)\)$)"), own_line(R"(^own_tile=([0-9]+)$)");
  std::map<std::string, std::vector<int>> listed;
  int own = -1, lists = 0;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, tiles_line)) {
      ++lists;
      std::istringstream numbers(m[2].str());
      for (int n; numbers >> n;) listed[m[1].str()].push_back(n);
    } else if (std::regex_match(line, m, own_line)) {
      own = std::stoi(m[1].str());
    }
  }
  ASSERT_EQ(lists, 2) << "scripts/gpu_common.sh should set cluster_tiles=(...) and ahead_tiles=(...) once each";
  EXPECT_EQ(listed["cluster"], clustered)
      << "cluster_tiles in scripts/gpu_common.sh against wmma_pipelined_tiles.h's clustered()";
  EXPECT_EQ(listed["ahead"], ahead) << "ahead_tiles in scripts/gpu_common.sh against wmma_pipelined_tiles.h's ahead";
  EXPECT_EQ(own, tiles::kOwnTile) << "own_tile in scripts/gpu_common.sh against wmma_pipelined_tiles.h's kOwnTile";
}

// The code of the TEST whose name ends at `from`: from its opening brace to the brace that closes it,
// without its comments and with its string and character literals emptied, so that a name it only
// mentions (in a message, say) does not count.
std::string test_code(const std::string& text, size_t from) {
  std::string code;
  int depth = 0;
  for (size_t i = text.find('{', from); i < text.size(); ++i) {
    const char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = text.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    code += c;
    if (c == '"' || c == '\'') {
      for (++i; i < text.size() && text[i] != c; ++i)
        if (text[i] == '\\') ++i;
      code += c;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      break;
    }
  }
  return code;
}

// A test that forces a wmma_pipelined tile (tiles::ScopedBigTile, or check_every_tuning_tile, which forces
// each tile in turn) can run a cluster tile, and a cluster tile that traps leaves the program's CUDA
// context unusable. So compute-sanitizer runs such tests under memcheck in a process of their own, and
// leaves them out of the other processes. The list gpu_common.sh hands it is cluster_memcheck. A test
// that forces a tile but is not matched by it would run in memcheck's first process, with the rest of the
// kernels' tests. WmmaPipelinedEveryTileOneBlockRingWraps did so until 2026-11-29.
TEST(GpuScripts, TestsThatForceAWmmaPipelinedTileRunApart) {
  const fs::path r = HALFLING_SOURCE_DIR;
  std::ifstream common(r / "scripts" / "gpu_common.sh");
  ASSERT_TRUE(common);
  std::vector<std::string> patterns;
  const std::regex list_re(R"(^cluster_memcheck\+?='([^']*)')");
  for (std::string line; std::getline(common, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, list_re)) continue;
    std::stringstream names(m[1].str());
    for (std::string name; std::getline(names, name, ':');)
      if (!name.empty()) patterns.push_back(name);
  }
  ASSERT_FALSE(patterns.empty()) << "no cluster_memcheck='...' in scripts/gpu_common.sh";
  // gtest's filter syntax as the list uses it: a name, or a prefix and '*'.
  const auto listed = [&](const std::string& test) {
    return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) {
      return p.back() == '*' ? test.compare(0, p.size() - 1, p, 0, p.size() - 1) == 0 : test == p;
    });
  };

  int forcing = 0;
  for_each_test([&](const std::string& suite, const std::string& test, const fs::path& file, const std::string& text,
                    size_t after) {
    const std::string code = test_code(text, after);
    if (!contains(code, "ScopedBigTile") && !contains(code, "check_every_tuning_tile(")) return;
    ++forcing;
    const std::string name = suite + "." + test;
    EXPECT_TRUE(listed(name)) << name << " (" << file.filename().string()
                              << ") forces a wmma_pipelined tile, but scripts/gpu_common.sh's cluster_memcheck "
                                 "does not match it: rename it CudaGemm.WmmaPipelined..., or add it to the list";
  });
  // Today: every tile twice, the lean tiles, the cluster tiles twice, the fragments-ahead tiles against
  // their base tiles, and the refused index.
  EXPECT_GE(forcing, 7) << "the scan found too few tests that force a tile: has the way they do it changed?";
}

// The benchmarks' choosers (the ncu stage's --shapes, --variants, --only, --tile, and the gemm-bench steps'
// --sweep-tiles; gemm_bench's --variants and --sizes) refuse a typo on any machine, before looking for a
// GPU, and take what is valid (without a GPU: "no CUDA device", status 0).
TEST(GpuBenches, ChoosersRefuseWhatDoesNotExist) {
#ifndef HALFLING_WITH_CUDA
  GTEST_SKIP() << "a CPU-only build has no softmax_bench, conv_bench or gemm_bench";
#else
  const fs::path bin = fs::path(HALFLING_BINARY_DIR) / "bench";
  // append(), not "'" + ... + "'": g++ 12 reports a false -Wrestrict on the latter.
  const auto quoted = [&](const char* name) { return std::string("'").append((bin / name).string()).append("'"); };
  const std::string softmax = quoted("softmax_bench"), conv = quoted("conv_bench"), gemm = quoted("gemm_bench");
  const std::pair<std::string, std::string> refused[] = {
      {softmax + " --shapes 128x", "--shapes: '128x' is not ROWSxCOLS"},
      {softmax + " --shapes 0x10", "needs rows and columns >= 1"},
      {softmax + " --shapes 65536x65536", "at most 2^30 values"},
      {softmax + " --variants register_rows", "no CUDA softmax rung 'register_rows' (known: "},
      {conv + " --only '512->512'", "--only '512->512' matches none of the layers (lenet_conv1"},
      {conv + " --variants implicit_gemm", "no CUDA conv rung 'implicit_gemm' (known: "},
      {gemm + " --tile 99", "--tile 99: wmma_pipelined_tiles.h lists tiles #0 to #"},
      {gemm + " --tile -2", "--tile -2: wmma_pipelined_tiles.h lists tiles #0 to #"},
      {gemm + " --sweep --sweep-tiles 99", "--sweep-tiles: tile 99: wmma_pipelined_tiles.h lists tiles #0 to #"},
      {gemm + " --sweep --sweep-tiles 12,x", "--sweep-tiles: 'x' is neither a tile number nor all, clustered"},
      {gemm + " --sweep --sweep-tiles 12,clustered", "--sweep-tiles: 'clustered' stands alone, not in a list"},
      {gemm + " --sweep --sweep-tiles 12,12", "--sweep-tiles: tile 12 named twice"},
      {gemm + " --sweep-tiles 12", "--sweep-tiles chooses among the tiles --sweep times: give --sweep too"},
      // gemm_bench used to look for a GPU first: without one these exited 0.
      {gemm + " --variants nosuch", "gemm_bench: --variants: no CUDA GEMM variant 'nosuch' (known: "},
      {gemm + " --variants cublas,wmma_pipelinde", "no CUDA GEMM variant 'wmma_pipelinde' (known: "},
      {gemm + " --sizes 0", "gemm_bench: --sizes: 0 is not a size (M = N = K must be >= 1)"},
      {gemm + " --sizes -5", "gemm_bench: --sizes: -5 is not a size"},
      {gemm + " --sizes 512,0,1024", "gemm_bench: --sizes: 0 is not a size"},
  };
  for (const auto& [command, message] : refused) {
    auto [s, o] = hl::test::run_command(command);
    EXPECT_EQ(s, 2) << command << "\n" << o;
    EXPECT_TRUE(contains(o, message)) << command << "\n" << o;
  }
  namespace tiles = hl::kernels::wmma_pipelined;
  int first_clustered = 0;
  while (first_clustered < tiles::kBigTileCount && !tiles::kBigTiles[first_clustered].clustered()) ++first_clustered;
  ASSERT_LT(first_clustered, tiles::kBigTileCount) << "no cluster tile in wmma_pipelined_tiles.h";
  // What the ncu stage and ncu_new_kernels pass (the cluster tiles, packed_kept, rung 3's passes), among others.
  const std::string accepted[] = {
      softmax + " --shapes 4096x1024,128x10 --variants register_warp,block_row",
      softmax + " --samples 3 --shapes 128x65536 --variants packed_kept",
      conv + " --layers vgg --only '256->256' --passes backward_weight --variants implicit_gemm_nhwc_wgrad --no-cudnn",
      conv + " --batch 128 --runs 1 --layers vgg --only '256->256' --no-cudnn --variants implicit_gemm_wmma --passes "
             "backward_data",
      gemm + " --sizes 256 --no-models --variants wmma_pipelined --tile 12 --runs 1",
      gemm + " --sizes 256 --no-models --warmup 0 --runs 1 --variants wmma_pipelined --tile 20",
      // short's gemm-bench steps (the cluster tiles apart), on one small size.
      gemm + " --sizes 256 --no-models --warmup 0 --runs 1 --variants wmma_pipelined,wgmma --sweep --sweep-tiles "
             "unclustered",
      gemm + " --sizes 256 --no-models --warmup 0 --runs 1 --variants wmma_pipelined --sweep --sweep-tiles " +
          std::to_string(tiles::kOwnTile) + "," + std::to_string(first_clustered),
  };
  bool no_gpu = false;  // what the first says; without a GPU every one says so, with one none does
  std::vector<std::string> outputs;
  for (size_t i = 0; i < std::size(accepted); ++i) {
    auto [s, o] = hl::test::run_command(accepted[i]);
    EXPECT_EQ(s, 0) << accepted[i] << "\n" << o;
    if (i == 0) no_gpu = contains(o, "no CUDA device");
    EXPECT_EQ(contains(o, "no CUDA device"), no_gpu) << accepted[i] << "\n" << o;
    outputs.push_back(o);
  }
  if (no_gpu) return;
  // On a GPU, the sweep's rows are the ones chosen and no others: every tile but the cluster tiles, and
  // the variants named (a row's label is printed even where its tile is refused, on a GPU before Hopper).
  const std::string& unclustered = outputs[outputs.size() - 2];
  const std::string& two_tiles = outputs.back();
  for (int i = 0; i < tiles::kBigTileCount; ++i) {
    const std::string row = "wmma_pipelined #" + std::to_string(i) + " ";
    EXPECT_EQ(contains(unclustered, row), !tiles::kBigTiles[i].clustered()) << row << "\n" << unclustered;
    EXPECT_EQ(contains(two_tiles, row), i == tiles::kOwnTile || i == first_clustered) << row << "\n" << two_tiles;
  }
  EXPECT_FALSE(contains(unclustered, "wmma_smem k")) << unclustered;
  EXPECT_FALSE(contains(two_tiles, "wgmma")) << two_tiles;
  EXPECT_FALSE(contains(two_tiles, "mma_sync")) << two_tiles;
#endif
}

// scripts/sass.sh (a kernel file's machine code, read without a GPU) refuses what it cannot do before
// compiling anything: no file, a file that is not there, a disassembler that is not there. Each with
// exit status 2 and a line that says what is wrong, on any machine.
TEST(GpuScripts, SassRefusesWhatItCannotRead) {
  // append(), not "'" + ... + "'": g++ 12 reports a false -Wrestrict on the latter.
  const std::string script =
      std::string("'").append((fs::path(HALFLING_SOURCE_DIR) / "scripts" / "sass.sh").string()).append("'");
  const std::string file = (fs::path(HALFLING_SOURCE_DIR) / "kernels" / "cuda" / "gemm" / "mma_sync.cu").string();
  const std::pair<std::string, std::string> refused[] = {
      {script, "usage: scripts/sass.sh FILE.cu [REGEX]"},
      {script + " no_such_file.cu", "usage: scripts/sass.sh FILE.cu [REGEX]"},
      {"NVCC=/bin/true NVDISASM=/no/such/nvdisasm " + script + " '" + file + "'",
       "NVDISASM=/no/such/nvdisasm is not an executable"},
      // The loops need nvdisasm's control-flow graph, which cuobjdump does not draw.
      {"env -u NVDISASM NVCC=/bin/true SASS_LOOPS=1 " + script + " '" + file + "'", "SASS_LOOPS needs nvdisasm"},
  };
  for (const auto& [command, message] : refused) {
    auto [s, o] = hl::test::run_command(command);
    EXPECT_EQ(s, 2) << command << "\n" << o;
    EXPECT_TRUE(contains(o, message)) << command << "\n" << o;
  }
}

// scripts/sass.sh with SASS_LOOPS=1, with stand-ins for nvcc (an empty cubin) and nvdisasm (a graph of
// one Tensor Core loop): it exits with sass_loops.py's status, 0 for a kernel pattern that matches and
// not 0 for a pattern Python cannot compile, and leaves nothing in TMPDIR either way. It used to exec
// python3, so its EXIT trap never removed its temporary folder.
TEST(GpuScripts, SassLoopsLeavesNoTemporaryFolder) {
  const hl::test::TempDir tmp;
  const fs::path dir = tmp.str(), scratch = dir / "tmp";
  fs::create_directories(scratch);
  // TempDir names hold no quote. append(), not "'" + ...: g++ 12 reports a false -Wstringop-overflow on that.
  const auto quoted = [](const fs::path& p) { return std::string("'").append(p.string()).append("'"); };
  const auto write_script = [](const fs::path& path, const std::string& body) {
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(path, fs::perms::owner_all);
  };
  std::ofstream(dir / "k.dot") << "digraph f {\nsubgraph \"cluster_kern_gemm\" {\n\"entry\"\n"
                                  "[label=\"{<entry>0000:\\ HMMA.16816.F32\\ R8,\\ R4,\\ R6,\\ R8\\ ;\\l|<exit0>0010:\\ "
                                  "@P1\\ BRA\\ `(entry)\\ ;\\l}\"]\n"
                                  "\"entry\":exit0:e -> \"entry\":entry:n [style=solid];\n}\n}\n";
  write_script(dir / "nvcc", "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && { : >\"$2\"; exit 0; }; shift; done; exit 1");
  write_script(dir / "nvdisasm", "case \" $* \" in *\" -bbcfg \"*) cat " + quoted(dir / "k.dot") +
                                     " ;; *) echo '        /*0000*/ HMMA.16816.F32 R8, R4, R6, R8 ;' ;; esac");
  const std::string run = "TMPDIR=" + quoted(scratch) + " NVCC=" + quoted(dir / "nvcc") +
                          " NVDISASM=" + quoted(dir / "nvdisasm") + " SASS_LOOPS=1 " +
                          quoted(fs::path(HALFLING_SOURCE_DIR) / "scripts" / "sass.sh") + " " +
                          quoted(fs::path(HALFLING_SOURCE_DIR) / "kernels" / "cuda" / "gemm" / "mma_sync.cu");
  auto [s1, o1] = hl::test::run_command(run + " gemm");
  EXPECT_EQ(s1, 0) << o1;
  EXPECT_TRUE(contains(o1, "kern_gemm")) << o1;
  auto [s2, o2] = hl::test::run_command(run + " '('");
  EXPECT_NE(s2, 0) << "a pattern python cannot compile\n" << o2;
  EXPECT_TRUE(fs::is_empty(scratch)) << "sass.sh left its temporary folder in " << scratch;
}

// The test lists scripts/gpu_check.sh hands compute-sanitizer and ctest (race_new, race_second,
// memcheck_third, memcheck_rows, heavy, framework_cuda, datasets_cuda; and gpu_common.sh's
// cluster_memcheck and cluster_race) name tests that exist: a
// misspelt name is a filter that matches nothing, and the sanitizer then passes having checked
// nothing, on a GPU session that cannot be repeated. A plain name must be a TEST of that suite and
// name; "Suite.Prefix*" must match one; "Suite.*" must name a suite; a pattern that starts with '*' or
// names a parameterized instance ('/') is left alone.
TEST(GpuScripts, SanitizerTestListsNameTestsThatExist) {
  const fs::path r = HALFLING_SOURCE_DIR;
  std::set<std::string> tests, suites;
  for_each_test([&](const std::string& suite, const std::string& test, const fs::path&, const std::string&, size_t) {
    tests.insert(suite + "." + test);
    suites.insert(suite);
  });
  ASSERT_TRUE(tests.count("ConvCuda.TapTableIsBitIdenticalToRung3")) << "the TEST scan found " << tests.size();

  const std::regex list_re(
      R"(^(race_new|race_second|memcheck_third|memcheck_rows|cluster_memcheck|cluster_race|heavy|framework_cuda)"
      R"(|datasets_cuda)\+?='([^']*)')");
  int checked = 0;
  std::set<std::string> lists;
  for (const char* file : {"gpu_check.sh", "gpu_common.sh"}) {
    std::ifstream script(r / "scripts" / file);
    ASSERT_TRUE(script) << file;
    for (std::string line; std::getline(script, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, list_re)) continue;
      lists.insert(m[1].str());
      std::stringstream names(m[2].str());
      for (std::string name; std::getline(names, name, ':');) {
        if (name.empty() || name[0] == '*' || name.find('/') != std::string::npos) continue;
        ++checked;
        const std::string what = m[1].str() + " in scripts/" + file + " names '" + name + "'";
        const size_t star = name.find('*');
        if (star == std::string::npos) {
          EXPECT_TRUE(tests.count(name)) << what << ": no such TEST";
        } else if (name.substr(star - 1) == ".*") {
          EXPECT_TRUE(suites.count(name.substr(0, star - 1))) << what << ": no such test suite";
        } else {
          const std::string prefix = name.substr(0, star);
          const auto it = tests.lower_bound(prefix);
          EXPECT_TRUE(it != tests.end() && it->compare(0, prefix.size(), prefix) == 0) << what << ": matches no TEST";
        }
      }
    }
  }
  EXPECT_GT(checked, 20) << "the lists were not found in scripts/gpu_check.sh and gpu_common.sh";
  EXPECT_EQ(lists.size(), 9u) << "a list was not found: has its form changed?";
}

// scripts/sass_loops.py on a graph in nvdisasm's -bbcfg -poff form, written out: a prologue, a loop of
// two blocks (a branch inside it, and the edge back from the second to the first) and an epilogue. The
// loop's body is both blocks, 6 instructions, whatever order the edges come in; a loop without Tensor
// Core instructions (the epilogue's) is not listed; a kernel the pattern does not name is not either.
TEST(GpuScripts, SassLoopsCountsTheBodyOfEachTensorCoreLoop) {
  const fs::path dir = fs::temp_directory_path() / ("halfling_sass_loops_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto node = [](const std::string& name, const std::vector<std::pair<int, std::string>>& instrs) {
    std::string label;
    for (size_t i = 0; i < instrs.size(); ++i) {
      char off[16];
      std::snprintf(off, sizeof off, "%04x", instrs[i].first);
      std::string text = instrs[i].second;
      for (size_t p = text.find(' '); p != std::string::npos; p = text.find(' ', p + 2)) text.replace(p, 1, "\\ ");
      label += (i == 0 ? "{<entry>" : (i + 1 == instrs.size() ? "\\l|<exit0>" : "\\l")) + std::string(off) + ":\\ " +
               text;
    }
    return "\"" + name + "\"\n[label=\"" + label + "\\l}\"]\n";
  };
  std::string graph = "digraph f {\nsubgraph \"cluster_kern_gemm\" {\n";
  graph += node("entry", {{0x0, "MOV R1, R2 ;"}, {0x10, "BRA `(.L_x_1) ;"}});
  graph += node(".L_x_1", {{0x20, "LDG.E.128 R4, [R2.64] ;"}, {0x30, "HMMA.16816.F32 R8, R4, R6, R8 ;"},
                           {0x40, "@P0 BRA `(.L_x_2) ;"}});
  graph += node(".L_x_2", {{0x50, "LDGSTS.E.128 [R3], [R4.64] ;"}, {0x60, "IADD3 R1, R1, 0x1, RZ ;"},
                           {0x70, "@P1 BRA `(.L_x_1) ;"}});
  graph += node(".L_x_3", {{0x80, "IADD3 R1, R1, 0x1, RZ ;"}, {0x90, "@P2 BRA `(.L_x_3) ;"}});
  graph += "\"entry\":exit0:e -> \".L_x_1\":entry:n [style=solid];\n";
  graph += "\".L_x_2\":exit0:e -> \".L_x_1\":entry:n [style=solid];\n";
  graph += "\".L_x_1\":exit0:e -> \".L_x_2\":entry:n [style=solid];\n";
  graph += "\".L_x_2\":exit0:s -> \".L_x_3\":entry:n [style=solid];\n";
  graph += "\".L_x_3\":exit0:e -> \".L_x_3\":entry:n [style=solid];\n}\n}\n";
  const fs::path file = dir / "k.dot";
  std::ofstream(file) << graph;
  const std::string tool =
      std::string("python3 '").append((fs::path(HALFLING_SOURCE_DIR) / "scripts" / "sass_loops.py").string()).append("' '");
  auto [s, o] = hl::test::run_command(tool + file.string() + "' gemm");
  EXPECT_EQ(s, 0) << o;
  EXPECT_TRUE(contains(o, "    6 instructions in loop 0x0020-0x0070 (1 HMMA, 0 HGMMA, 1 LDG, 0 STS, 0 LDSM, 0 MUFU.RCP, 2 BRA)  kern_gemm"))
      << o;
  EXPECT_FALSE(contains(o, "0x0080")) << "the epilogue's loop has no Tensor Core instruction\n" << o;
  auto [s2, o2] = hl::test::run_command(tool + file.string() + "' softmax");
  EXPECT_EQ(s2, 0) << o2;
  EXPECT_TRUE(contains(o2, "no Tensor Core loop in a kernel matching softmax")) << o2;
  fs::remove_all(dir);
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
  files += " .ci/run tests/fuzz/run.sh";
  ASSERT_TRUE(contains(files, "gpu_pack.sh")) << files;
  auto [s, o] = hl::test::run_command("cd '" + r.string() + "' && shellcheck" + files);
  EXPECT_EQ(s, 0) << o;
}

}  // namespace
