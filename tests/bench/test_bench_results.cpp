// What the benchmark programs and scripts do that needs no GPU: loader_throughput finds CIFAR-10 where
// load_cifar10 does and says whether the image cache answered; bench/pytorch/softmax.py refuses too few
// samples before it looks for torch; and no script overwrites the results file of an earlier run the
// same day (scripts/gpu_common.sh's start_results, bench/seeds.sh, bench/compare_train.sh). The scripts
// run against stand-ins: small shell scripts in place of nvidia-smi, gemm_bench, bench/train and a
// python3 with torch. With them, too: a gemm_bench that exits 3 (a row WRONG) fails its step with the
// reason, and the steps after it still run.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "datasets/cifar10.h"
#include "datasets/image.h"
#include "tests/datasets/data_files.h"  // TempDir
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// An executable bash script at `p` (its folders made).
void write_script(const fs::path& p, const std::string& body) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "#!/usr/bin/env bash\n" << body << "\n";
  fs::permissions(p, fs::perms::owner_all);
}

// The names of the files in `dir`, sorted.
std::vector<std::string> file_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// append(), not "'" + ... + "'": g++ 12 reports a false -Wstringop-overflow on the latter.
std::string shell_quoted(const fs::path& p) { return std::string("'").append(p.string()).append("'"); }

// A second run with the same OUT (bench/seeds.sh, bench/compare_train.sh) wrote `second` beside
// `first`, said so, and named it as written.
void expect_written_beside(const std::string& out, const fs::path& first, const fs::path& second) {
  EXPECT_TRUE(fs::exists(second)) << out;
  EXPECT_TRUE(contains(out, first.string() + " exists (an earlier run): writing " + second.string())) << out;
  EXPECT_TRUE(contains(out, "written: " + second.string())) << out;
}

// ---- loader_throughput -----------------------------------------------------------------------------

// CIFAR-10 as the JPEG archive unpacks (DIR/cifar10-jpg/train/<class>/), here two PNGs per class: the
// cold row decodes them, the load row decodes them too the first time (no cache yet) and says so, and
// reads the cache it wrote the second time. Before, that layout had no cold row, and the load row said
// "cached or binary" either way. The binary batches (DIR/cifar-10-batches-bin/) have no cold row.
TEST(LoaderThroughput, SaysWhereCifar10CameFromInEachLayout) {
  const fs::path program = fs::path(HALFLING_BINARY_DIR) / "bench" / "loader_throughput";
  if (!fs::exists(program)) GTEST_SKIP() << program << " is not built";
  const hl::test::TempDir jpg;
  for (const std::string& name : hl::data::cifar10_class_names()) {
    fs::create_directories(jpg / ("cifar10-jpg/train/" + name));
    for (int i = 0; i < 2; ++i)
      hl::data::write_png(jpg / ("cifar10-jpg/train/" + name + "/" + std::to_string(i) + ".png"),
                          hl::data::Image{32, 32, 3, std::vector<uint8_t>(32 * 32 * 3, static_cast<uint8_t>(40 * i))});
  }
  const std::string run =
      shell_quoted(program) + " --device cpu --epochs 1 --mnist " + shell_quoted(jpg / "none") + " --cifar10 ";
  auto [s1, o1] = hl::test::run_command(run + shell_quoted(jpg.str()));
  ASSERT_EQ(s1, 0) << o1;
  EXPECT_TRUE(contains(o1, "load, decode 20 images")) << o1;
  EXPECT_TRUE(contains(o1, "load (no cache: decoded 20)")) << o1;
  auto [s2, o2] = hl::test::run_command(run + shell_quoted(jpg.str()));
  ASSERT_EQ(s2, 0) << o2;
  EXPECT_TRUE(contains(o2, "load, decode 20 images")) << o2;
  EXPECT_TRUE(contains(o2, "load (cache hit)")) << o2;

  // Six batch files of two records each, as cifar-10-binary.tar.gz unpacks.
  const hl::test::TempDir bin;
  std::vector<uint8_t> records;
  for (uint8_t label : {3, 7}) {
    records.push_back(label);
    records.resize(records.size() + 3072, 100);
  }
  for (const char* batch : {"data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5",
                            "test_batch"}) {
    fs::create_directories(bin / "cifar-10-batches-bin");
    hl::test::write_file(bin / ("cifar-10-batches-bin/" + std::string(batch) + ".bin"), records);
  }
  auto [s3, o3] = hl::test::run_command(run + shell_quoted(bin.str()));
  ASSERT_EQ(s3, 0) << o3;
  EXPECT_TRUE(contains(o3, "load (binary batches)")) << o3;
  EXPECT_FALSE(contains(o3, "load, decode")) << o3;
}

// ---- bench/pytorch/softmax.py --------------------------------------------------------------------

// --samples as softmax_bench takes it, 3..1000: fewer ended in statistics.median's traceback on an
// empty list. Checked before torch is imported, so on any machine with python3.
TEST(PytorchSoftmax, RefusesSampleCountsOutsideThreeToAThousand) {
  if (hl::test::run_command("command -v python3").first != 0) GTEST_SKIP() << "no python3";
  const std::string script = shell_quoted(fs::path(HALFLING_SOURCE_DIR) / "bench" / "pytorch" / "softmax.py");
  for (const char* samples : {"0", "-5", "2", "1001", "many"}) {
    auto [s, o] = hl::test::run_command("python3 " + script + " --samples=" + samples);
    EXPECT_EQ(s, 2) << samples << ": " << o;
    EXPECT_TRUE(contains(o, "argument --samples: ")) << samples << ": " << o;
    EXPECT_FALSE(contains(o, "Traceback")) << samples << ": " << o;
  }
}

// ---- results files ---------------------------------------------------------------------------------

// bench/gpu_gemm.sh (whose file start_results names) on a "GPU machine" of stand-ins: nvidia-smi names
// a GPU, the carried build holds a gemm_bench that prints a WRONG row and exits 3, and nothing else. The
// benchmark's steps fail with the reason, the step after them runs, and a second run of the day writes
// gemm_<gpu>_<date>_2.txt beside the first run's file, which it leaves alone.
TEST(GpuScriptResults, ASecondRunTheSameDayKeepsTheFirstFileAndAWrongRowFailsItsStep) {
  const hl::test::TempDir tmp;
  const fs::path dir = tmp.str(), out = dir / "out";
  write_script(dir / "bin" / "nvidia-smi",
               "[[ $1 == -L ]] && { echo 'GPU 0: Stand-in GPU (UUID: GPU-0)'; exit 0; }\necho 'Stand-in GPU'");
  fs::create_directories(dir / "build");
  std::ofstream(dir / "build" / "CMakeCache.txt") << "# stand-in\n";
  write_script(dir / "build" / "bench" / "gemm_bench",
               "echo \"stand-in gemm_bench $*\"\n"
               "echo 'square 256  NN  256  256  256  wmma  0.0100 WRONG: 65536 of 65536 outputs not finite'\n"
               "exit 3");
  fs::create_directories(out);
  const std::string run = "PATH=" + shell_quoted(dir / "bin") + ":$PATH HALFLING_BUILD=" +
                          shell_quoted(dir / "build") +
                          " HALFLING_PREBUILT=1 HALFLING_SANITIZE=0 HALFLING_COMMIT=stand-in HALFLING_RESULTS=" +
                          shell_quoted(out) + " bash " +
                          shell_quoted(fs::path(HALFLING_SOURCE_DIR) / "bench" / "gpu_gemm.sh");

  auto [s1, o1] = hl::test::run_command(run);
  EXPECT_NE(s1, 0) << "failed steps fail the script\n" << o1;
  std::vector<std::string> names = file_names(out);
  ASSERT_EQ(names.size(), 1u) << o1;
  const std::string first = names[0];
  ASSERT_EQ(first.rfind("gemm_stand_in_gpu_", 0), 0u) << first;
  const std::string text = read_text(out / first);
  EXPECT_TRUE(contains(text, "## benchmark: FAILED (exit 3 after ")) << text;
  EXPECT_TRUE(contains(text, "a row's output is WRONG (see the rows above))")) << text;
  EXPECT_TRUE(contains(text, "WRONG: 65536 of 65536 outputs not finite")) << text;
  EXPECT_TRUE(contains(text, "## gemm-bench-tile")) << "the cluster tiles' steps ran after it\n" << text;
  EXPECT_TRUE(contains(text, "## tutorial-04: FAILED (missing: ")) << "the last step ran too\n" << text;
  EXPECT_TRUE(contains(text, "# results: " + (out / first).string() + "\n")) << text;

  auto [s2, o2] = hl::test::run_command(run);
  EXPECT_NE(s2, 0) << o2;
  names = file_names(out);
  const std::string second = first.substr(0, first.size() - 4) + "_2.txt";
  ASSERT_EQ(names, (std::vector<std::string>{first, second})) << o2;
  EXPECT_EQ(read_text(out / first), text) << "the first run's file was changed";
  const std::string text2 = read_text(out / second);
  EXPECT_TRUE(contains(text2, "# results: " + (out / second).string() + "\n")) << text2;
  EXPECT_TRUE(contains(text2, "# (" + first + " is an earlier run's: this run writes " + second + ")")) << text2;
  EXPECT_TRUE(contains(text2, "## summary: ")) << text2;
  EXPECT_TRUE(contains(o2, "written: " + (out / second).string())) << o2;

  hl::test::run_command(run);
  EXPECT_EQ(file_names(out).size(), 3u);
  EXPECT_TRUE(fs::exists(out / (first.substr(0, first.size() - 4) + "_3.txt")));
}

// bench/seeds.sh with a stand-in bench/train (one JSON line per run): the table of a second run with the
// same OUT goes to OUT's _2 name, and the script says so; TARGET must be a number.
TEST(BenchSeeds, ASecondRunWithTheSameOutWritesANewFile) {
  const hl::test::TempDir tmp;
  const fs::path dir = tmp.str();
  write_script(dir / "build" / "bench" / "train", "echo '{\"framework\": \"halfling\", \"test_accuracy\": 0.9815}'");
  const std::string run = "HALFLING_BUILD=" + shell_quoted(dir / "build") + " PRECISIONS=fp32 OUT=" +
                          shell_quoted(dir / "seeds.txt") + " " +
                          shell_quoted(fs::path(HALFLING_SOURCE_DIR) / "bench" / "seeds.sh") + " cpu mlp512 1 2";
  auto [s1, o1] = hl::test::run_command(run);
  ASSERT_EQ(s1, 0) << o1;
  EXPECT_TRUE(contains(read_text(dir / "seeds.txt"), "| fp32 | 98.15% | 98.15% | 98.15% | 98.15% | 98.15% | 2 / 2 |"))
      << read_text(dir / "seeds.txt");
  auto [s2, o2] = hl::test::run_command(run);
  ASSERT_EQ(s2, 0) << o2;
  expect_written_beside(o2, dir / "seeds.txt", dir / "seeds_2.txt");

  auto [s3, o3] = hl::test::run_command("TARGET=99.5 " + run);
  ASSERT_EQ(s3, 0) << o3;
  EXPECT_TRUE(contains(read_text(dir / "seeds_3.txt"), "seeds >= 99.5% |")) << read_text(dir / "seeds_3.txt");
}

// bench/compare_train.sh with stand-ins for bench/train and for a python3 with torch (which runs the
// table's own script with the real python3): the table of a second run with the same OUT goes to OUT's
// _2 name, and the script says so; HALFLING_FLAGS that would change what halfling trains are refused.
TEST(BenchCompareTrain, ASecondRunWithTheSameOutWritesANewFile) {
  if (hl::test::run_command("command -v python3").first != 0) GTEST_SKIP() << "no python3";
  const hl::test::TempDir tmp;
  const fs::path dir = tmp.str();
  const std::string result = "\"model\": \"mlp512\", \"precision\": \"fp32\", \"test_accuracy\": 0.98, ";
  write_script(dir / "build" / "bench" / "train",
               "[[ \" $* \" == *' --export '* ]] && exit 0\n"
               "echo '{\"framework\": \"halfling\", " + result +
                   "\"seconds_per_epoch\": 1.0, \"images_per_second\": 60000, \"peak_mib\": 10.0}'");
  write_script(dir / "bin" / "python",
               "if [[ $1 == -c ]]; then [[ $2 == *__version__* ]] && echo stand-in; exit 0; fi\n"
               "[[ $1 == - ]] && exec python3 \"$@\"\n"
               "echo '{\"framework\": \"pytorch\", " + result +
                   "\"seconds_per_epoch\": 2.0, \"images_per_second\": 30000, \"peak_mib\": null}'");
  const std::string run = "OMP_NUM_THREADS=1 PYTHON=" + shell_quoted(dir / "bin" / "python") + " HALFLING_BUILD=" +
                          shell_quoted(dir / "build") + " OUT=" + shell_quoted(dir / "train.txt") + " " +
                          shell_quoted(fs::path(HALFLING_SOURCE_DIR) / "bench" / "compare_train.sh") + " cpu mlp512 2";
  auto [s1, o1] = hl::test::run_command(run);
  ASSERT_EQ(s1, 0) << o1;
  EXPECT_TRUE(contains(read_text(dir / "train.txt"), "| mlp512 | fp32 | 1.000 | 2.000 | 0.50x |"))
      << read_text(dir / "train.txt");
  auto [s2, o2] = hl::test::run_command(run);
  ASSERT_EQ(s2, 0) << o2;
  expect_written_beside(o2, dir / "train.txt", dir / "train_2.txt");

  // HALFLING_FLAGS that would make halfling train something PyTorch does not are refused before any
  // run (the stand-in would have written a third table); a flag of halfling's own goes through.
  for (const std::string flags :
       {"--batch 64", "--seed=3", "--cuda-graph --lr 0.1", "--max-steps=5", "--loss-scale static:1", "--list-variants"}) {
    auto [s, o] = hl::test::run_command("HALFLING_FLAGS='" + flags + "' " + run);
    EXPECT_EQ(s, 2) << flags << "\n" << o;
    EXPECT_TRUE(contains(o, "HALFLING_FLAGS: --")) << flags << "\n" << o;
  }
  EXPECT_FALSE(fs::exists(dir / "train_3.txt"));
  auto [s4, o4] = hl::test::run_command("HALFLING_FLAGS='--no-fuse' " + run);
  ASSERT_EQ(s4, 0) << o4;
  EXPECT_TRUE(contains(read_text(dir / "train_3.txt"), "# HALFLING_FLAGS=--no-fuse")) << read_text(dir / "train_3.txt");
}

}  // namespace
