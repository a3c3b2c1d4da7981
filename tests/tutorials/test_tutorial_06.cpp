// Tutorial 06 (loss scaling): the smoke run records the right number of activation-gradient values,
// prints the histogram with FP16's range, skips the injected overflow (scale halved by the dynamic
// scaler, kept by the static one, weights unchanged), and writes consistent CSV files (valid RFC 4180:
// a run label with a comma is quoted; --csv moves the training log). Scales at FP16's edge: one that
// lands the top bin on the overflow threshold, one that overflows part of a mixed run's gradients (inf
// and NaN counted apart), one that overflows all of them. A run on the whole data set, cut by --max-steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
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

// The percentages of a table row, in order ("flushed to 0", "subnormal", "overflow"), with their signs (a
// counter run backwards prints -0.052%).
std::vector<double> percents(const std::string& line) {
  std::vector<double> r;
  static const std::regex pct(R"((-?[0-9.]+)%)");
  for (std::sregex_iterator it(line.begin(), line.end(), pct), end; it != end; ++it) r.push_back(std::stod((*it)[1]));
  return r;
}

// Section 1's exact fractions (one row for S = 1, one for the static S, after "Of the N nonzero values" and
// the header) and section 4's, from the bins (its S = 1 row and its "(static)" row).
struct Fractions {
  std::vector<double> exact_one, exact_static, binned_one, binned_static;
};
Fractions fractions(const std::string& out) {
  Fractions f;
  const size_t exact = out.find("\nOf the "), binned = out.find("\n== 4.");
  if (exact == std::string::npos || binned == std::string::npos) return f;
  std::istringstream in(out.substr(exact + 1));
  std::string line;
  std::getline(in, line);  // "Of the N nonzero values ..."
  std::getline(in, line);  // the header
  if (std::getline(in, line)) f.exact_one = percents(line);
  if (std::getline(in, line)) f.exact_static = percents(line);
  f.binned_one = percents(line_with(out.substr(binned), "  1      "));
  f.binned_static = percents(line_with(out.substr(binned), " (static)"));
  return f;
}

// The number N of "Of the N nonzero values".
long long nonzero_printed(const std::string& out) {
  const size_t at = out.find("\nOf the ");
  return at == std::string::npos ? -1 : std::stoll(out.substr(at + 8));
}

// Section 1's table, printed as "  %-16s %7.2f%%  %-41s %-10s %s" (label, percent, bar, fate at S=1,
// fate at the static S), with FP16's limits marked between the rows and an "inf or NaN" row (a share only).
struct TableRow {
  std::string label, bar, fate1, fate_s;
  double pct = 0;
};
std::vector<TableRow> histogram_table(const std::string& out) {
  std::vector<TableRow> rows;
  const size_t begin = out.find("  |gradient|");
  if (begin == std::string::npos) return rows;
  std::istringstream in(out.substr(begin));
  std::string line;
  std::getline(in, line);  // the header
  const auto trim = [](std::string t) { return t.erase(t.find_last_not_of(' ') + 1); };
  while (std::getline(in, line) && !line.empty()) {
    if (line.rfind("  -------------", 0) == 0) continue;
    if (line.rfind("  inf or NaN", 0) == 0) {
      rows.push_back({"inf or NaN", "", "", "", std::stod(line.substr(19, 7))});
      continue;
    }
    if (line.size() < 72 || line[26] != '%') {
      ADD_FAILURE() << "not a row of the table: " << line;
      break;
    }
    rows.push_back({trim(line.substr(2, 16)), trim(line.substr(29, 41)), trim(line.substr(71, 10)), line.substr(82),
                    std::stod(line.substr(19, 7))});
  }
  return rows;
}

// Where FP16 puts the values of bin e (2^e <= |g| < 2^(e+1)) after scaling by S, judged by the bin's lower
// edge, as the chapter says: below half the smallest subnormal (2^-25) it rounds to 0, below 2^-14 it is
// a subnormal, from 65520 (the midpoint between 65504 and 2^16) it rounds to inf.
std::string bin_fate(int e, double scale) {
  const double x = std::ldexp(scale, e);
  return x < 0x1p-25 ? "-> 0" : x < 0x1p-14 ? "subnormal" : x < 65520 ? "normal" : "-> inf";
}

// The table against histogram.csv's "all" rows (the same counts) and the chapter's rules.
// - Rows: "exactly 0"; the bins from the first to the last that matter, where each tail of bins holding at
//   most 0.01% of the values between them (1e-4 x the count, rounded down) is folded into one row, "< 2^e"
//   or ">= 2^e", shown when it holds any value; the bins always reach 2^-25 and 2^-14, FP16's ends; then
//   "inf or NaN" when there are such values. When no bin matters (all of them fold), the bins are FP16's
//   range alone, 2^-25 to 2^-14. Each row's share is its count over every recorded value.
// - Bars: each is as long as its share of the tallest bin (40 '#'), a share too small for one '#' shows '.',
//   a row with no value shows nothing, a row taller than the tallest bin (the zero row) is 40 '#' and '>';
//   no bar at all when every bin is empty.
// - Fates, at S = 1 and at the static S: a bin's own; a folded tail's, the one its lowest and its highest
//   bin that hold values share, or "mixed" (the zero row's are "0").
void check_histogram_table(const std::string& out, const std::vector<std::vector<std::string>>& csv,
                           double static_scale) {
  const size_t at = out.find(" gradient values recorded from ");
  ASSERT_NE(at, std::string::npos) << out;
  const long long total = std::stoll(out.substr(out.rfind('\n', at) + 1));
  std::map<int, long long> bin;
  long long zeros = 0, binned = 0;
  for (size_t i = 1; i < csv.size(); ++i) {
    if (csv[i].size() != 6 || csv[i][0] != "all") continue;
    if (csv[i][1] == "zero") zeros = std::stoll(csv[i][2]);
    else binned += bin[std::stoi(csv[i][1])] = std::stoll(csv[i][2]);
  }
  ASSERT_EQ(bin.size(), 85u) << "bins -64 .. 20";
  const auto share = [&](long long c) { return 100.0 * static_cast<double>(c) / static_cast<double>(total); };
  const long long tail = static_cast<long long>(1e-4 * static_cast<double>(total));
  int lo = -64, hi = 20;
  for (long long below = 0; lo <= 20 && below + bin[lo] <= tail; ++lo) below += bin[lo];
  for (long long above = 0; hi > lo && above + bin[hi] <= tail; --hi) above += bin[hi];
  if (lo > 20) lo = hi = -25;
  lo = std::min(lo, -25);
  hi = std::max(hi, -14);
  struct Want {
    std::string label;
    double share;
    std::string fate1, fate_s;
  };
  const auto tail_fate = [&](int from, int to, double scale) {
    int first = to, last = from;
    for (int e = from; e <= to; ++e)
      if (bin[e] > 0) first = std::min(first, e), last = std::max(last, e);
    return bin_fate(first, scale) == bin_fate(last, scale) ? bin_fate(first, scale) : "mixed";
  };
  std::vector<Want> want = {{"exactly 0", share(zeros), "0", "0"}};
  long long below = 0, above = 0;
  for (int e = -64; e < lo; ++e) below += bin[e];
  for (int e = hi + 1; e <= 20; ++e) above += bin[e];
  if (below > 0)
    want.push_back({"< 2^" + std::to_string(lo), share(below), tail_fate(-64, lo - 1, 1),
                    tail_fate(-64, lo - 1, static_scale)});
  for (int e = lo; e <= hi; ++e)
    want.push_back({"[2^" + std::to_string(e) + ", 2^" + std::to_string(e + 1) + ")", share(bin[e]), bin_fate(e, 1),
                    bin_fate(e, static_scale)});
  if (above > 0)
    want.push_back({">= 2^" + std::to_string(hi + 1), share(above), tail_fate(hi + 1, 20, 1),
                    tail_fate(hi + 1, 20, static_scale)});
  if (total > zeros + binned) want.push_back({"inf or NaN", share(total - zeros - binned), "", ""});

  const std::vector<TableRow> rows = histogram_table(out);
  std::vector<std::string> labels, want_labels;
  for (const TableRow& r : rows) labels.push_back(r.label);
  for (const Want& w : want) want_labels.push_back(w.label);
  ASSERT_EQ(labels, want_labels) << out;
  double peak = 0;  // the tallest bin's share
  for (const Want& w : want)
    if (w.label.rfind("[2^", 0) == 0) peak = std::max(peak, w.share);
  for (size_t i = 0; i < rows.size(); ++i) {
    const TableRow& r = rows[i];
    char printed[32];  // the share as the program prints it: the same division, rounded to 2 decimals
    std::snprintf(printed, sizeof printed, "%.2f", want[i].share);
    EXPECT_EQ(r.pct, std::stod(printed)) << r.label;
    if (r.label == "inf or NaN") continue;
    EXPECT_EQ(r.fate1, want[i].fate1) << r.label;
    EXPECT_EQ(r.fate_s, want[i].fate_s) << r.label;
    const double part = want[i].share;
    const auto hashes = static_cast<double>(std::count(r.bar.begin(), r.bar.end(), '#'));
    if (peak == 0 || part == 0) {
      EXPECT_EQ(r.bar, "") << r.label;
    } else if (part > peak) {
      EXPECT_EQ(r.bar, std::string(40, '#') + ">") << r.label;
    } else if (40 * part / peak < 0.5) {
      EXPECT_EQ(r.bar, ".") << r.label;
    } else {
      EXPECT_NEAR(hashes, 40 * part / peak, 0.5 + 1e-9) << r.label << " " << r.bar;  // rounded to a whole '#'
      EXPECT_EQ(r.bar, std::string(static_cast<size_t>(hashes), '#')) << r.label;  // no '>' at or below the peak
    }
  }
}

// Section 1's per-layer table, "  %-26s %12lld %8.2f%% %15.3f%% %15.3f%%" (the layer, its values, the share
// of zeros, and the exact shares of its nonzero values flushed at S = 1 and at the static S, whose header
// names it), against histogram.csv: each layer's count and zeros, and the whole histogram's exact
// fractions (`overall`, "flushed to 0" at S = 1 and at S) as the mean of the layers' weighted by their
// nonzero values. For runs without inf or NaN (every value is zero or in a bin).
void check_layer_table(const std::string& out, const std::vector<std::vector<std::string>>& csv,
                       const std::string& static_column, const std::vector<double>& overall) {
  std::vector<std::string> names;
  std::map<std::string, long long> values, zeros;
  for (size_t i = 1; i < csv.size(); ++i) {
    if (csv[i].size() != 6 || csv[i][0] == "all") continue;
    if (values.count(csv[i][0]) == 0) names.push_back(csv[i][0]);
    values[csv[i][0]] += std::stoll(csv[i][2]);
    if (csv[i][1] == "zero") zeros[csv[i][0]] = std::stoll(csv[i][2]);
  }
  const size_t begin = out.find("\n  layer output ");
  ASSERT_NE(begin, std::string::npos) << out;
  std::istringstream in(out.substr(begin + 1));
  std::string line;
  std::getline(in, line);
  EXPECT_TRUE(contains(line, "flushed (S=1) flushed (" + static_column + ")")) << line;
  ASSERT_EQ(overall.size(), 2u);
  double flushed_one = 0, flushed_s = 0, nonzero = 0;
  for (const std::string& name : names) {
    ASSERT_TRUE(std::getline(in, line)) << out;
    ASSERT_GE(line.size(), 29u) << line;
    EXPECT_EQ(line.substr(2, 26).erase(line.substr(2, 26).find_last_not_of(' ') + 1), name) << line;
    std::istringstream fields(line.substr(28));
    long long count = 0;
    double zero_pct = 0, f1 = 0, fs = 0;
    char pct = 0;
    fields >> count >> zero_pct >> pct >> f1 >> pct >> fs >> pct;
    ASSERT_TRUE(fields) << line;
    EXPECT_EQ(count, values[name]) << line;
    char zero_printed[32];  // as the program prints it
    std::snprintf(zero_printed, sizeof zero_printed, "%.2f",
                  100.0 * static_cast<double>(zeros[name]) / static_cast<double>(values[name]));
    EXPECT_EQ(zero_pct, std::stod(zero_printed)) << line;
    EXPECT_GE(f1, fs) << "scaling up flushes fewer: " << line;
    const auto nz = static_cast<double>(values[name] - zeros[name]);
    flushed_one += f1 * nz;
    flushed_s += fs * nz;
    nonzero += nz;
  }
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, "") << "one row per layer";
  // Each share is printed to 0.0005, so their weighted mean is good to 0.0005, and so is the overall one.
  EXPECT_NEAR(flushed_one / nonzero, overall[0], 0.001 + 1e-9) << out;
  EXPECT_NEAR(flushed_s / nonzero, overall[1], 0.001 + 1e-9) << out;
}

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
  EXPECT_TRUE(contains(out(), "MLP-512 on MNIST, 2048 train / 1000 test images, 1 epoch(s) per run, device cpu\n"))
      << out();
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
  // The table's columns: FP16's fate without scaling and at the static S.
  EXPECT_TRUE(contains(out(), "\n  |gradient|       % values  " + std::string(41, ' ') + " S=1        S=1024\n"))
      << out();
  const Fractions f = fractions(out());
  ASSERT_EQ(f.exact_one.size(), 3u) << out();
  ASSERT_EQ(f.exact_static.size(), 3u) << out();
  check_layer_table(out(), rows, "S=1024", {f.exact_one[0], f.exact_static[0]});
}

void Tutorial06::exact_and_binned_fractions_agree() {
  // The exact count (each value rounded to FP16) and the count from the log2 bins differ only for
  // values exactly at 2^-25 (a tie that rounds to 0) and at the top of the subnormal bin: a value in
  // [2^-14 - 2^-25, 2^-14) rounds up to 2^-14, FP16's smallest normal, while its bin's lower edge is a
  // subnormal. So the exact subnormal share is the smaller one, by those values: some 500 of the smoke
  // run's 3.2 million (about 1/1024 of the 14% in [2^-15, 2^-14)), 0.015%. Counting a value that rounds
  // to 2^-14 as a subnormal (<= for <) closes that gap.
  const Fractions f = fractions(out());
  ASSERT_EQ(f.exact_one.size(), 3u) << out();
  ASSERT_EQ(f.binned_one.size(), 3u) << out();
  EXPECT_NEAR(f.exact_one[0], f.binned_one[0], 0.01) << out();
  EXPECT_LE(f.exact_one[1], f.binned_one[1]) << out();
  EXPECT_GE(f.binned_one[1] - f.exact_one[1], 0.005) << out();
  EXPECT_LE(f.binned_one[1] - f.exact_one[1], 0.05) << out();
  EXPECT_GT(f.exact_one[1], 1.0) << "MLP-512's activation gradients reach FP16's subnormals without scaling";
  EXPECT_EQ(f.exact_one[2], 0.0) << out();
  EXPECT_EQ(f.binned_one[2], 0.0) << out();
  // At the static scale, 1024, the same agreement: each value multiplied by S, not divided.
  ASSERT_EQ(f.exact_static.size(), 3u) << out();
  ASSERT_EQ(f.binned_static.size(), 3u) << out();
  EXPECT_NEAR(f.exact_static[0], f.binned_static[0], 0.01) << out();
  EXPECT_NEAR(f.exact_static[1], f.binned_static[1], 0.05) << out();
  EXPECT_GT(f.exact_static[1], 0.0) << out();  // 0.068%: S = 1024 leaves a few in the subnormals
  EXPECT_LT(f.exact_static[1], f.exact_one[1] / 10) << out();
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
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][0], std::to_string(runs[rows[i][1]].size() + 1)) << "the step, from 1";
    runs[rows[i][1]].push_back({std::stod(rows[i][2]), std::stoi(rows[i][3])});
  }
  ASSERT_EQ(runs["static"].size(), 16u);
  ASSERT_EQ(runs["dynamic"].size(), 16u);
  for (const auto& [scale, skipped] : runs["static"]) EXPECT_EQ(scale, 1024.0);
  for (size_t k = 0; k < 16; ++k) EXPECT_EQ(runs["static"][k].second, k == 4 ? 1 : 0) << "step " << k + 1;
  EXPECT_FALSE(contains(out(), "was never reached")) << out();
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
  // Each run's epoch line prints the accuracies the log holds, as percentages.
  for (size_t i = 1; i < training.size(); ++i) {
    const std::string line = line_with(out(), "  [" + training[i][0] + "] epoch 1/1");
    ASSERT_FALSE(line.empty()) << training[i][0];
    const double train_acc = std::stod(line.substr(line.find("train acc ") + 10));
    const double test_acc = std::stod(line.substr(line.find("test acc ") + 9));
    EXPECT_NEAR(train_acc, 100 * std::stod(training[i][3]), 0.005 + 1e-9) << line;
    EXPECT_NEAR(test_acc, 100 * std::stod(training[i][4]), 0.005 + 1e-9) << line;
  }
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

// The smoke run's table (check_histogram_table checks every table): its smallest gradients are folded into
// one row, "-> 0" at S=1 (everything under half the smallest subnormal is flushed).
void Tutorial06::histogram_table_adds_up() {
  check_histogram_table(out(), read_csv(fs::path(out_dir_) / "histogram.csv"), 1024);
  bool tail_row = false;
  for (const TableRow& r : histogram_table(out())) {
    if (r.label.rfind("< 2^", 0) != 0) continue;
    tail_row = true;
    EXPECT_EQ(r.fate1, "-> 0") << r.label;
  }
  EXPECT_TRUE(tail_row) << "the smoke run's smallest gradients are folded into one row:\n" << out();
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

// Single runs with flags, each writing into a folder of its own.
class Tutorial06Flags : public ::testing::Test {
 protected:
  struct Run {
    int status = -1;
    std::string out, out_dir;
    std::vector<std::vector<std::string>> histogram, history, training;  // the CSV files it wrote
  };
  void SetUp() override {
    data_ = hl::test::data_dir("mnist");
    if (data_.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  }
  // 06 on MNIST with `flags`, its --out a fresh folder, read back and removed.
  Run run_with(const std::string& flags) const {
    Run r;
    r.out_dir = (fs::temp_directory_path() / ("halfling_t06f_" + std::to_string(hl::test::fresh_seed()))).string();
    std::tie(r.status, r.out) = run06(flags + " --data " + data_ + " --out " + r.out_dir);
    r.histogram = read_csv(fs::path(r.out_dir) / "histogram.csv");
    r.history = read_csv(fs::path(r.out_dir) / "scale_history.csv");
    r.training = read_csv(fs::path(r.out_dir) / "training.csv");
    fs::remove_all(r.out_dir);
    return r;
  }
  std::string data_;
};

TEST_F(Tutorial06Flags, MixedHistogramRunAndBadFlags) {
  const Run run = run_with("--smoke --device cpu --precision mixed --record-every 4 --inject-overflow-at 0 --seed 3 "
                           "--lr 0.02 --momentum 0.5");
  const auto& [status, out, out_dir, histogram, history, training] = run;
  // Without --csv the log is <--out>/training.csv. The mixed histogram run's label holds a comma: quoted, it
  // stays one field (unquoted, it shifted the row and scripts/plot.py refused the file).
  ASSERT_EQ(status, 0) << out;
  ASSERT_EQ(training.size(), 4u) << out;
  EXPECT_EQ(training[1][0], "histogram run (mixed, static:1024)");
  EXPECT_EQ(training[1][1], "1") << "the epoch column";
  for (const auto& row : training) EXPECT_EQ(row.size(), 9u) << row[0];
  EXPECT_TRUE(contains(out, "Activation gradients of a mixed-precision training run")) << out;
  EXPECT_TRUE(contains(out, "from 4 training steps")) << out;  // steps 1, 5, 9, 13
  EXPECT_TRUE(contains(out, "static (static:1024): 0 of 16 steps skipped")) << out;
  // The hooks only look: with no overflow injected, the mixed histogram run and section 2's static run (the
  // same seed, batches, learning rate, momentum, scale and FP32 master weights: here not the defaults) train
  // to the same bits, which the CSV holds in full.
  for (const size_t c : {2, 3, 4}) EXPECT_EQ(training[1][c], training[2][c]) << training[0][c];
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

// A static scale at which the smoke run's largest gradients land exactly on FP16's overflow threshold:
// S = 65520 * 2^8, so the lower edge of the bin [2^-8, 2^-7) (the logits' largest gradients,
// top_binades_are_empty) becomes 65520, the midpoint between 65504 and 2^16, which rounds to inf. The
// exact count and the bins then agree that those values overflow (a few just under 2^-8 may round up
// to 65520 in FP32 as well). The histogram run is FP32 and never uses S; the mixed runs of section 2
// overflow at every step under it: at the start the true class's (softmax - 1) / 128 is near -0.9 / 128,
// times S about -118000.
TEST_F(Tutorial06Flags, ScaleAtTheOverflowThresholdOverflowsTheTopBin) {
  const Run run =
      run_with("--smoke --device cpu --loss-scale static:16773120 --inject-overflow-at 16 --record-every 1");
  const auto& [status, out, out_dir, histogram, history, training] = run;
  ASSERT_EQ(status, 0) << out;
  check_histogram_table(out, histogram, 16773120);  // the bin [2^-8, 2^-7): "-> inf" at S
  const Fractions f = fractions(out);
  ASSERT_EQ(f.exact_static.size(), 3u) << out;
  ASSERT_EQ(f.binned_static.size(), 3u) << out;
  EXPECT_GT(f.binned_static[2], 0.0) << "the bin [2^-8, 2^-7) lands on 65520: inf\n" << out;
  EXPECT_GE(f.exact_static[2], f.binned_static[2]) << out;
  EXPECT_NEAR(f.exact_static[2], f.binned_static[2], 0.002) << out;
  EXPECT_NEAR(f.exact_static[0], f.binned_static[0], 0.01) << out;
  EXPECT_NEAR(f.exact_static[1], f.binned_static[1], 0.05) << out;
  // The scale is printed as given, not rounded to 6 digits (16773120 is not a power of two).
  EXPECT_TRUE(contains(out, "  S = 16773120 ")) << out;
  EXPECT_TRUE(contains(out, " S=1        S=16773120\n")) << out;
  ASSERT_EQ(f.exact_one.size(), 3u) << out;
  check_layer_table(out, histogram, "S=16773120", {f.exact_one[0], f.exact_static[0]});
  EXPECT_TRUE(contains(out, "static (static:16773120): 16 of 16 steps skipped, final scale 16773120,")) << out;
  // The overflow injected at the last step, 16: reached, in both runs.
  EXPECT_TRUE(contains(out, "at step 16 (0: never)")) << out;
  EXPECT_TRUE(contains(line_with(out, "dynamic (dynamic:"), ": 1 of 16 steps skipped")) << out;
  const std::string skip16 = "  step 16: inf in the gradient -> step skipped, weights and master weights unchanged";
  EXPECT_NE(out.find(skip16), out.rfind(skip16)) << "once in each run\n" << out;
  EXPECT_FALSE(contains(out, "was never reached")) << out;
}

// A mixed-precision histogram run whose scale overflows FP16: the hooks see S * g in FP16, so the logits'
// larger gradients become inf, and backward turns them into inf and NaN below. Those values are counted
// apart (the "inf or NaN" row), neither zero nor in a bin, and the exact fractions are of the finite
// nonzero values, as many as the bins hold. No step is applied, so the model stays as initialized, where
// no class is likely: of each image's 10 logits' gradients (softmax - one-hot) / 128, times 2^24, the nine
// wrong classes' p * 2^17 stay finite (p < 1/2) and the true class's (p - 1) * 2^17 overflows. The finite
// ones lie in [2^-14, 2^-8), normal in FP16 at S = 1 and at S = 2^24, so every fraction is 0, over a
// count small enough that a counter off by one would show (1 of 11520 is 0.009%). Three epochs: the step
// count runs on across them, so the overflow injected at step 20 lands once, on epoch 2's 4th step;
// and the static run skips all 48 steps, so the table of the scale in force, which shows a row for each,
// stops after 40 and points at the CSV file.
TEST_F(Tutorial06Flags, MixedRunThatOverflowsCountsInfAndNaNApart) {
  const Run run = run_with("--smoke --epochs 3 --device cpu --precision mixed --loss-scale static:16777216 "
                           "--record-every 5 --inject-overflow-at 20");
  const auto& [status, out, out_dir, histogram, history, training] = run;
  ASSERT_EQ(status, 0) << out;
  check_histogram_table(out, histogram, 16777216);  // the top bin's few largest finite values: ">= 2^-10"
  // Steps 1, 6, 11, ..., 46 of 48 (the first, then every 5th), each 128 x (4 x 512 + 10) values.
  const long long total = 10LL * 128 * (4 * 512 + 10);
  EXPECT_TRUE(contains(out, std::to_string(total) + " gradient values recorded from 10 training steps")) << out;
  long long zeros = -1, binned = 0;
  for (size_t i = 1; i < histogram.size(); ++i) {
    ASSERT_EQ(histogram[i].size(), 6u);
    if (histogram[i][0] != "all") continue;
    if (histogram[i][1] == "zero") zeros = std::stoll(histogram[i][2]);
    else binned += std::stoll(histogram[i][2]);
  }
  const long long nonfinite = total - zeros - binned;
  ASSERT_GE(zeros, 0) << "no zero row for all";
  EXPECT_GT(nonfinite, total / 2) << out;  // most of them: inf in the logits' gradient spreads in backward
  EXPECT_EQ(binned, 10LL * 128 * 9) << out;  // the wrong classes' logits' gradients
  EXPECT_EQ(nonzero_printed(out), binned) << out;
  const std::string row = line_with(out, "  inf or NaN ");
  ASSERT_FALSE(row.empty()) << out;
  EXPECT_NEAR(std::stod(row.substr(19)), 100.0 * static_cast<double>(nonfinite) / static_cast<double>(total), 0.005)
      << row;
  const Fractions f = fractions(out);
  const std::vector<double> none = {0, 0, 0};
  EXPECT_EQ(f.exact_one, none) << out;
  EXPECT_EQ(f.exact_static, none) << out;
  const std::string sec4 = out.substr(out.find("\n== 4."));
  std::istringstream rows(sec4.substr(sec4.find("\n  S ") + 1));
  std::string line;
  std::getline(rows, line);  // the header
  int table_rows = 0;
  for (; std::getline(rows, line) && !line.empty(); ++table_rows) EXPECT_EQ(percents(line), none) << line;
  EXPECT_EQ(table_rows, 10) << sec4;
  // Every step overflowed: the histogram run and the static run skipped all 48.
  EXPECT_TRUE(contains(line_with(out, "[histogram run (mixed, static:16777216)] epoch 3/3"), "skipped 16 ")) << out;
  EXPECT_TRUE(contains(out, "static (static:16777216): 48 of 48 steps skipped")) << out;
  const size_t table = out.find("      step  static ");
  ASSERT_NE(table, std::string::npos) << out;
  std::istringstream scale_rows(out.substr(table));
  std::string row_line;
  std::getline(scale_rows, row_line);  // the header
  int shown = 0;
  while (std::getline(scale_rows, row_line) && row_line.rfind("  ...", 0) != 0 && !row_line.empty()) {
    ++shown;
    EXPECT_TRUE(contains(row_line, "  skipped: static ")) << "the static run skips every step: " << row_line;
  }
  EXPECT_EQ(shown, 40) << out;
  EXPECT_EQ(row_line, "  ... (every step is in " + out_dir + "/scale_history.csv)") << out;
  // Section 3: one injected inf per run, and each run's test accuracy after its last epoch.
  size_t injected = 0;
  for (size_t at = out.find("inf in the gradient"); at != std::string::npos;
       at = out.find("inf in the gradient", at + 1))
    ++injected;
  EXPECT_EQ(injected, 2u) << out;
  const std::string skip20 = "  step 20: inf in the gradient -> step skipped, weights and master weights unchanged";
  EXPECT_NE(out.find(skip20), out.rfind(skip20)) << "once in each run\n" << out;
  for (const std::string name : {"static", "dynamic"}) {
    const std::string last = line_with(out, "  [" + name + "] epoch 3/3");
    const std::string summary = line_with(out.substr(out.find("== 3.")), name + " (");
    ASSERT_FALSE(last.empty() || summary.empty()) << out;
    const size_t from = last.find("test acc ");
    ASSERT_NE(from, std::string::npos) << last;
    const std::string acc = last.substr(from, last.find('%', from) + 1 - from);  // "test acc 78.70%"
    EXPECT_TRUE(contains(summary, ", " + acc)) << acc << " in " << summary;
  }
}

// Without --smoke: the whole data set and the full run's defaults (an overflow injected at step 50, the
// dynamic scaler growing every 100 steps), here cut to 2 steps per epoch by --max-steps, over 2 epochs.
// So step 50 is never reached, which the program says instead of showing the skip.
TEST_F(Tutorial06Flags, FullDataRunWithMaxSteps) {
  const Run run = run_with("--epochs 2 --max-steps 2 --device cpu");
  const auto& [status, out, out_dir, histogram, history, training] = run;
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "MLP-512 on MNIST, 60000 train / 10000 test images, 2 epoch(s) per run")) << out;
  EXPECT_TRUE(contains(out, "gradient values recorded from 4 training steps")) << out;
  EXPECT_TRUE(contains(out, "An inf is written into one gradient element of layer 1's weight at step 50 ")) << out;
  EXPECT_TRUE(contains(out, "static (static:1024): 0 of 4 steps skipped")) << out;
  EXPECT_TRUE(contains(out, "dynamic (dynamic:init=65536,interval=100): 0 of 4 steps skipped")) << out;
  size_t never = 0;
  for (size_t at = out.find("(step 50 was never reached: the run had 4 steps)"); at != std::string::npos;
       at = out.find("(step 50 was never reached", at + 1))
    ++never;
  EXPECT_EQ(never, 2u) << out;
  EXPECT_EQ(history.size(), 1u + 2 * 4) << out;
  ASSERT_EQ(training.size(), 1u + 3 * 2) << out;  // three runs of two epochs
  EXPECT_EQ(training[6][0], "dynamic");
  EXPECT_EQ(training[6][1], "2");
  auto [s1, o1] = run06("--max-steps 0");
  EXPECT_NE(s1, 0);
  EXPECT_TRUE(contains(o1, "--max-steps")) << o1;
}

// A mixed-precision histogram run at S = 2^40 overflows every gradient that is not zero (the wrong classes'
// p / 128 x 2^40 too): no bin holds a value. The table then shows FP16's range, 2^-25 to 2^-14, with no bars
// (it once showed all 46 empty bins from 2^-25 up, and a bar ".>" for the zero row), and every fraction is
// of no value at all, 0.
TEST_F(Tutorial06Flags, ScaleThatOverflowsEveryValueLeavesNoBinToDraw) {
  const Run run = run_with("--smoke --device cpu --precision mixed --loss-scale static:1099511627776 "
                           "--record-every 16");
  const auto& [status, out, out_dir, histogram, history, training] = run;
  ASSERT_EQ(status, 0) << out;
  check_histogram_table(out, histogram, 1099511627776.0);
  const std::vector<TableRow> rows = histogram_table(out);
  ASSERT_EQ(rows.size(), 1u + 12 + 1) << out;  // exactly 0, [2^-25, 2^-24) .. [2^-14, 2^-13), inf or NaN
  EXPECT_EQ(rows[1].label, "[2^-25, 2^-24)");
  EXPECT_EQ(rows[12].label, "[2^-14, 2^-13)");
  EXPECT_GT(rows[13].pct, 50.0) << out;
  EXPECT_EQ(nonzero_printed(out), 0) << out;
  const Fractions f = fractions(out);
  EXPECT_EQ(f.exact_one, (std::vector<double>{0, 0, 0})) << out;
  EXPECT_EQ(f.binned_static, (std::vector<double>{0, 0, 0})) << out;
}

}  // namespace
