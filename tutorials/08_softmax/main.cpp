// Tutorial 08: softmax and cross-entropy, from the FP16 overflow that max subtraction prevents to a
// fused loss kernel. The chapter is tutorials/08_softmax/README.md.
//
//   build/tutorials/08_softmax [--device cpu|cuda] [--softmax RUNG] [--smoke] [--list-variants]
//
// 1. FP16 without max subtraction: exp(12) is already past 65504 (naive_fp16_nomax), while the
//    FP32-math rungs give the right answer.
// 2. Every softmax rung of the chosen device against a float64 softmax computed here, timed.
// 3. The fused cross-entropy (what cross_entropy runs) against log_softmax + nll (cross_entropy_unfused):
//    the same loss and gradient under a loss scale, and their speed.
// Exits non-zero if any check fails.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "framework/ops.h"
#include "framework/tensor.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/runtime.h"
#include "kernels/softmax.h"
#include "tutorials/common/cli.h"

using namespace hl;
namespace k = hl::kernels;

namespace {

bool g_ok = true;
// The larger of a running maximum error and a new one, NaN winning: std::max(err, NaN) keeps err (a
// comparison with NaN is false), so a rung that wrote nothing into a NaN-poisoned output would have
// printed an error of 0 and "OK".
double worst(double err, double e) { return std::isnan(err) || e <= err ? err : e; }

const char* verdict(bool ok) {
  if (!ok) g_ok = false;
  return ok ? "OK" : "FAIL";
}

// y = softmax(x) with one named rung ("" = the registry's choice).
Tensor run_softmax(const Tensor& x, DType out_t, const std::string& rung) {
  Tensor y = Tensor::full(x.shape(), std::nan(""), out_t, x.device());  // poisoned: a skipped write shows
  k::SoftmaxArgs a;
  a.device = x.device();
  a.op = k::SoftmaxOp::softmax;
  a.rows = x.size(0);
  a.cols = x.size(1);
  a.x = x.data_ptr();
  a.x_type = x.dtype();
  a.y = y.data_ptr();
  a.y_type = out_t;
  k::softmax(a, rung);
  return y;
}

void sync(Device dev) {
  if (dev == Device::cuda) runtime::cuda_synchronize();
}

// Median microseconds per call of f (after warm-up), timed on the host around a device sync.
template <class F>
double time_us(Device dev, F&& f, int reps) {
  for (int i = 0; i < 2; ++i) f();
  sync(dev);
  std::vector<double> t;
  for (int s = 0; s < 5; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    sync(dev);
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string fmt(double v) {
  if (std::isnan(v)) return "nan";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// ---- 1. the overflow ------------------------------------------------------------------------------------
void overflow_lesson(Device dev) {
  std::printf("== 1. FP16 softmax without max subtraction (paper §3.3)\n");
  std::printf("FP16 largest finite value: 65504\n");
  for (int v : {10, 11, 12}) {
    const float e = std::exp(static_cast<float>(v));
    const float h = static_cast<float>(half(e));
    std::printf("exp(%d) = %.1f -> FP16 %s\n", v, static_cast<double>(e),
                std::isinf(h) ? "inf (overflow)" : fmt(static_cast<double>(h)).c_str());
  }
  // The row's first logit: 12 overflows FP16's exp; exercise 2 of the chapter makes it 11, which fits.
  // Everything below (the label, the check, the FP32 reference) follows from it.
  const int top = 12;
  const Tensor x = Tensor::from_vector(std::vector<float>{static_cast<float>(top), 1, 0, -1}, {1, 4}, DType::f16, dev);
  const auto bad = run_softmax(x, DType::f16, "naive_fp16_nomax").to_double();
  std::printf("naive_fp16_nomax on %s, logits [%d, 1, 0, -1] -> [%s, %s, %s, %s]\n", device_name(dev), top,
              fmt(bad[0]).c_str(), fmt(bad[1]).c_str(), fmt(bad[2]).c_str(), fmt(bad[3]).c_str());
  if (std::isinf(static_cast<float>(half(std::exp(static_cast<float>(top)))))) {
    std::printf("  exp(%d) = inf, the sum is inf, inf / inf = NaN: %s\n", top, verdict(std::isnan(bad[0])));
  } else {  // it fits FP16: finite, but every exponential and the sum were rounded to FP16
    const bool finite = std::all_of(bad.begin(), bad.end(), [](double v) { return std::isfinite(v); });
    std::printf("  exp(%d) fits FP16, so the output is finite: %s\n", top, verdict(finite));
  }
  // The registry's choice (or the --softmax pin), unless the pin cannot do an FP32-output softmax.
  k::SoftmaxArgs p;
  p.device = dev;
  p.rows = 1;
  p.cols = 4;
  p.x_type = DType::f16;
  p.y_type = DType::f32;
  const std::string rung = k::softmax_can_run(p) ? "" : dev == Device::cpu ? "reference" : "warp_row";
  const auto good = run_softmax(x, DType::f32, rung).to_double();
  const double z = std::exp(static_cast<double>(top)) + std::exp(1.0) + 1.0 + std::exp(-1.0);
  const double want[4] = {std::exp(static_cast<double>(top)) / z, std::exp(1.0) / z, 1.0 / z, std::exp(-1.0) / z};
  double err = 0;
  for (int i = 0; i < 4; ++i) err = worst(err, std::fabs(good[static_cast<size_t>(i)] - want[i]));
  std::printf("max-subtracted, FP32 math -> [%s, %s, %s, %s]  max error %.1e: %s\n", fmt(good[0]).c_str(),
              fmt(good[1]).c_str(), fmt(good[2]).c_str(), fmt(good[3]).c_str(), err, verdict(err < 1e-6));
}

// ---- 2. the ladder ---------------------------------------------------------------------------------------
void ladder(Device dev, bool smoke) {
  std::printf("\n== 2. The softmax rungs on %s (f16 logits -> f16 probabilities, f32 math)\n", device_name(dev));
  std::vector<std::pair<int64_t, int64_t>> shapes = smoke ? std::vector<std::pair<int64_t, int64_t>>{{64, 10}, {16, 1000}}
                                                          : std::vector<std::pair<int64_t, int64_t>>{
                                                                {1024, 10}, {4096, 1024}, {1024, 32768}, {128, 65536}};
  if (dev == Device::cpu && !smoke) shapes = {{1024, 10}, {256, 1024}, {8, 32768}};
  Generator gen(8);
  std::printf("%-18s %-12s %14s %12s  %s\n", "rung", "shape", "max rel error", "us/call", "check");
  for (auto [rows, cols] : shapes) {
    const Tensor xc = Tensor::uniform({rows, cols}, gen, -10, 10, DType::f16);
    // The float64 softmax of the same FP16 values, written out here (two passes, max subtracted).
    const auto xv = xc.to_double();
    std::vector<double> want(xv.size());
    for (int64_t r = 0; r < rows; ++r) {
      const double* row = xv.data() + r * cols;
      const double m = *std::max_element(row, row + cols);
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += std::exp(row[c] - m);
      for (int64_t c = 0; c < cols; ++c) want[static_cast<size_t>(r * cols + c)] = std::exp(row[c] - m) / s;
    }
    const Tensor x = xc.to(dev);
    for (const auto& rung : k::SoftmaxRegistry::instance().names(dev)) {
      if (rung == "fused_xent" || rung == "naive_fp16_nomax") continue;
      {  // a rung that cannot take this shape (register_row past its register capacity, packed_row and
         // packed_warp on rows that are not whole 16-byte packs) says so
        k::SoftmaxArgs probe;
        probe.device = x.device();
        probe.rows = rows;
        probe.cols = cols;
        probe.x_type = probe.y_type = DType::f16;
        const auto* v = k::SoftmaxRegistry::instance().find(rung, probe.device);
        if (v != nullptr && v->unsupported != nullptr && v->unsupported(probe) != nullptr) {
          std::printf("%-18s %-12s %14s %12s  %s\n", rung.c_str(),
                      (std::to_string(rows) + "x" + std::to_string(cols)).c_str(), "-", "-",
                      "declined (not a row this rung takes)");
          continue;
        }
      }
      const auto got = run_softmax(x, DType::f16, rung).to_double();
      double err = 0;  // relative to each probability, above FP16's subnormal range
      for (size_t i = 0; i < got.size(); ++i)
        err = worst(err, std::fabs(got[i] - want[i]) / std::max(want[i], 0x1p-14));
      const int reps = rung == "naive" ? 1 : 20;
      const double us = time_us(dev, [&] { run_softmax(x, DType::f16, rung); }, reps);
      // FP16 output: one rounding (2^-11 relative) on top of FP32 math; 2^-10 leaves room for the
      // FP32 error of long rows.
      std::printf("%-18s %-12s %14.2e %12.1f  %s\n", rung.c_str(),
                  (std::to_string(rows) + "x" + std::to_string(cols)).c_str(), err, us, verdict(err <= 0x1p-10));
    }
  }
  if (dev == Device::cpu)
    std::printf("(on a GPU this section times naive, block_row, warp_row, register_warp, register_row, packed_row,\n"
                " packed_online, online and the opt-in cluster_row, packed_warp and packed_kept)\n");
}

// ---- 3. fused vs unfused cross-entropy ---------------------------------------------------------------------
void cross_entropy_lesson(Device dev, bool smoke) {
  std::printf("\n== 3. Cross-entropy: fused (softmax + loss + gradient) vs log_softmax + nll\n");
  const int64_t rows = smoke ? 128 : 1024, cols = 10;
  const double S = 1024.0;  // a loss scale, as scaler.scale(loss).backward() would apply (paper §3.2)
  Generator gen(9);
  const Tensor base = Tensor::uniform({rows, cols}, gen, -8, 8, DType::f16).to(dev);
  std::vector<int32_t> lab(static_cast<size_t>(rows));
  for (auto& l : lab) l = static_cast<int32_t>(gen.below(cols));
  const Tensor labels = Tensor::from_vector(lab, {rows}, dev);

  k::SoftmaxArgs probe;
  probe.device = dev;
  probe.op = k::SoftmaxOp::xent_forward;
  probe.rows = rows;
  probe.cols = cols;
  probe.x_type = DType::f16;
  std::printf("cross_entropy on %s runs: %s\n", device_name(dev),
              k::softmax_can_run(probe) ? (k::softmax_variant_for(probe) + " (fused)").c_str()
                                        : "log_softmax + nll (the pinned rung has no fused loss)");
  Tensor a = base.clone(), b = base.clone();
  a.requires_grad_();
  b.requires_grad_();
  const Tensor la = cross_entropy(a, labels), lb = cross_entropy_unfused(b, labels);
  mul(la, S).backward();
  mul(lb, S).backward();
  const auto ga = a.grad().to_double(), gb = b.grad().to_double();
  double gerr = 0, gmax = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    gerr = worst(gerr, std::fabs(ga[i] - gb[i]));
    gmax = std::max(gmax, std::fabs(gb[i]));
  }
  const double lerr = std::fabs(la.item() - lb.item());
  std::printf("loss  fused %.7f  unfused %.7f  |diff| %.1e: %s\n", la.item(), lb.item(), lerr,
              verdict(lerr <= 1e-5 * (1 + std::fabs(lb.item()))));
  std::printf("grad  (f16, x S=%g / batch)  max |fused - unfused| %.1e of max |grad| %.3g: %s\n", S, gerr, gmax,
              verdict(gerr <= 2 * 0x1p-11 * gmax));
  const auto step = [&](bool fused) {
    Tensor t = base.clone();
    t.requires_grad_();
    mul(fused ? cross_entropy(t, labels) : cross_entropy_unfused(t, labels), S).backward();
  };
  const int reps = smoke ? 5 : 50;
  const double tf = time_us(dev, [&] { step(true); }, reps), tu = time_us(dev, [&] { step(false); }, reps);
  std::printf("forward + backward of the loss: fused %.1f us, unfused %.1f us (framework overhead included)\n", tf, tu);
  std::printf("fused: 1 kernel forward (+ the mean), 1 backward; nothing [%lld, %lld] kept but the logits\n",
              static_cast<long long>(rows), static_cast<long long>(cols));
  std::printf("unfused: log_softmax + nll + mean forward, their 3 backwards; an f32 [%lld, %lld] log-prob matrix kept\n",
              static_cast<long long>(rows), static_cast<long long>(cols));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tutorial 08: softmax and cross-entropy in FP16 and FP32"};
  tutorial::CommonFlags f;
  tutorial::add_common_flags(app, f, {"fp32"});
  CLI11_PARSE(app, argc, argv);
  try {
    if (f.list_variants) {
      tutorial::print_variants();
      return 0;
    }
    const Device dev = tutorial::apply_common_flags(f);
    std::printf("device: %s%s\n", device_name(dev),
                dev == Device::cuda ? (" (" + runtime::cuda_device_description() + ")").c_str() : "");
    overflow_lesson(dev);
    ladder(dev, f.smoke);
    try {
      cross_entropy_lesson(dev, f.smoke);
    } catch (const Error& e) {  // e.g. --softmax naive_fp16_nomax, which computes no loss
      std::printf("cross-entropy with --softmax %s: %s\n", f.softmax.c_str(), e.what());
    }
    std::printf("\n%s\n", g_ok ? "all checks passed" : "SOME CHECKS FAILED");
    return g_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
