// bench/train's flags and measurements that it shares with tutorials 05, 07 and 09 (tutorials/common):
// --max-steps below 1 refused, fp32 without loss scaling, the two peaks (training steps alone, and the
// whole run as bench/pytorch/train.py measures it), and every CIFAR-10 layout tutorial 09 reads.
// (Here rather than in tests/bench/test_bench_train.cpp so that they run with the tutorials' tests,
// whose shared code they check.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "datasets/cifar10.h"
#include "datasets/image.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;

std::pair<int, std::string> run_train(const std::string& args) {
  return hl::test::run_command((fs::path(HALFLING_BINARY_DIR) / "bench" / "train").string() + " " + args);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The last line of the output that starts with '{': the --json line.
nlohmann::json json_line(const std::string& out) {
  const size_t at = out.rfind("\n{");
  if (at == std::string::npos) return nlohmann::json();
  return nlohmann::json::parse(out.substr(at + 1, out.find('\n', at + 1) - at - 1), nullptr, false);
}

TEST(BenchTrainFlags, MaxStepsBelowOneIsRefused) {
  // 0 ran no step and printed "0.000 s/epoch, 0 img/s" with exit 0; -7 meant the whole epoch.
  for (const char* bad : {"0", "-7"}) {
    const auto [status, out] = run_train(std::string("--device cpu --max-steps ") + bad);
    EXPECT_NE(status, 0) << bad;
    EXPECT_TRUE(contains(out, "--max-steps")) << out;
  }
}

// --csv, one of the flags bench/train shares with the tutorials, was accepted and never written: it is
// refused before anything loads, naming the flag and what the program writes instead.
TEST(BenchTrainFlags, CsvIsRefusedNotIgnored) {
  const std::string csv = (fs::path(::testing::TempDir()) / "bench_train_refused.csv").string();
  const auto [status, out] = run_train("--device cpu --smoke --csv " + csv);
  EXPECT_EQ(status, 1) << out;
  EXPECT_TRUE(contains(out, "train: --csv: this program writes no CSV")) << out;
  EXPECT_FALSE(fs::exists(csv));
}

// The JSON's peak_mib is the whole run's, the evaluation at batch 1000 included: what the PyTorch
// script reports, so compare_train.sh compares like with like. train_peak_mib is the training steps'
// alone (read before the evaluation), never above it. fp32 trains without loss scaling: an explicit
// --loss-scale gets a note.
TEST(BenchTrainFlags, TwoPeaksAndFp32WithoutLossScaling) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const auto [status, out] = run_train("--smoke --epochs 1 --max-steps 2 --device cpu --precision fp32 "
                                       "--loss-scale static:8 --json --data " + dir);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "note: --loss-scale static:8 is not used: fp32 trains without loss scaling")) << out;
  EXPECT_TRUE(contains(out, "MiB (training steps alone ")) << out;
  const nlohmann::json j = json_line(out);
  ASSERT_TRUE(j.is_object()) << out;
  ASSERT_TRUE(j.contains("train_peak_mib")) << out;
  EXPECT_GT(j["train_peak_mib"].get<double>(), 0.0);
  EXPECT_LE(j["train_peak_mib"].get<double>(), j["peak_mib"].get<double>());
}

// A --data that works for tutorials 07 and 09 works for bench/train: here the image folder inside
// DIR/cifar10-jpg/, the layout of ../shared/datasets/cifar10-jpg.tar.gz unpacked into DIR (bench/train
// once looked only for DIR/data_batch_1.bin, then for DIR/train/). Two tiny images per class.
TEST(BenchTrainFlags, ReadsEveryCifar10LayoutTutorial09Reads) {
  const fs::path root = fs::temp_directory_path() / ("halfling_bench_cifar_" + std::to_string(hl::test::fresh_seed()));
  struct Remove {
    fs::path p;
    ~Remove() { fs::remove_all(p); }
  } remove{root};
  uint8_t shade = 0;
  for (const char* split : {"train", "test"}) {
    for (const std::string& name : hl::data::cifar10_class_names()) {
      const fs::path folder = root / "cifar10-jpg" / split / name;
      fs::create_directories(folder);
      for (int i = 0; i < 2; ++i) {
        hl::data::Image img{32, 32, 3, std::vector<uint8_t>(32 * 32 * 3, shade)};
        shade = static_cast<uint8_t>(shade + 7);
        hl::data::write_png((folder / (std::to_string(i) + ".png")).string(), img);
      }
    }
  }
  const auto [status, out] =
      run_train("--model vgg_small --smoke --epochs 1 --max-steps 1 --batch 4 --device cpu --data " + root.string());
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "vgg_small on cifar10")) << out;
  EXPECT_TRUE(contains(out, "summary: ")) << out;
}

}  // namespace
