// bench/train (the halfling half of bench/compare_train.sh): the smoke run reports sane numbers and
// a JSON line; --export writes .npy files that hold the data set and a true permutation per epoch;
// bad flags are refused with the valid choices. And bench/seeds.sh, which runs it over several seeds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/datasets/data_files.h"  // TempDir
#include "tests/test_util.h"

namespace {

std::string program() { return (std::filesystem::path(HALFLING_BINARY_DIR) / "bench" / "train").string(); }

std::pair<int, std::string> run_train(const std::string& args) { return hl::test::run_command(program() + " " + args); }

// A .npy file: its header dictionary and its data bytes.
struct Npy {
  std::string header;
  std::vector<char> data;
};

Npy read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Npy n;
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY\x01\x00", 8) != 0) {
    ADD_FAILURE() << path << ": not a .npy file";
    return n;
  }
  const size_t len = static_cast<unsigned char>(bytes[8]) | static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
  EXPECT_EQ((10 + len) % 64, 0u) << path << ": numpy aligns the data to 64 bytes";
  n.header.assign(bytes.data() + 10, len);
  n.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(10 + len), bytes.end());
  return n;
}

// --profile prints the tree of framework/profiler.h between the epochs and the summary: the
// trainer's phases, one row per layer, one per backward node; the JSON line stays the last.
TEST(BenchTrain, ProfilePrintsWhereAStepsTimeGoes) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const auto [status, out] =
      run_train("--smoke --epochs 2 --device cpu --precision mixed --profile --json --data " + dir);
  ASSERT_EQ(status, 0) << out;
  const size_t profile = out.find("# profile: 4 steps, calls and milliseconds per step");
  ASSERT_NE(profile, std::string::npos) << "the smoke run's second epoch: 4 steps\n" << out;
  EXPECT_LT(out.find("epoch 2 "), profile) << out;
  EXPECT_LT(profile, out.find("summary: ")) << out;
  for (const char* row : {"\ndata ", "\nstep ", "\n  forward ", "\n    (1) Linear(784 -> 512)+ReLU ", "\n  loss ",
                          "\n  backward ", "\n    linear_relu [128, 784] ", "\n  optimizer "})
    EXPECT_NE(out.find(row, profile), std::string::npos) << "no row '" << row + 1 << "' in\n" << out;
  EXPECT_NO_THROW({
    const nlohmann::json summary = nlohmann::json::parse(out.substr(out.rfind('{')));
    EXPECT_TRUE(summary.is_object()) << out;
  }) << out;
}

TEST(BenchTrain, SmokeRunReportsTimesAccuracyAndJson) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const auto [status, out] = run_train("--smoke --epochs 2 --device cpu --precision mixed --json --data " + dir);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("epoch 2 "), std::string::npos) << out;
  EXPECT_NE(out.find("summary: "), std::string::npos) << out;
  const std::string last = out.substr(out.rfind('{'));
  const nlohmann::json j = nlohmann::json::parse(last);
  EXPECT_EQ(j["framework"], "halfling");
  EXPECT_EQ(j["model"], "mlp512");
  EXPECT_EQ(j["precision"], "mixed");
  EXPECT_GT(j["seconds_per_epoch"].get<double>(), 0.0);
  EXPECT_GT(j["images_per_second"].get<double>(), 0.0);
  // 4 smoke steps of 128 images: far from trained, but well above chance (10%) is not guaranteed,
  // so only the range is checked here; accuracy is the tutorials' and the training tests' business.
  EXPECT_GE(j["test_accuracy"].get<double>(), 0.0);
  EXPECT_LE(j["test_accuracy"].get<double>(), 1.0);
  EXPECT_GT(j["peak_mib"].get<double>(), 0.0);
}

// --sync-each-step puts back the per-step host read that halfling's training step avoids (docs/
// performance.md, "No host synchronization in a step"), so that a GPU run can time both. It must add
// at least one read per step and change nothing else: the same arithmetic, the same result.
TEST(BenchTrain, SyncEachStepAddsOneHostReadPerStepAndChangesNothingElse) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  nlohmann::json j[2];
  for (int sync = 0; sync < 2; ++sync) {
    // 8 steps per epoch (the smoke subset's 1024 images): more than the reads an epoch makes anyway.
    const std::string flags = "--smoke --max-steps 8 --epochs 2 --device cpu --precision mixed --json ";
    const auto [status, out] = run_train(flags + (sync ? "--sync-each-step " : "") + "--data " + dir);
    ASSERT_EQ(status, 0) << out;
    EXPECT_NE(out.find("host reads while training: "), std::string::npos) << out;
    j[sync] = nlohmann::json::parse(out.substr(out.rfind('{')));
    EXPECT_EQ(j[sync]["sync_each_step"].get<bool>(), sync == 1) << out;
  }
  const int64_t steps = j[0]["steps"].get<int64_t>();
  EXPECT_EQ(steps, 16) << "2 epochs of 8 steps";
  EXPECT_EQ(j[1]["steps"].get<int64_t>(), steps);
  // Without the flag: a few reads per epoch (its loss, accuracy and skipped count), none per step.
  EXPECT_LT(j[0]["host_reads"].get<int64_t>(), steps) << j[0].dump();
  EXPECT_GE(j[1]["host_reads"].get<int64_t>() - j[0]["host_reads"].get<int64_t>(), steps) << j[1].dump();
  EXPECT_EQ(j[1]["test_accuracy"], j[0]["test_accuracy"]) << "the same steps, so the same model";
}

// --no-fuse runs each Linear + ReLU as two ops instead of one epilogue (docs/performance.md measures
// the difference). ReLU commutes with the rounding of the GEMM's output (both keep the sign and map 0
// to 0), and its backward mask is the same whether taken from the input or the output: the same model.
// The flags are printed and in the JSON line, so a results file says what it timed.
TEST(BenchTrain, NoFuseChangesTheLaunchesNotTheResult) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  nlohmann::json j[2];
  std::string loss[2];
  for (int fuse = 0; fuse < 2; ++fuse) {
    const std::string flags = "--smoke --max-steps 8 --epochs 1 --device cpu --precision mixed --json ";
    const auto [status, out] = run_train(flags + (fuse ? "" : "--no-fuse ") + "--data " + dir);
    ASSERT_EQ(status, 0) << out;
    const size_t at = out.find("  loss ");
    ASSERT_NE(at, std::string::npos) << out;
    loss[fuse] = out.substr(at, out.find(' ', at + 7) - at);  // the epoch's mean loss, 4 decimals
    EXPECT_NE(out.find(fuse ? "Linear/Conv2d + ReLU: fused epilogues" : "Linear/Conv2d + ReLU: unfused (--no-fuse)"),
              std::string::npos)
        << out;
    j[fuse] = nlohmann::json::parse(out.substr(out.rfind('{')));
    EXPECT_EQ(j[fuse]["fuse"].get<bool>(), fuse == 1) << out;
    EXPECT_TRUE(j[fuse]["multi_tensor"].get<bool>()) << out;
  }
  EXPECT_EQ(j[0]["test_accuracy"], j[1]["test_accuracy"]) << "the same arithmetic, so the same model";
  EXPECT_EQ(loss[0], loss[1]) << "the same arithmetic, so the same training loss";
}

// --no-multi-tensor changes only how the CUDA optimizer launches its passes; on the CPU it would time
// nothing, so it is refused there, with the reason, before any training.
TEST(BenchTrain, NoMultiTensorIsRefusedOnTheCpu) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const auto [status, out] = run_train("--smoke --epochs 1 --device cpu --no-multi-tensor --data " + dir);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("--no-multi-tensor"), std::string::npos) << out;
  EXPECT_NE(out.find("CUDA"), std::string::npos) << out;
  EXPECT_EQ(out.find("epoch 1 "), std::string::npos) << "refused before training\n" << out;
}

// --cuda-graph records a step and replays it (framework/cuda_graph.h): on the CPU there is nothing to
// record, so it is refused before any training, on any machine.
TEST(BenchTrain, CudaGraphIsRefusedOnTheCpu) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const auto [status, out] = run_train("--smoke --epochs 1 --device cpu --cuda-graph --data " + dir);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("--cuda-graph records the CUDA launches"), std::string::npos) << out;
  EXPECT_EQ(out.find("epoch 1 "), std::string::npos) << "refused before training\n" << out;
}

// On a GPU the profiler's events cannot be recorded, so --cuda-graph with --profile is refused before
// any training; otherwise it trains the same model as the usual loop (the same bits:
// tests/tutorials/test_trainer.cpp), and says how many steps it replayed.
TEST(BenchTrain, CudaGraphIsRefusedWhereItCannotRecordAndOtherwiseChangesNothing) {
  HL_REQUIRE_CUDA();
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  {
    const auto [status, out] = run_train("--smoke --epochs 1 --device cuda --cuda-graph --profile --data " + dir);
    EXPECT_NE(status, 0) << out;
    EXPECT_NE(out.find("--cuda-graph with --profile"), std::string::npos) << out;
  }
  nlohmann::json j[2];
  std::string loss[2];
  for (int graph = 0; graph < 2; ++graph) {
    // 2 epochs of 8 steps: each epoch's first step runs as usual, the other 7 replay.
    const std::string flags = "--smoke --max-steps 8 --epochs 2 --device cuda --precision mixed --json ";
    const auto [status, out] = run_train(flags + (graph ? "--cuda-graph " : "") + "--data " + dir);
    ASSERT_EQ(status, 0) << out;
    const size_t at = out.rfind("  loss ");
    ASSERT_NE(at, std::string::npos) << out;
    loss[graph] = out.substr(at, out.find(' ', at + 7) - at);
    j[graph] = nlohmann::json::parse(out.substr(out.rfind('{')));
    EXPECT_EQ(j[graph]["cuda_graph"].get<bool>(), graph == 1) << out;
    EXPECT_EQ(j[graph]["graph_replays"].get<int64_t>(), graph ? 14 : 0) << out;
    if (graph) {
      EXPECT_NE(out.find("CUDA graph: 14 steps replayed, 2 recordings"), std::string::npos) << out;
    }
  }
  EXPECT_EQ(j[0]["test_accuracy"], j[1]["test_accuracy"]) << "the same kernels, so the same model";
  EXPECT_EQ(loss[0], loss[1]);
}

TEST(BenchTrain, ExportWritesTheDataAndOnePermutationPerEpoch) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const std::filesystem::path out_dir =
      std::filesystem::temp_directory_path() / ("halfling_export_" + std::to_string(hl::test::fresh_seed()));
  const auto [status, out] = run_train("--smoke --epochs 3 --export " + out_dir.string() + " --data " + dir);
  ASSERT_EQ(status, 0) << out;

  const Npy x = read_npy((out_dir / "train_x.npy").string());
  EXPECT_NE(x.header.find("'descr': '<f4'"), std::string::npos) << x.header;
  EXPECT_NE(x.header.find("'shape': (1024,1,28,28)"), std::string::npos) << x.header;
  EXPECT_EQ(x.data.size(), 1024u * 784 * 4);
  const Npy y = read_npy((out_dir / "test_y.npy").string());
  EXPECT_NE(y.header.find("'shape': (512,)"), std::string::npos) << y.header;
  EXPECT_EQ(y.data.size(), 512u * 4);

  const Npy order = read_npy((out_dir / "order.npy").string());
  EXPECT_NE(order.header.find("'descr': '<i8'"), std::string::npos) << order.header;
  EXPECT_NE(order.header.find("'shape': (3,1024)"), std::string::npos) << order.header;
  ASSERT_EQ(order.data.size(), 3u * 1024 * 8);
  std::vector<int64_t> o(3 * 1024);
  std::memcpy(o.data(), order.data.data(), order.data.size());
  std::vector<int64_t> identity(1024);
  std::iota(identity.begin(), identity.end(), 0);
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> epoch(o.begin() + e * 1024, o.begin() + (e + 1) * 1024);
    EXPECT_NE(epoch, identity) << "epoch " << e << " is not shuffled";
    std::sort(epoch.begin(), epoch.end());
    EXPECT_EQ(epoch, identity) << "epoch " << e << " is not a permutation";
  }
  EXPECT_NE(std::vector<int64_t>(o.begin(), o.begin() + 1024), std::vector<int64_t>(o.begin() + 1024, o.begin() + 2048))
      << "two epochs share one order";
  std::filesystem::remove_all(out_dir);
}

// The files <prefix>_NNN.npy in dir, sorted.
std::vector<std::string> numbered(const std::filesystem::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix + "_", 0) == 0 && e.path().extension() == ".npy") names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// --schedule sets every step's rate, not only the first: a cosine over two steps runs its second
// at rate 0, so the weights after it equal those after the first step alone, bit for bit, and differ
// from two constant-rate steps. The JSON line records the schedule.
TEST(BenchTrain, ScheduleSetsEveryStepsRate) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / ("halfling_schedule_" + std::to_string(hl::test::fresh_seed()));
  const auto train_and_dump = [&](const std::string& name, const std::string& flags) {
    const std::string dump = (tmp / name).string();
    const auto [status, out] =
        run_train("--smoke --epochs 1 --device cpu --precision fp32 --json --dump-weights " + dump + " " + flags +
                  " --data " + dir);
    EXPECT_EQ(status, 0) << out;
    std::vector<std::vector<char>> bytes;
    for (const std::string& f : numbered(dump, "final"))
      bytes.push_back(read_npy((std::filesystem::path(dump) / f).string()).data);
    return std::make_pair(out, bytes);
  };
  const auto [cos_out, cosine2] = train_and_dump("cosine2", "--max-steps 2 --schedule cosine");
  const auto [one_out, const1] = train_and_dump("const1", "--max-steps 1");
  const auto [two_out, const2] = train_and_dump("const2", "--max-steps 2");
  EXPECT_NE(cos_out.find("learning rate: cosine, peak 0.05 -> 0, warm-up 0 steps, 2 steps in all"), std::string::npos)
      << cos_out;
  ASSERT_EQ(cosine2.size(), 6u);
  EXPECT_TRUE(cosine2 == const1) << "the cosine's second step (rate 0) moved the weights";
  EXPECT_TRUE(cosine2 != const2) << "the cosine ran its second step at the constant rate";
  const nlohmann::json j = nlohmann::json::parse(cos_out.substr(cos_out.rfind('{')));
  EXPECT_EQ(j["schedule"], "cosine");
  EXPECT_EQ(j["warmup_epochs"].get<double>(), 0.0);
  EXPECT_EQ(nlohmann::json::parse(one_out.substr(one_out.rfind('{')))["schedule"], "constant");
  auto [s1, o1] = run_train("--schedule linear");
  EXPECT_NE(s1, 0);
  EXPECT_NE(o1.find("--schedule"), std::string::npos) << o1;
  std::filesystem::remove_all(tmp);
}

TEST(BenchTrain, ExportWritesInitialWeightsAndDumpWritesTrainedOnes) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const std::filesystem::path out_dir =
      std::filesystem::temp_directory_path() / ("halfling_weights_" + std::to_string(hl::test::fresh_seed()));
  const std::string exp = (out_dir / "export").string(), dump = (out_dir / "dump").string();
  auto [status, out] = run_train("--model lenet --smoke --epochs 1 --export " + exp + " --data " + dir);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(numbered(exp, "init").size(), 8u);  // LeNet: 4 layers x (weight, bias)
  // MLP-512 exported over it: its 6 tensors, none of LeNet's left behind to be mistaken for a 7th.
  std::tie(status, out) = run_train("--model mlp512 --smoke --epochs 1 --export " + exp + " --data " + dir);
  ASSERT_EQ(status, 0) << out;
  const std::vector<std::string> init = numbered(exp, "init");
  ASSERT_EQ(init.size(), 6u);
  const char* shapes[] = {"(512,784)", "(512,)", "(512,512)", "(512,)", "(10,512)", "(10,)"};
  for (size_t i = 0; i < 6; ++i) {
    const Npy w = read_npy((std::filesystem::path(exp) / init[i]).string());
    EXPECT_NE(w.header.find(std::string("'shape': ") + shapes[i]), std::string::npos) << init[i] << ": " << w.header;
  }

  std::tie(status, out) =
      run_train("--model mlp512 --smoke --epochs 1 --max-steps 1 --device cpu --dump-weights " + dump + " --data " + dir);
  ASSERT_EQ(status, 0) << out;
  const std::vector<std::string> final_weights = numbered(dump, "final");
  ASSERT_EQ(final_weights.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const Npy before = read_npy((std::filesystem::path(exp) / init[i]).string());
    const Npy after = read_npy((std::filesystem::path(dump) / final_weights[i]).string());
    EXPECT_EQ(before.header, after.header) << final_weights[i];
    ASSERT_EQ(before.data.size(), after.data.size()) << final_weights[i];
    // Same seed, so the same start; one SGD step must have moved every tensor.
    EXPECT_NE(before.data, after.data) << final_weights[i] << " did not change in a training step";
  }
  std::filesystem::remove_all(out_dir);
}

TEST(BenchTrain, BadFlagsAreRefusedWithTheChoices) {
  auto [s1, o1] = run_train("--model resnet50");
  EXPECT_NE(s1, 0);
  EXPECT_NE(o1.find("unknown --model 'resnet50'"), std::string::npos) << o1;
  EXPECT_NE(o1.find("mlp512"), std::string::npos) << o1;
  auto [s2, o2] = run_train("--precision bf16");
  EXPECT_NE(s2, 0);
  EXPECT_NE(o2.find("--precision"), std::string::npos) << o2;
  // --bn names a CUDA batch-norm variant: on the CPU there is none to pin, and the message says why.
  auto [s3, o3] = run_train("--bn split --device cpu --smoke");
  EXPECT_NE(s3, 0);
  EXPECT_NE(o3.find("--bn: no variant 'split' on cpu (known: none: this family has one implementation there)"),
            std::string::npos)
      << o3;
}

// bench/seeds.sh: accuracy over seeds from bench/train, one table row per precision, the mean and the
// same-seed gap. A real run of the script on MNIST, kept to seconds by MAX_STEPS (so the accuracies
// are not the recipe's: only the table's shape and its arithmetic are checked).
std::string seeds_script() { return (std::filesystem::path(HALFLING_SOURCE_DIR) / "bench" / "seeds.sh").string(); }

TEST(BenchSeeds, TableHasEverySeedTheMeanAndTheSameSeedGap) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  // A folder of its own (mkdtemp), so that two runs on one machine never share or remove each other's file.
  const hl::test::TempDir tmp;
  const std::filesystem::path out = tmp / "seeds.txt";
  const std::string env = "HALFLING_BUILD=" + std::string(HALFLING_BINARY_DIR) +
                          " HALFLING_DATA=" + std::filesystem::path(dir).parent_path().string() +
                          " MAX_STEPS=3 SCHEDULE=cosine OMP_NUM_THREADS=1 OUT=" + out.string() + " ";
  const auto [status, log] = hl::test::run_command(env + seeds_script() + " cpu mlp512 1 2");
  ASSERT_EQ(status, 0) << log;
  std::ifstream f(out);
  const std::string table((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("# bench/seeds.sh cpu mlp512 1 2"), std::string::npos) << table;
  EXPECT_NE(table.find("MAX_STEPS=3"), std::string::npos) << table;
  EXPECT_NE(table.find("lr 0.05 (DESIGN.md §4), schedule cosine (warm-up 0 epochs)"), std::string::npos) << table;
  EXPECT_NE(table.find("--schedule cosine --warmup-epochs 0"), std::string::npos) << table;
  EXPECT_NE(table.find("| run | seed 0 | seed 1 | mean | min | max | seeds >= 98.0% |"), std::string::npos) << table;
  // Each row: two accuracies, then their mean, min and max, which must agree with them.
  for (const char* run : {"| mixed |", "| fp32 |"}) {
    const size_t at = table.find(run);
    ASSERT_NE(at, std::string::npos) << run << " missing from\n" << table;
    std::vector<double> v;
    std::string cell;
    std::istringstream row(table.substr(at + std::strlen(run), table.find('\n', at) - at - std::strlen(run)));
    while (std::getline(row, cell, '|'))
      if (cell.find('%') != std::string::npos) v.push_back(std::stod(cell));
    ASSERT_EQ(v.size(), 5u) << run << ": " << table;
    EXPECT_NEAR(v[2], (v[0] + v[1]) / 2, 0.011) << table;
    EXPECT_DOUBLE_EQ(v[3], std::min(v[0], v[1])) << table;
    EXPECT_DOUBLE_EQ(v[4], std::max(v[0], v[1])) << table;
    for (double a : v) {
      EXPECT_GT(a, 10.0) << "3 steps of MLP-512 are already well above chance\n" << table;
      EXPECT_LE(a, 100.0) << table;
    }
  }
  EXPECT_NE(table.find("mixed - fp32 at the same seed (points): "), std::string::npos) << table;
}

TEST(BenchSeeds, RefusesBadArgumentsWithTheUsage) {
  const auto run = [](const std::string& args) { return hl::test::run_command(seeds_script() + " " + args); };
  auto [s1, o1] = run("tpu mlp512");
  EXPECT_EQ(s1, 2) << o1;
  EXPECT_NE(o1.find("device must be cpu or cuda, got 'tpu'"), std::string::npos) << o1;
  auto [s2, o2] = run("cpu resnet50");
  EXPECT_NE(s2, 0);
  EXPECT_NE(o2.find("unknown model 'resnet50'"), std::string::npos) << o2;
  auto [s9, o9] = hl::test::run_command("SCHEDULE=linear " + seeds_script() + " cpu mlp512");
  EXPECT_EQ(s9, 2) << o9;
  EXPECT_NE(o9.find("SCHEDULE must be constant, cosine or step, got 'linear'"), std::string::npos) << o9;
  auto [s3, o3] = run("cpu mlp512 0");
  EXPECT_NE(s3, 0);
  EXPECT_NE(o3.find("EPOCHS and SEEDS must be positive integers"), std::string::npos) << o3;
  auto [s4, o4] = hl::test::run_command("PRECISIONS=bf16 " + seeds_script() + " cpu mlp512");
  EXPECT_NE(s4, 0);
  EXPECT_NE(o4.find("unknown precision 'bf16'"), std::string::npos) << o4;
  // TARGET is a percentage: any other text was printed as "seeds >= abc%" and counted against.
  for (const char* target : {"abc", "98%", "-1", "9..8"}) {
    auto [s5, o5] = hl::test::run_command("TARGET='" + std::string(target) + "' " + seeds_script() + " cpu mlp512");
    EXPECT_EQ(s5, 2) << target << ": " << o5;
    EXPECT_NE(o5.find("TARGET must be a percentage such as 98 or 98.5, got '" + std::string(target) + "'"),
              std::string::npos)
        << o5;
  }
}

}  // namespace
