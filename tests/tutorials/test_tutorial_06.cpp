// Tutorial 06 (loss scaling): the smoke run records the right number of activation-gradient values,
// prints the histogram with FP16's range, skips the injected overflow (scale halved by the dynamic
// scaler, kept by the static one, weights unchanged), and writes consistent CSV files (valid RFC 4180:
// a run label with a comma is quoted; --csv moves the training log).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/tutorials/csv_reader.h"

namespace {

namespace fs = std::filesystem;

std::pair<int, std::string> run06(const std::string& args) {
  return hl::test::run_command(hl::test::tutorial_program("06_loss_scaling") + " " + args);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string line_with(const std::string& out, const std::string& part) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (contains(line, part)) return line;
  return "";
}

std::vector<std::vector<std::string>> read_csv(const fs::path& p) { return hl::test::read_csv_file(p.string()); }

class Tutorial06 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = hl::test::data_dir("mnist");
    if (data_.empty()) return;
    out_dir_ = (fs::temp_directory_path() / ("halfling_t06_" + std::to_string(hl::test::fresh_seed()))).string();
    // --csv moves the training log out of --out (it was accepted and ignored once).
    result_ = run06("--smoke --device cpu --data " + data_ + " --out " + out_dir_ + " --csv " + out_dir_ + "/log.csv");
  }
  static void TearDownTestSuite() {
    if (!out_dir_.empty()) fs::remove_all(out_dir_);
  }
  void SetUp() override {
    if (data_.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
    ASSERT_EQ(result_.first, 0) << result_.second;
  }
  const std::string& out() const { return result_.second; }
  void records_every_activation_gradient();
  void exact_and_binned_fractions_agree();
  void injected_overflow_is_skipped();
  void top_binades_are_empty();
  void histogram_table_adds_up();
  void scale_table_shows_the_changes();
  static std::string data_, out_dir_;
  static std::pair<int, std::string> result_;
};
std::string Tutorial06::data_, Tutorial06::out_dir_;
std::pair<int, std::string> Tutorial06::result_;

void Tutorial06::records_every_activation_gradient() {
  // 2048 images / batch 128 = 16 steps, each recording the gradients of the 5 layer outputs of
  // MLP-512: 128 x (512 + 512 + 512 + 512 + 10) values.
  const long long expected = 16LL * 128 * (4 * 512 + 10);
  EXPECT_TRUE(contains(out(), std::to_string(expected) + " gradient values recorded from 16 training steps")) << out();
  // FP16's range is marked, and every bin's fate is named.
  EXPECT_TRUE(contains(out(), "2^-24 = 5.96e-08: smallest FP16 subnormal")) << out();
  EXPECT_TRUE(contains(out(), "2^-14 = 6.10e-05: smallest FP16 normal")) << out();
  EXPECT_TRUE(contains(line_with(out(), "[2^-26, 2^-25)"), "-> 0       subnormal")) << out();  // S=1, S=1024
  EXPECT_TRUE(contains(line_with(out(), "[2^-20, 2^-19)"), "subnormal  normal")) << out();
  EXPECT_TRUE(contains(line_with(out(), "[2^-14, 2^-13)"), "normal     normal")) << out();

  // histogram.csv: the "all" rows count exactly those values, and each layer's rows add up to its share.
  const auto rows = read_csv(fs::path(out_dir_) / "histogram.csv");
  ASSERT_GT(rows.size(), 1u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"layer", "log2_bin", "count", "percent", "static_scale", "dynamic_scale"}));
  std::map<std::string, long long> per_layer;
  double percent_all = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 6u);
    per_layer[rows[i][0]] += std::stoll(rows[i][2]);
    if (rows[i][0] == "all") percent_all += std::stod(rows[i][3]);
  }
  EXPECT_EQ(per_layer["all"], expected);
  EXPECT_EQ(per_layer["5 Linear(512 -> 10)"], 16LL * 128 * 10);
  EXPECT_EQ(per_layer["1 Linear(784 -> 512)"], 16LL * 128 * 512);
  EXPECT_NEAR(percent_all, 100.0, 1e-3);  // rounding of the printed percentages only
}

void Tutorial06::exact_and_binned_fractions_agree() {
  // The exact count (each value rounded to FP16) and the count from the log2 bins differ only for
  // values exactly at 2^-25 (a tie that rounds to 0) and at the top of the subnormal bin.
  std::istringstream exact(line_with(out(), "S = 1 (2^0)").substr(std::string("  S = 1 (2^0)").size()));
  double ef = 0, es = 0, eo = 0;
  exact >> ef;
  exact.ignore(1) >> es;
  exact.ignore(1) >> eo;
  const std::string sec4 = out().substr(out().find("== 4."));
  std::istringstream binned(line_with(sec4, "  1      "));  // the S = 1 row of section 4
  std::string s;
  double bf = 0, bs = 0;
  binned >> s >> bf;
  binned.ignore(1) >> bs;
  EXPECT_EQ(s, "1") << sec4;
  EXPECT_NEAR(ef, bf, 0.01) << out();
  EXPECT_NEAR(es, bs, 0.05) << out();
  EXPECT_GT(es, 1.0) << "MLP-512's activation gradients reach FP16's subnormals without scaling";
}

void Tutorial06::injected_overflow_is_skipped() {
  const std::string st = line_with(out(), "static (static:1024):");
  EXPECT_TRUE(contains(st, "static (static:1024): 1 of 16 steps skipped")) << out();
  EXPECT_TRUE(contains(out(), "step 5: inf in the gradient -> step skipped, weights and master weights unchanged, "
                              "scale 1024 (2^10) -> 1024 (2^10)"))
      << out();
  // The dynamic scaler halves whatever scale was in force.
  const size_t dyn = out().find("dynamic (dynamic:init=65536,interval=4)");
  ASSERT_NE(dyn, std::string::npos) << out();
  const std::string ev = line_with(out().substr(dyn), "step 5: inf in the gradient");
  ASSERT_TRUE(contains(ev, "unchanged")) << ev;
  const size_t arrow = ev.find(" -> ", ev.find("scale "));
  const double before = std::stod(ev.substr(ev.find("scale ") + 6)), after = std::stod(ev.substr(arrow + 4));
  EXPECT_EQ(after, before / 2) << ev;

  // scale_history.csv: 16 steps per run, step 5 skipped in both, the dynamic scale halved at step 6.
  const auto rows = read_csv(fs::path(out_dir_) / "scale_history.csv");
  ASSERT_EQ(rows.size(), 1u + 2 * 16);
  std::map<std::string, std::vector<std::pair<double, int>>> runs;
  for (size_t i = 1; i < rows.size(); ++i) runs[rows[i][1]].push_back({std::stod(rows[i][2]), std::stoi(rows[i][3])});
  ASSERT_EQ(runs["static"].size(), 16u);
  ASSERT_EQ(runs["dynamic"].size(), 16u);
  for (const auto& [scale, skipped] : runs["static"]) EXPECT_EQ(scale, 1024.0);
  EXPECT_EQ(runs["static"][4].second, 1);
  EXPECT_EQ(runs["dynamic"][4].second, 1);
  EXPECT_EQ(runs["dynamic"][4].first, before);
  EXPECT_EQ(runs["dynamic"][5].first, before / 2);
  EXPECT_EQ(runs["dynamic"][0].first, 65536.0);

  // The training log went where --csv said, and nowhere else.
  EXPECT_FALSE(fs::exists(fs::path(out_dir_) / "training.csv")) << "--csv given: no training.csv in --out";
  EXPECT_TRUE(contains(out(), "scale_history.csv and " + out_dir_ + "/log.csv (scripts/plot.py")) << out();
  const auto training = read_csv(fs::path(out_dir_) / "log.csv");
  ASSERT_EQ(training.size(), 4u);  // header + the histogram run + static + dynamic, one epoch each
  EXPECT_EQ(training[0][0], "run");
  EXPECT_EQ(training[1][0], "histogram run (fp32)");
  EXPECT_EQ(training[2][0], "static");
  EXPECT_EQ(training[2][7], "1");  // skipped steps
  for (const auto& row : training) EXPECT_EQ(row.size(), 9u) << row[0];
}

// The chapter: nothing comes near FP16's top. The largest values are the logits' gradients,
// (softmax - one-hot) / B, below 1/B = 2^-7 for the smoke run's batches of 128, so its histogram ends in
// the bin [2^-8, 2^-7) and the 23 binades [2^-7, 2^16) (65504 lies in [2^15, 2^16)) are empty. (The full
// epoch's last batch has 96 images: 15 values reach [2^-7, 2^-6), and 22 binades are empty.)
void Tutorial06::top_binades_are_empty() {
  const auto rows = read_csv(fs::path(out_dir_) / "histogram.csv");
  int top_all = -1000, top_logits = -1000;
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i][1] == "zero" || std::stoll(rows[i][2]) == 0) continue;
    const int bin = std::stoi(rows[i][1]);
    if (rows[i][0] == "all") top_all = std::max(top_all, bin);
    if (rows[i][0] == "5 Linear(512 -> 10)") top_logits = std::max(top_logits, bin);
  }
  EXPECT_EQ(top_logits, -8) << "the logits' gradients lie below 1/128 = 2^-7";
  EXPECT_EQ(top_all, top_logits) << "the logits' gradients are the largest";
  EXPECT_EQ(15 - top_all, 23) << "empty binades from 2^" << top_all + 1 << " to 2^16";
}

// Section 1's table, printed as "  %-16s %7.2f%%  %-41s %-10s %s" (label, percent, bar, fate at S=1,
// fate at the static S): the percentages add up to 100, each bar is as long as its share of the tallest
// bin (40 '#'), a share too small for one '#' shows '.', and the folded tail below 2^-25 is "-> 0" at S=1
// (everything under half the smallest subnormal is flushed).
void Tutorial06::histogram_table_adds_up() {
  struct Row {
    std::string label, bar, fate1, fate_s;
    double pct;
  };
  std::vector<Row> rows;
  std::istringstream in(out().substr(out().find("  |gradient|")));
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line) && !line.empty()) {
    if (line.rfind("  -------------", 0) == 0) continue;  // FP16's limits, marked between the rows
    if (line.rfind("  inf or NaN", 0) == 0) {  // a share, no bar and no fate
      rows.push_back({"inf or NaN", "", "", "", std::stod(line.substr(19, 7))});
      continue;
    }
    ASSERT_GE(line.size(), 72u) << line;
    ASSERT_EQ(line[26], '%') << line;
    const auto trim = [](std::string t) { return t.erase(t.find_last_not_of(' ') + 1); };
    rows.push_back({trim(line.substr(2, 16)), trim(line.substr(29, 41)), trim(line.substr(71, 10)), line.substr(82),
                    std::stod(line.substr(19, 7))});
  }
  ASSERT_GE(rows.size(), 10u) << out();
  double sum = 0, peak = 0;
  for (const Row& r : rows) {
    sum += r.pct;
    if (r.label.rfind("[2^", 0) == 0) peak = std::max(peak, r.pct);
  }
  EXPECT_NEAR(sum, 100.0, 0.005 * static_cast<double>(rows.size())) << out();  // each rounded to 0.01
  bool tail_row = false;
  for (const Row& r : rows) {
    if (r.label == "inf or NaN") continue;
    const auto hashes = static_cast<double>(std::count(r.bar.begin(), r.bar.end(), '#'));
    if (r.pct > peak) {
      EXPECT_EQ(r.bar, std::string(40, '#') + ">") << r.label;  // the zero bin, taller than the scale
    } else if (r.pct > 0 && 40 * r.pct / peak < 0.5) {
      EXPECT_EQ(r.bar, ".") << r.label;
    } else {
      EXPECT_NEAR(hashes, 40 * r.pct / peak, 0.6) << r.label << " " << r.bar;  // rounded, from rounded shares
    }
    if (r.label.rfind("< 2^", 0) == 0) {
      tail_row = true;
      EXPECT_EQ(r.fate1, "-> 0") << r.label;
    }
  }
  EXPECT_TRUE(tail_row) << "the smoke run's smallest gradients are folded into one row:\n" << out();
  EXPECT_EQ(rows[0].label, "exactly 0");
}

// Section 2's table of the scale in force: the first and the last step, and every step where a scale
// changed or a step was skipped, each with its event.
void Tutorial06::scale_table_shows_the_changes() {
  const size_t begin = out().find("The scale in force at each step");
  ASSERT_NE(begin, std::string::npos) << out();
  const std::string table = out().substr(begin, out().find("\n\n", begin) - begin);
  std::vector<std::string> lines;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) lines.push_back(line.erase(line.find_last_not_of(' ') + 1));
  const std::vector<std::string> want = {
      "The scale in force at each step (rows where something changed):",
      "      step  static             dynamic            event",
      "         1  1024 (2^10)        65536 (2^16)",
      "         5  1024 (2^10)        131072 (2^17)      skipped: static dynamic (injected inf)",
      "         6  1024 (2^10)        65536 (2^16)       dynamic backed off after the overflow",
      "        10  1024 (2^10)        131072 (2^17)      dynamic grew after a run of clean steps",
      "        14  1024 (2^10)        262144 (2^18)      dynamic grew after a run of clean steps",
      "        16  1024 (2^10)        262144 (2^18)"};
  EXPECT_EQ(lines, want) << out();
}

// One test over one smoke run (CTest runs each test in its own process: three tests would train three
// times).
TEST_F(Tutorial06, SmokeRun) {
  {
    SCOPED_TRACE("every activation gradient is recorded");
    records_every_activation_gradient();
  }
  {
    SCOPED_TRACE("exact and binned fractions agree");
    exact_and_binned_fractions_agree();
  }
  {
    SCOPED_TRACE("the injected overflow is skipped");
    injected_overflow_is_skipped();
  }
  {
    SCOPED_TRACE("the top of FP16's range is empty");
    top_binades_are_empty();
  }
  {
    SCOPED_TRACE("the histogram's table adds up");
    histogram_table_adds_up();
  }
  {
    SCOPED_TRACE("the scale table shows every change");
    scale_table_shows_the_changes();
  }
}

TEST(Tutorial06Flags, MixedHistogramRunAndBadFlags) {
  const std::string dir = hl::test::data_dir("mnist");
  if (dir.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const std::string out_dir = (fs::temp_directory_path() / ("halfling_t06b_" + std::to_string(hl::test::fresh_seed()))).string();
  const auto [status, out] = run06("--smoke --device cpu --precision mixed --record-every 4 --inject-overflow-at 0 --data " +
                                   dir + " --out " + out_dir);
  // Without --csv the log is <--out>/training.csv. The mixed histogram run's label holds a comma: quoted, it
  // stays one field (unquoted, it shifted the row and scripts/plot.py refused the file).
  const auto training = read_csv(fs::path(out_dir) / "training.csv");
  const auto histogram = read_csv(fs::path(out_dir) / "histogram.csv");
  fs::remove_all(out_dir);
  ASSERT_EQ(status, 0) << out;
  ASSERT_EQ(training.size(), 4u) << out;
  EXPECT_EQ(training[1][0], "histogram run (mixed, static:1024)");
  EXPECT_EQ(training[1][1], "1") << "the epoch column";
  for (const auto& row : training) EXPECT_EQ(row.size(), 9u) << row[0];
  EXPECT_TRUE(contains(out, "Activation gradients of a mixed-precision training run")) << out;
  EXPECT_TRUE(contains(out, "from 4 training steps")) << out;  // steps 1, 5, 9, 13
  EXPECT_TRUE(contains(out, "static (static:1024): 0 of 16 steps skipped")) << out;
  // The hooks see gradients multiplied by the scale, 1024; the histogram holds them divided by it again.
  // Then the largest are the logits' below 1/128 = 2^-7, as in the fp32 run (top_binades_are_empty):
  // bin -8, or -7 if FP16 rounded one up to 2^-7 exactly. Multiplied twice they would reach 2^12.
  int top = -1000;
  for (size_t i = 1; i < histogram.size(); ++i) {
    ASSERT_EQ(histogram[i].size(), 6u);
    if (histogram[i][0] == "all" && histogram[i][1] != "zero" && std::stoll(histogram[i][2]) > 0)
      top = std::max(top, std::stoi(histogram[i][1]));
  }
  EXPECT_GE(top, -8) << out;
  EXPECT_LE(top, -7) << out;

  auto [s1, o1] = run06("--loss-scale dynamic");
  EXPECT_NE(s1, 0);
  EXPECT_TRUE(contains(o1, "--loss-scale") && contains(o1, "static:S")) << o1;
  auto [s2, o2] = run06("--dynamic static:8");
  EXPECT_NE(s2, 0);
  EXPECT_TRUE(contains(o2, "--dynamic")) << o2;
  auto [s3, o3] = run06("--record-every 0");
  EXPECT_NE(s3, 0);
  EXPECT_TRUE(contains(o3, "--record-every")) << o3;
  auto [s4, o4] = run06("--precision fp16");
  EXPECT_NE(s4, 0);
  EXPECT_TRUE(contains(o4, "--precision")) << o4;
  // The shared flags are applied: a variant that does not exist is refused before any data loads.
  auto [s5, o5] = run06("--gemm no_such_gemm");
  EXPECT_NE(s5, 0);
  EXPECT_TRUE(contains(o5, "--gemm: no variant 'no_such_gemm'")) << o5;
  // One epoch per run unless --epochs says otherwise.
  auto [s6, o6] = run06("--help");
  EXPECT_EQ(s6, 0) << o6;
  EXPECT_EQ(hl::test::help_default(o6, "--epochs"), "1") << o6;
}

}  // namespace
