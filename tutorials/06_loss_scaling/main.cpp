// Tutorial 06: loss scaling (Micikevicius et al. 2018, §3.2 and Figure 3).
//   1. The histogram of activation-gradient magnitudes (log2 bins) of a real MLP-512 training run on
//      MNIST, recorded through gradient hooks (Tensor::register_hook), with FP16's range marked and the
//      fraction of values FP16 would flush to zero, before and after scaling by S.
//   2. A static scale against the dynamic scaler, step by step (LossScaler::scale_history).
//   3. An injected overflow (an inf written into one gradient at a chosen step): the step is skipped,
//      nothing changes, and the dynamic scaler halves S.
// The chapter is tutorials/06_loss_scaling/README.md; scripts/plot.py turns the CSV files into PNGs.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "datasets/dataloader.h"
#include "datasets/mnist.h"
#include "framework/amp.h"
#include "framework/autograd.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "kernels/half.h"
#include "kernels/runtime.h"
#include "tutorials/common/cli.h"
#include "tutorials/common/trainer.h"

using namespace hl;

namespace {

// ---- the histogram -------------------------------------------------------------------------------------

// Bin e holds the nonzero values with 2^e <= |g| < 2^(e+1) (e = floor(log2|g|), std::ilogb). The end
// bins also collect everything beyond them.
constexpr int kMinBin = -64, kMaxBin = 20;
constexpr int kNumBins = kMaxBin - kMinBin + 1;

// What FP16 makes of a value v*S, counted exactly (round to nearest even, kernels/half.h).
struct Fate {
  double scale = 1.0;
  int64_t flushed = 0;    // nonzero, but 0 in FP16
  int64_t subnormal = 0;  // 0 < |h| < 2^-14: kept with fewer than 11 significant bits
  int64_t overflow = 0;   // finite, but inf in FP16 (|v*S| >= 65520)
};

struct Histogram {
  std::array<int64_t, kNumBins> bins{};
  int64_t zeros = 0, nonfinite = 0, total = 0;
  std::vector<Fate> fates;  // at S = 1 and at the static scale

  int64_t nonzero() const { return total - zeros - nonfinite; }

  void add(const std::vector<float>& values, double inv_scale) {
    for (float raw : values) {
      ++total;
      const float v = static_cast<float>(raw * inv_scale);  // the true gradient (exact for 2^k scales)
      if (!std::isfinite(v)) {
        ++nonfinite;
        continue;
      }
      if (v == 0.0f) {
        ++zeros;
        continue;
      }
      bins[static_cast<size_t>(std::clamp(std::ilogb(v), kMinBin, kMaxBin) - kMinBin)]++;
      for (Fate& f : fates) {
        const float h = round_to_half(static_cast<float>(v * f.scale));
        if (h == 0.0f) ++f.flushed;
        else if (std::isinf(h)) ++f.overflow;
        else if (std::fabs(h) < 0x1p-14f) ++f.subnormal;
      }
    }
  }
};

// Where the values of bin e land in FP16 after scaling by S, judged by the bin's lower edge 2^e * S
// (the exact per-value counts are in Fate; the bins give the picture for any S).
const char* bin_fate(int e, double scale) {
  const double x = std::ldexp(scale, e);
  if (x < 0x1p-25) return "-> 0";       // below half the smallest subnormal: rounds to zero
  if (x < 0x1p-14) return "subnormal";  // 2^-24 .. 2^-14: fewer significant bits
  if (x < 65520.0) return "normal";
  return "-> inf";
}

// Percent of nonzero values whose bin lands below 2^-25 / in the subnormals / at inf after scaling by S.
struct BinSummary {
  double flushed = 0, subnormal = 0, overflow = 0;
};
BinSummary summarize_bins(const Histogram& h, double scale) {
  BinSummary s;
  const double n = static_cast<double>(std::max<int64_t>(h.nonzero(), 1));
  for (int e = kMinBin; e <= kMaxBin; ++e) {
    const double c = static_cast<double>(h.bins[static_cast<size_t>(e - kMinBin)]);
    const std::string f = bin_fate(e, scale);
    if (f == "-> 0") s.flushed += c;
    else if (f == "subnormal") s.subnormal += c;
    else if (f == "-> inf") s.overflow += c;
  }
  s.flushed *= 100 / n;
  s.subnormal *= 100 / n;
  s.overflow *= 100 / n;
  return s;
}

std::string scale_str(double s) {
  const int e = std::ilogb(s);
  char buf[48];
  // Every digit: %g's six wrote a static scale of 16773120 as 1.67731e+07.
  if (std::ldexp(1.0, e) == s) std::snprintf(buf, sizeof buf, "%.15g (2^%d)", s, e);
  else std::snprintf(buf, sizeof buf, "%.15g", s);
  return buf;
}

// Records the gradient flowing into every layer output of an MLP (its activations), one histogram per
// layer, on every `every`-th training step.
struct GradientRecorder {
  std::vector<std::string> layer_names;
  std::vector<Histogram> layers;
  const amp::LossScaler* scaler = nullptr;  // gradients arrive multiplied by its scale
  int64_t every = 1, forward_calls = 0, recorded_steps = 0;

  void record(size_t layer, const Tensor& grad) {
    const double inv = scaler != nullptr ? 1.0 / scaler->get_scale() : 1.0;
    layers[layer].add(grad.to_vector(), inv);  // to_vector: f32 values from f16 or f32, any device
  }
  Histogram total() const {
    Histogram t;
    t.fates = layers.at(0).fates;
    for (Fate& f : t.fates) f.flushed = f.subnormal = f.overflow = 0;
    for (const Histogram& h : layers) {
      for (size_t i = 0; i < t.bins.size(); ++i) t.bins[i] += h.bins[i];
      t.zeros += h.zeros;
      t.nonfinite += h.nonfinite;
      t.total += h.total;
      for (size_t k = 0; k < t.fates.size(); ++k) {
        t.fates[k].flushed += h.fates[k].flushed;
        t.fates[k].subnormal += h.fates[k].subnormal;
        t.fates[k].overflow += h.fates[k].overflow;
      }
    }
    return t;
  }
};

// The MLP with a gradient hook on each layer's output. The hook captures the recorder and the layer's
// index, never the tensor itself (that would be a reference cycle through the tensor's own hook list).
class ProbedMLP : public nn::Module {
 public:
  ProbedMLP(std::shared_ptr<nn::Sequential> net, GradientRecorder& rec) : net_(std::move(net)), rec_(rec) {
    register_module("net", net_);
    for (size_t i = 0; i < net_->size(); ++i) {
      if (dynamic_cast<nn::Flatten*>(&(*net_)[i]) != nullptr) continue;  // a view of the input: no gradient
      slot_of_.push_back(static_cast<int>(rec_.layers.size()));
      rec_.layer_names.push_back(std::to_string(i) + " " + (*net_)[i].name());
      rec_.layers.emplace_back();
    }
  }
  Tensor forward(const Tensor& x) override {
    const bool recording = training() && grad_enabled() && rec_.forward_calls++ % rec_.every == 0;
    if (recording) ++rec_.recorded_steps;
    Tensor h = x;
    for (size_t i = 0, slot = 0; i < net_->size(); ++i) {
      h = (*net_)[i](h);
      if (dynamic_cast<nn::Flatten*>(&(*net_)[i]) != nullptr) continue;
      const auto layer = static_cast<size_t>(slot_of_[slot++]);
      if (recording && h.requires_grad()) {
        GradientRecorder* rec = &rec_;
        h.register_hook([rec, layer](const Tensor& g) {
          rec->record(layer, g);
          return Tensor();  // only look
        });
      }
    }
    return h;
  }
  std::string name() const override { return "ProbedMLP"; }

 private:
  std::shared_ptr<nn::Sequential> net_;
  GradientRecorder& rec_;
  std::vector<int> slot_of_;
};

void print_histogram(const Histogram& h, double static_scale) {
  const double n = static_cast<double>(std::max<int64_t>(h.total, 1));
  auto count = [&](int e) { return h.bins[static_cast<size_t>(e - kMinBin)]; };
  // Rows from the first to the last bin that matter; each tail holding under 0.01% of the values
  // is folded into one row, so the table stays a screen high.
  const auto tail = static_cast<int64_t>(1e-4 * n);
  int lo = kMinBin, hi = kMaxBin;
  for (int64_t below = 0; lo <= kMaxBin && below + count(lo) <= tail; ++lo) below += count(lo);
  for (int64_t above = 0; hi > lo && above + count(hi) <= tail; --hi) above += count(hi);
  // No bin matters (every value zero, inf or NaN, as when the scale overflows everything): FP16's range
  // alone. (The table once showed all 46 empty bins from 2^-25 up.)
  if (lo > kMaxBin) lo = hi = -25;
  lo = std::min(lo, -25);  // always show where FP16 ends
  hi = std::max(hi, -14);
  int64_t below = 0, above = 0;
  for (int e = kMinBin; e < lo; ++e) below += count(e);
  for (int e = hi + 1; e <= kMaxBin; ++e) above += count(e);
  double peak = 0;
  for (int e = lo; e <= hi; ++e) peak = std::max(peak, 100.0 * static_cast<double>(count(e)) / n);
  const int width = 40;
  auto bar = [&](double pct) {
    if (peak == 0) return std::string();  // no bin holds a value: no scale to draw against
    const int len = static_cast<int>(std::lround(width * std::min(pct, peak) / peak));
    std::string b(static_cast<size_t>(len), '#');
    if (pct > 0 && len == 0) b = ".";
    if (pct > peak) b += '>';  // the zero bin can be taller than the scale
    return b;
  };
  const std::string s_col = "S=" + scale_str(static_scale).substr(0, scale_str(static_scale).find(' '));
  auto row = [&](const std::string& label, int64_t c, const char* fate1, const char* fate_s) {
    const double pct = 100.0 * static_cast<double>(c) / n;
    std::printf("  %-16s %7.2f%%  %-41s %-10s %s\n", label.c_str(), pct, bar(pct).c_str(), fate1, fate_s);
  };
  std::printf("  %-16s %8s  %-41s %-10s %s\n", "|gradient|", "% values", "", "S=1", s_col.c_str());
  row("exactly 0", h.zeros, "0", "0");
  // A folded tail spans many bins: name its fate only when all of them share it.
  auto tail_fate = [&](int from, int to, double sc) {
    int a = to, b = from;
    for (int e = from; e <= to; ++e)
      if (count(e) > 0) a = std::min(a, e), b = std::max(b, e);
    return std::string(bin_fate(a, sc)) == bin_fate(b, sc) ? bin_fate(a, sc) : "mixed";
  };
  if (lo > kMinBin && below > 0) row("< 2^" + std::to_string(lo), below, tail_fate(kMinBin, lo - 1, 1.0), tail_fate(kMinBin, lo - 1, static_scale));
  for (int e = lo; e <= hi; ++e) {
    if (e == -24) std::printf("  ------------- 2^-24 = 5.96e-08: smallest FP16 subnormal (S=1) -------------\n");
    if (e == -14) std::printf("  ------------- 2^-14 = 6.10e-05: smallest FP16 normal (S=1) ----------------\n");
    if (e == 16) std::printf("  ------------- 65504: largest FP16 (S=1) ------------------------------------\n");
    row(e == kMinBin ? "< 2^" + std::to_string(e + 1) : "[2^" + std::to_string(e) + ", 2^" + std::to_string(e + 1) + ")",
        count(e), bin_fate(e, 1.0), bin_fate(e, static_scale));
  }
  if (hi < kMaxBin && above > 0) row(">= 2^" + std::to_string(hi + 1), above, tail_fate(hi + 1, kMaxBin, 1.0), tail_fate(hi + 1, kMaxBin, static_scale));
  if (h.nonfinite > 0) std::printf("  %-16s %7.2f%%\n", "inf or NaN", 100.0 * static_cast<double>(h.nonfinite) / n);
}

void write_histogram_csv(const std::string& path, const GradientRecorder& rec, const Histogram& all,
                         double static_scale, double dynamic_scale) {
  std::ofstream out(path);
  HL_CHECK(out.good(), "06_loss_scaling: cannot write ", path);
  out << "layer,log2_bin,count,percent,static_scale,dynamic_scale\n";
  auto rows = [&](const std::string& name, const Histogram& h) {
    const double n = static_cast<double>(std::max<int64_t>(h.total, 1));
    const std::string scales = "," + tutorial::csv_number(static_scale) + "," + tutorial::csv_number(dynamic_scale);
    out << tutorial::csv_field(name) << ",zero," << h.zeros << ","
        << tutorial::csv_number(100.0 * static_cast<double>(h.zeros) / n) << scales << "\n";
    for (int e = kMinBin; e <= kMaxBin; ++e) {
      const int64_t c = h.bins[static_cast<size_t>(e - kMinBin)];
      out << tutorial::csv_field(name) << "," << e << "," << c << ","
          << tutorial::csv_number(100.0 * static_cast<double>(c) / n) << scales << "\n";
    }
  };
  rows("all", all);
  for (size_t i = 0; i < rec.layers.size(); ++i) rows(rec.layer_names[i], rec.layers[i]);
}

// ---- training runs -------------------------------------------------------------------------------------

struct Setup {
  data::Dataset train, test;
  Device dev = Device::cpu;
  tutorial::CommonFlags flags;
  int64_t epochs = 1;
  int64_t max_steps = -1;  // per epoch, in every run (< 0: the whole epoch)
  std::ofstream* csv = nullptr;  // run,epoch,train_loss,train_acc,test_acc,seconds,images_per_second,skipped_steps,loss_scale
};

void log_epoch(const Setup& s, const std::string& run, int64_t e, const tutorial::EpochResult& r, double test_acc,
               double scale) {
  std::printf("  [%s] epoch %lld/%lld  loss %.4f  train acc %.2f%%  test acc %.2f%%  %.1f s (%.0f img/s)  "
              "skipped %lld  scale %.15g\n",
              run.c_str(), static_cast<long long>(e), static_cast<long long>(s.epochs), r.loss, 100 * r.accuracy,
              100 * test_acc, r.seconds, r.images_per_second, static_cast<long long>(r.skipped_steps), scale);
  if (s.csv != nullptr) {
    *s.csv << tutorial::csv_field(run) << "," << e << "," << tutorial::csv_number(r.loss) << ","
           << tutorial::csv_number(r.accuracy) << "," << tutorial::csv_number(test_acc) << ","
           << tutorial::csv_number(r.seconds) << "," << tutorial::csv_number(r.images_per_second) << ","
           << r.skipped_steps << "," << tutorial::csv_number(scale) << "\n";
  }
}

struct SkipEvent {
  int64_t step = 0;  // 1-based, over the whole run
  bool injected = false;
  double scale_before = 0, scale_after = 0;
  bool unchanged = false;  // every weight and master weight bit-identical across the step
};

struct ScaledRun {
  std::string label, spec;
  std::vector<double> scales;  // in force at each step
  std::vector<bool> skipped;
  std::vector<SkipEvent> events;
  double test_acc = 0;
};

std::vector<std::vector<double>> snapshot(const nn::Module& model, const optim::Optimizer& opt) {
  std::vector<std::vector<double>> s;
  for (const Tensor& p : model.parameters()) s.push_back(p.to_double());
  for (const Tensor& m : opt.master_weights())
    if (m.defined()) s.push_back(m.to_double());
  return s;
}

// Mixed precision (FP16 working weights, FP32 masters) with the given scaler; an inf is written into
// the first gradient element of the first layer's weight at step `inject` (1-based; 0: never).
ScaledRun train_scaled(const Setup& s, const std::string& label, const std::string& spec, int64_t inject) {
  ScaledRun run{label, spec};
  Generator gen(s.flags.seed);
  auto model = nn::mlp512(gen);
  model->to(s.dev);
  optim::SGD sgd(model->parameters(), {.lr = s.flags.lr, .momentum = s.flags.momentum, .master_weights = true});
  model->to(DType::f16);
  amp::LossScaler scaler(amp::ScalerConfig::parse(spec));
  data::DataLoader train_loader(s.train, {.batch_size = s.flags.batch, .shuffle = true, .seed = s.flags.seed,
                                          .device = s.dev, .dtype = DType::f16});
  data::DataLoader test_loader(s.test, {.batch_size = 1000, .shuffle = false, .device = s.dev, .dtype = DType::f16});

  int64_t base = 0;  // steps before this epoch
  std::vector<std::vector<double>> before;
  tutorial::TrainOptions opts;
  opts.scaler = &scaler;
  opts.max_steps = s.max_steps;
  opts.after_backward = [&](int64_t step) {
    if (base + step + 1 != inject) return;
    before = snapshot(*model, sgd);
    Tensor g = model->parameters()[0].grad();
    std::vector<float> v = g.to_vector();
    v[0] = std::numeric_limits<float>::infinity();  // as if one product had exceeded 65504
    g.copy_(Tensor::from_vector(v, g.shape()));
  };
  opts.after_step = [&](int64_t step, bool applied) {
    const int64_t global = base + step + 1;
    run.scales.push_back(scaler.scale_history().back());
    run.skipped.push_back(!applied);
    if (!applied) {
      SkipEvent ev{global, global == inject, scaler.scale_history().back(), scaler.get_scale(), false};
      if (global == inject) ev.unchanged = snapshot(*model, sgd) == before;
      run.events.push_back(ev);
    }
  };
  for (int64_t e = 1; e <= s.epochs; ++e) {
    const tutorial::EpochResult r = tutorial::train_epoch(*model, sgd, train_loader, e, opts);
    base += r.steps;
    run.test_acc = tutorial::evaluate(*model, test_loader);
    log_epoch(s, label, e, r, run.test_acc, scaler.get_scale());
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"halfling tutorial 06: loss scaling: the activation-gradient histogram, static vs dynamic scale, an overflow skipped"};
  tutorial::CommonFlags f;
  f.epochs = 1;
  f.loss_scale = "static:1024";
  tutorial::add_common_flags(app, f, {"fp32", "mixed"});
  std::string dynamic_spec;
  int64_t inject = -1, record_every = 1, max_steps = -1;
  std::string out_dir = "loss_scaling_logs";
  app.add_option("--dynamic", dynamic_spec,
                 "the dynamic scaler to compare (default dynamic:interval=100, or interval=4 with --smoke)");
  app.add_option("--inject-overflow-at", inject, "write an inf into one gradient at this step (1-based; 0: never; default 50, 5 with --smoke)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--max-steps", max_steps, "stop each epoch of every run after this many steps, at least 1 (default: "
                                           "the whole epoch)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--record-every", record_every, "record the activation gradients of every N-th step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--out", out_dir, "folder for histogram.csv, scale_history.csv and training.csv")->capture_default_str();
  // The common --csv (add_common_flags): where the training log goes instead of <--out>/training.csv.
  CLI11_PARSE(app, argc, argv);

  try {
    if (f.list_variants) {
      tutorial::print_variants();
      return 0;
    }
    const amp::ScalerConfig static_cfg = amp::ScalerConfig::parse(f.loss_scale);
    HL_CHECK(static_cfg.kind == amp::ScalerConfig::Kind::fixed, "--loss-scale: tutorial 06 compares a static scale (",
             "static:S, default static:1024) with the dynamic scaler given by --dynamic; got '", f.loss_scale, "'");
    if (dynamic_spec.empty()) dynamic_spec = f.smoke ? "dynamic:interval=4" : "dynamic:interval=100";
    HL_CHECK(amp::ScalerConfig::parse(dynamic_spec).kind == amp::ScalerConfig::Kind::dynamic,
             "--dynamic: expected dynamic[:key=value,...], got '", dynamic_spec, "'");
    if (inject < 0) inject = f.smoke ? 5 : 50;
    const double static_scale = static_cfg.init_scale;

    Setup s;
    s.dev = tutorial::apply_common_flags(f);
    s.flags = f;
    // The outputs' folder is made, and the training log's path checked, before the data loads.
    std::filesystem::create_directories(out_dir);
    // --csv FILE moves the training log (one row per run and epoch) out of the --out folder; scripts/plot.py
    // all DIR then draws the other two plots, and plot.py curves FILE this one.
    const std::string training_csv = f.csv.empty() ? out_dir + "/training.csv" : f.csv;
    tutorial::check_writable(f.csv.empty() ? "--out" : "--csv", training_csv, tutorial::WrittenBy::stream);
    const std::string dir = f.data.empty() ? tutorial::default_data_dir("mnist") : f.data;
    s.train = data::load_mnist(dir, data::Split::train);
    s.test = data::load_mnist(dir, data::Split::test);
    s.epochs = f.epochs;
    s.max_steps = max_steps;
    if (f.smoke) {
      s.train = s.train.subset(0, 2048);
      s.test = s.test.subset(0, 1000);
      s.epochs = tutorial::smoke_epochs(f, 1);
    }
    std::ofstream csv(training_csv);
    HL_CHECK(csv.good(), "06_loss_scaling: cannot write ", training_csv);
    csv << "run,epoch,train_loss,train_acc,test_acc,seconds,images_per_second,skipped_steps,loss_scale\n";
    s.csv = &csv;

    std::printf("halfling 06_loss_scaling: MLP-512 on MNIST, %lld train / %lld test images, %lld epoch(s) per run, device %s%s\n",
                static_cast<long long>(s.train.size()), static_cast<long long>(s.test.size()),
                static_cast<long long>(s.epochs), device_name(s.dev),
                s.dev == Device::cuda ? (" (" + runtime::cuda_device_description() + ")").c_str() : "");

    // ---- 1. the histogram ----
    const amp::Precision hist_precision = amp::parse_precision(f.precision);
    std::printf("\n== 1. Activation gradients of a %s training run (paper §3.2, Figure 3)\n",
                hist_precision == amp::Precision::fp32 ? "FP32" : "mixed-precision");
    GradientRecorder rec;
    rec.every = record_every;
    Generator gen(f.seed);
    auto net = nn::mlp512(gen);
    net->to(s.dev);
    auto probed = std::make_shared<ProbedMLP>(net, rec);
    for (Histogram& h : rec.layers) h.fates = {Fate{1.0}, Fate{static_scale}};
    const bool mixed = hist_precision == amp::Precision::mixed;
    optim::SGD sgd(probed->parameters(), {.lr = f.lr, .momentum = f.momentum, .master_weights = mixed});
    const DType dt = amp::compute_dtype(hist_precision);
    probed->to(dt);
    amp::LossScaler hist_scaler(static_cfg);
    tutorial::TrainOptions hist_opts;
    hist_opts.max_steps = max_steps;
    if (mixed) {
      hist_opts.scaler = &hist_scaler;
      rec.scaler = &hist_scaler;  // the hooks see S * g: divide it out
    }
    data::DataLoader train_loader(s.train, {.batch_size = f.batch, .shuffle = true, .seed = f.seed, .device = s.dev, .dtype = dt});
    data::DataLoader test_loader(s.test, {.batch_size = 1000, .shuffle = false, .device = s.dev, .dtype = dt});
    const std::string hist_run = mixed ? "histogram run (mixed, " + f.loss_scale + ")" : "histogram run (fp32)";
    for (int64_t e = 1; e <= s.epochs; ++e) {
      const tutorial::EpochResult r = tutorial::train_epoch(*probed, sgd, train_loader, e, hist_opts);
      log_epoch(s, hist_run, e, r, tutorial::evaluate(*probed, test_loader), mixed ? hist_scaler.get_scale() : 1.0);
    }
    const Histogram all = rec.total();
    std::printf("\n%lld gradient values recorded from %lld training steps: the gradient flowing into each layer's\n"
                "output in backward (all %zu layer outputs, true values: divided by the loss scale if any).\n"
                "Columns: where FP16 puts each bin without scaling (S=1) and after scaling by S.\n\n",
                static_cast<long long>(all.total), static_cast<long long>(rec.recorded_steps), rec.layers.size());
    print_histogram(all, static_scale);

    auto pct = [](int64_t a, int64_t b) { return b > 0 ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0; };
    std::printf("\nOf the %lld nonzero values (exact counts, each value rounded to FP16):\n", static_cast<long long>(all.nonzero()));
    std::printf("  %-22s %14s %14s %14s\n", "", "flushed to 0", "subnormal", "overflow");
    for (const Fate& fate : all.fates) {
      std::printf("  %-22s %13.3f%% %13.3f%% %13.3f%%\n", ("S = " + scale_str(fate.scale)).c_str(),
                  pct(fate.flushed, all.nonzero()), pct(fate.subnormal, all.nonzero()), pct(fate.overflow, all.nonzero()));
    }
    std::printf("\nPer layer (the gradient of the loss with respect to that layer's output):\n");
    std::printf("  %-26s %12s %9s %16s %16s\n", "layer output", "values", "zero", "flushed (S=1)",
                ("flushed (S=" + scale_str(static_scale).substr(0, scale_str(static_scale).find(' ')) + ")").c_str());
    for (size_t i = 0; i < rec.layers.size(); ++i) {
      const Histogram& h = rec.layers[i];
      std::printf("  %-26s %12lld %8.2f%% %15.3f%% %15.3f%%\n", rec.layer_names[i].c_str(), static_cast<long long>(h.total),
                  pct(h.zeros, h.total), pct(h.fates[0].flushed, h.nonzero()), pct(h.fates[1].flushed, h.nonzero()));
    }

    // ---- 2. static vs dynamic ----
    std::printf("\n== 2. Static vs dynamic loss scale, mixed precision (FP16 weights and gradients, FP32 masters)\n");
    std::printf("An inf is written into one gradient element of layer 1's weight at step %lld (0: never).\n",
                static_cast<long long>(inject));
    std::vector<ScaledRun> runs;
    runs.push_back(train_scaled(s, "static", f.loss_scale, inject));
    runs.push_back(train_scaled(s, "dynamic", dynamic_spec, inject));
    const ScaledRun& st = runs[0];
    const ScaledRun& dy = runs[1];

    std::printf("\nThe scale in force at each step (rows where something changed):\n");
    std::printf("  %8s  %-18s %-18s %s\n", "step", "static", "dynamic", "event");
    const size_t n = std::min(st.scales.size(), dy.scales.size());
    int printed = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool change = i == 0 || i + 1 == n || dy.scales[i] != dy.scales[i - 1] || st.scales[i] != st.scales[i - 1] ||
                          st.skipped[i] || dy.skipped[i];
      if (!change) continue;
      if (++printed > 40) {
        std::printf("  ... (every step is in %s/scale_history.csv)\n", out_dir.c_str());
        break;
      }
      std::string event;
      if (st.skipped[i] || dy.skipped[i]) {
        event = std::string("skipped: ") + (st.skipped[i] ? "static " : "") + (dy.skipped[i] ? "dynamic " : "") +
                (static_cast<int64_t>(i) + 1 == inject ? "(injected inf)" : "(overflow)");
      } else if (i > 0 && dy.scales[i] > dy.scales[i - 1]) {
        event = "dynamic grew after a run of clean steps";
      } else if (i > 0 && dy.scales[i] < dy.scales[i - 1]) {
        event = "dynamic backed off after the overflow";
      }
      std::printf("  %8zu  %-18s %-18s %s\n", i + 1, scale_str(st.scales[i]).c_str(), scale_str(dy.scales[i]).c_str(),
                  event.c_str());
    }
    std::ofstream hist(out_dir + "/scale_history.csv");
    HL_CHECK(hist.good(), "06_loss_scaling: cannot write ", out_dir, "/scale_history.csv");
    hist << "step,run,scale,skipped\n";
    for (const ScaledRun& r : runs)
      for (size_t i = 0; i < r.scales.size(); ++i)
        hist << i + 1 << "," << tutorial::csv_field(r.label) << "," << tutorial::csv_number(r.scales[i]) << ","
             << (r.skipped[i] ? 1 : 0) << "\n";

    // ---- 3. the injected overflow ----
    std::printf("\n== 3. The injected overflow\n");
    for (const ScaledRun& r : runs) {
      int64_t skipped = 0;
      for (bool b : r.skipped) skipped += b ? 1 : 0;
      std::printf("%s (%s): %lld of %zu steps skipped, final scale %s, test acc %.2f%%\n", r.label.c_str(),
                  amp::ScalerConfig::parse(r.spec).str().c_str(), static_cast<long long>(skipped), r.scales.size(),
                  scale_str(r.scales.empty() ? 0 : r.scales.back()).c_str(), 100 * r.test_acc);
      for (const SkipEvent& ev : r.events) {
        if (!ev.injected) continue;
        std::printf("  step %lld: inf in the gradient -> step skipped, weights and master weights %s, scale %s -> %s\n",
                    static_cast<long long>(ev.step), ev.unchanged ? "unchanged" : "CHANGED",
                    scale_str(ev.scale_before).c_str(), scale_str(ev.scale_after).c_str());
      }
      if (inject > static_cast<int64_t>(r.scales.size()) && inject > 0)
        std::printf("  (step %lld was never reached: the run had %zu steps)\n", static_cast<long long>(inject), r.scales.size());
    }

    // ---- 4. what the scales do to the histogram ----
    const double dyn_final = dy.scales.empty() ? 1.0 : dy.scales.back();
    std::printf("\n== 4. The histogram's nonzero values in FP16 after scaling by S (from the bins: a bin counts where its\n"
                "lower edge lands; exact counts for S=1 and the static S are above)\n");
    std::printf("  %-24s %14s %14s %14s\n", "S", "flushed to 0", "subnormal", "overflow");
    std::vector<std::pair<std::string, double>> table;
    for (int k : {0, 3, 6, 10, 13, 16, 20, 24}) table.push_back({"", std::ldexp(1.0, k)});
    table.push_back({" (static)", static_scale});
    table.push_back({" (dynamic, final)", dyn_final});
    for (const auto& [tag, sc] : table) {
      const BinSummary b = summarize_bins(all, sc);
      std::printf("  %-24s %13.3f%% %13.3f%% %13.3f%%\n", (scale_str(sc).substr(0, scale_str(sc).find(' ')) + tag).c_str(),
                  b.flushed, b.subnormal, b.overflow);
    }
    write_histogram_csv(out_dir + "/histogram.csv", rec, all, static_scale, dyn_final);
    std::printf("\nwrote %s/histogram.csv, %s/scale_history.csv and %s (scripts/plot.py draws them)\n",
                out_dir.c_str(), out_dir.c_str(), training_csv.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "06_loss_scaling: %s\n", e.what());
    return 1;
  }
}
