// Softmax ladder benchmark (GPU): every CUDA softmax rung and the cross-entropy paths, timed with CUDA
// events after warm-up (median of many samples), next to the device copy bandwidth measured in the
// same run, so every number is a ratio (DESIGN.md §6).
//
//   build/bench/softmax_bench [--samples N] [--quick] [--sweep] [--shapes RxC,...] [--variants a,b,...]
//
// --shapes replaces the default shapes (rows of 1024 columns or more are timed as bandwidth-bound,
// shorter ones as launch-bound heads); --variants times only the named softmax rungs (the copy and the
// cross-entropy rows stay). Both exist so that a profiler (scripts/gpu_check.sh ncu) can be pointed at
// one kernel on one shape.
//
// --sweep also times register_row with every launch plan its rule can choose for each shape (block
// size x packs per thread, through the tuning hook in register_row_plan.h), to tune kPreferredThreads.
//
// Rows of >= 1024 columns are bandwidth-bound: GB/s = compulsory bytes / time, where the compulsory
// bytes are the FP16 input read once and the FP16 output (probabilities, or the gradient for
// cross-entropy) written once — extra passes a kernel makes count against it, so paths compare by time.
// "%copy" compares it with cudaMemcpyAsync device-to-device moving the same number of bytes (read +
// write). 10-class heads are launch-bound: microseconds per call is the number that matters.
// bench/pytorch/softmax.py prints the same table for torch.softmax / F.cross_entropy.
//
// Each row also prints its working set (the tensors it reads and writes) and the copy's, with the GPU's
// L2 size in the header. The softmax rows and the fused cross-entropy touch what the copy touches (the
// f16 logits and an f16 output); the unfused cross-entropy adds two f32 scratch tensors, and where that
// takes it out of the L2 while the copy fits, the row says so (bench/stats.h, fits_in_l2): its
// %copy is then not a like-for-like ratio. The times themselves are measured as they always were.
// There is no correctness check here: SoftmaxCuda.* (tests/kernels/test_softmax_cuda.cpp) compares
// every rung, and every plan --sweep times, with a float64 reference into poisoned outputs.
// Without a GPU it prints "no CUDA device" and exits 0.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cuda_timing.h"
#include "kernels/cuda/softmax/register_row_plan.h"
#include "kernels/runtime.h"
#include "kernels/softmax.h"

using namespace hl;
namespace k = hl::kernels;

namespace {

using bench::Buf;
using bench::check;
using bench::median_us;
using bench::stream;
using bench::upload;
using bench::upload_random;

constexpr uint64_t kLogitSeed = 0x9E3779B97F4A7C15ull;

// Softmax over rows x cols f16 logits x into f16 probabilities y, on the GPU.
k::SoftmaxArgs softmax_args(int64_t rows, int64_t cols, const void* x, void* y) {
  k::SoftmaxArgs a;
  a.device = DeviceType::cuda;
  a.op = k::SoftmaxOp::softmax;
  a.rows = rows;
  a.cols = cols;
  a.x = x;
  a.x_type = DType::f16;
  a.y = y;
  a.y_type = DType::f16;
  return a;
}

// Cross-entropy (mean over the rows) of f16 logits x: f16 gradient g, f32 per-row loss and statistics,
// the gradient scale read from device memory. The caller sets the op.
k::SoftmaxArgs xent_args(int64_t rows, int64_t cols, const void* x, void* g, const void* labels, void* loss,
                         void* stats, const void* grad_scale) {
  k::SoftmaxArgs xe;
  xe.device = DeviceType::cuda;
  xe.rows = rows;
  xe.cols = cols;
  xe.x = x;
  xe.x_type = DType::f16;
  xe.labels = static_cast<const int32_t*>(labels);
  xe.loss = loss;
  xe.stats = stats;
  xe.y = g;
  xe.y_type = DType::f16;
  xe.grad_scale = grad_scale;
  xe.multiplier = 1.0 / static_cast<double>(rows);
  return xe;
}

// The unfused cross-entropy path, loss and gradient: log_softmax to f32, NLL, NLL backward, log_softmax
// backward (4 launches; logp and glogp are f32 [rows, cols] scratch).
void unfused_xent(int64_t rows, int64_t cols, const void* x, void* logp, void* glogp, const void* labels, void* loss,
                  void* g) {
  const auto* lab = static_cast<const int32_t*>(labels);
  k::log_softmax_forward(DeviceType::cuda, rows, cols, x, DType::f16, logp, DType::f32);
  k::nll_forward(DeviceType::cuda, rows, cols, logp, DType::f32, lab, loss);
  k::nll_backward(DeviceType::cuda, rows, cols, lab, loss, glogp, DType::f32);
  k::log_softmax_backward(DeviceType::cuda, rows, cols, logp, glogp, DType::f32, g, DType::f16);
}

// The GPU's L2 size (bytes), read once the GPU is known to be there (main).
int64_t g_l2 = 0;

// One row. `bytes`: the compulsory bytes of a bandwidth-bound row, which the copy moves too (0 for a
// launch-bound head: no GB/s, no %copy); `ws`: the row's working set, the tensors it reads and writes
// (the copy's is `bytes`).
void row(const char* op, int64_t rows, int64_t cols, const char* dtypes, const std::string& variant, double us,
         double bytes, double copy_gbs, double ws) {
  if (bytes > 0) {
    const double gbs = bytes / (us * 1e-6) / 1e9;
    std::printf("%-10s %-12s %-10s %-22s %10.2f %9.1f %6.0f%% %8.1f %8.1f%s\n", op,
                (std::to_string(rows) + "x" + std::to_string(cols)).c_str(), dtypes, variant.c_str(), us, gbs,
                100.0 * gbs / copy_gbs, ws / 1e6, bytes / 1e6, bench::l2_note(ws, bytes, g_l2));
  } else {
    std::printf("%-10s %-12s %-10s %-22s %10.2f %9s %7s %8.3f %8s\n", op,
                (std::to_string(rows) + "x" + std::to_string(cols)).c_str(),
                dtypes, variant.c_str(), us, "-", "-", ws / 1e6, "-");
  }
}

// A rung that cannot take this shape (register_row past its register capacity) gets a line that
// says so instead of a time.
bool declined(const std::string& rung, const k::SoftmaxArgs& a) {
  const auto* v = k::SoftmaxRegistry::instance().find(rung, DeviceType::cuda);
  if (v == nullptr || v->unsupported == nullptr || v->unsupported(a) == nullptr) return false;
  std::printf("%-10s %-12s %-10s %-22s %10s %9s %7s\n", "softmax",
              (std::to_string(a.rows) + "x" + std::to_string(a.cols)).c_str(), "f16->f16", rung.c_str(), "declines",
              "-", "-");
  return true;
}

// register_row with each plan its rule gives for preferred block sizes 32..1024 (each distinct plan
// once), labelled "register_row TxP": T threads per block, P packs (or values) per thread.
void sweep_register_row(int64_t rows, int64_t cols, const void* x, void* y, int samples, double copy_gbs) {
  namespace rr = k::register_row;
  const k::SoftmaxArgs a = softmax_args(rows, cols, x, y);
  const auto* v = k::SoftmaxRegistry::instance().find("register_row", DeviceType::cuda);
  if (v == nullptr || (v->unsupported != nullptr && v->unsupported(a) != nullptr)) return;  // said above
  // The packed path's width: the buffers come from cudaMalloc (256-byte aligned), so rows of whole
  // 8-value packs take it (register_row.cuh path_width).
  const int width = cols % 8 == 0 ? 8 : 1;
  const rr::Plan chosen = rr::plan(cols, width);  // what the rule picks without the hook
  struct Reset {  // the hook goes back to the rule however the loop ends
    ~Reset() { rr::preferred_threads_for_tuning().store(0); }
  } reset;
  std::vector<std::pair<int, int>> seen;
  for (int preferred = 32; preferred <= rr::kMaxThreads; preferred *= 2) {
    const rr::Plan p = rr::plan(cols, width, preferred);
    if (p.threads == 0 || std::find(seen.begin(), seen.end(), std::make_pair(p.threads, p.per_thread)) != seen.end())
      continue;
    seen.push_back({p.threads, p.per_thread});
    rr::preferred_threads_for_tuning().store(preferred);
    const double us = median_us([&] { k::softmax(a, "register_row"); }, samples, 10);
    const std::string label = "register_row " + std::to_string(p.threads) + "x" + std::to_string(p.per_thread) +
                              (p.threads == chosen.threads && p.per_thread == chosen.per_thread ? "*" : "");
    const double bytes = 4.0 * static_cast<double>(rows * cols);
    row("softmax", rows, cols, "f16->f16", label, us, bytes, copy_gbs, bytes);
  }
}

// "128x65536" -> {128, 65536}; anything else is refused with a message naming the flag and the text.
std::pair<int64_t, int64_t> parse_shape(const std::string& text) {
  std::smatch m;
  if (!std::regex_match(text, m, std::regex(R"(([0-9]{1,9})x([0-9]{1,9}))")))
    throw std::runtime_error("softmax_bench: --shapes: '" + text + "' is not ROWSxCOLS (e.g. 128x65536)");
  const int64_t rows = std::stoll(m[1].str()), cols = std::stoll(m[2].str());
  if (rows < 1 || cols < 1 || rows * cols > (int64_t{1} << 30))
    throw std::runtime_error("softmax_bench: --shapes: '" + text + "' needs rows and columns >= 1 and at most 2^30 values");
  return {rows, cols};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"softmax ladder benchmark"};
  int samples = 25;
  bool quick = false, sweep = false;
  app.add_option("--samples", samples, "timed samples per entry (the median is shown)")->check(CLI::Range(3, 1000));
  app.add_flag("--quick", quick, "fewer shapes (a smoke run)");
  app.add_flag("--sweep", sweep, "also time register_row with every launch plan (block size x packs per thread)");
  std::vector<std::string> shape_texts, only;
  app.add_option("--shapes", shape_texts, "ROWSxCOLS,... in place of the default shapes")->delimiter(',');
  app.add_option("--variants", only, "softmax rungs to time (default: every CUDA rung)")->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  // Checked before looking for a GPU, so that a typo is refused on any machine.
  std::vector<std::pair<int64_t, int64_t>> chosen;
  std::vector<std::string> rungs;
  try {
    for (const auto& t : shape_texts) chosen.push_back(parse_shape(t));
    std::string known;
    for (const auto& v : k::SoftmaxRegistry::instance().all())
      if (v.device == DeviceType::cuda && v.name != "fused_xent" && v.name != "naive_fp16_nomax") {
        known += (known.empty() ? "" : ", ") + v.name;
        if (only.empty() || std::find(only.begin(), only.end(), v.name) != only.end()) rungs.push_back(v.name);
      }
    for (const auto& name : only)
      if (std::find(rungs.begin(), rungs.end(), name) == rungs.end())
        throw std::runtime_error("softmax_bench: --variants: no CUDA softmax rung '" + name + "' (known: " + known + ")");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }

  if (!bench::print_gpu_header("softmax_bench", argc, argv)) return 0;
  std::printf("# CUDA events, 3 warm-up calls, median of %d samples; GB/s = (bytes read + written) / time;\n"
              "# %%copy = GB/s / cudaMemcpyAsync D2D GB/s on the same bytes, measured in this run\n",
              samples);
  g_l2 = bench::l2_bytes();
  bench::print_l2_legend(g_l2);
  if (sweep)
    std::printf("# --sweep: register_row TxP = T threads per block, P packs per thread; * = the rule's choice\n");
  std::printf("%-10s %-12s %-10s %-22s %10s %9s %7s %8s %8s\n", "op", "shape", "dtypes", "variant", "us/call", "GB/s",
              "%copy", "ws MB", "copy MB");

  std::vector<std::pair<int64_t, int64_t>> big = {{4096, 1024}, {4096, 4096}, {1024, 32768}, {128, 65536}};
  std::vector<std::pair<int64_t, int64_t>> heads = {{128, 10}, {1024, 10}};
  if (quick) {
    big = {{4096, 1024}};
    heads = {{128, 10}};
  }
  if (!chosen.empty()) {
    big.clear();
    heads.clear();
    for (const auto& shape : chosen) (shape.second >= 1024 ? big : heads).push_back(shape);
  }

  for (auto [rows, cols] : big) {
    const size_t n = static_cast<size_t>(rows * cols);
    Buf x(n * 2), y(n * 4), g(n * 2), lse(static_cast<size_t>(rows) * 8), loss(static_cast<size_t>(rows) * 4),
        lab(static_cast<size_t>(rows) * 4), one(4);
    upload_random(x.p, n, DType::f16, kLogitSeed, -8.0f, 8.0f);  // logits in [-8, 8)
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) labels[static_cast<size_t>(r)] = static_cast<int32_t>((r * 7919) % cols);
    upload(lab.p, labels.data(), labels.size() * 4, "labels");
    const float f1 = 1.0f;
    upload(one.p, &f1, 4, "one");

    // The bar: a device-to-device copy moving n f16 values (read + write = 4n bytes).
    const double copy_us = median_us(
        [&] { check(cudaMemcpyAsync(g.p, x.p, n * 2, cudaMemcpyDeviceToDevice, stream()), "copy"); }, samples, 10);
    const double bytes = 4.0 * static_cast<double>(n);  // also the working set of a softmax or a fused xent
    const double copy_gbs = bytes / (copy_us * 1e-6) / 1e9;
    row("copy", rows, cols, "f16->f16", "cudaMemcpy D2D", copy_us, bytes, copy_gbs, bytes);

    for (const auto& rung : rungs) {
      const int reps = rung == "naive" ? 1 : 10;
      const int smp = rung == "naive" ? std::min(samples, 5) : samples;
      const k::SoftmaxArgs a = softmax_args(rows, cols, x.p, g.p);
      if (declined(rung, a)) continue;
      const double us = median_us([&] { k::softmax(a, rung); }, smp, reps);
      row("softmax", rows, cols, "f16->f16", rung, us, bytes, copy_gbs, bytes);
    }

    if (sweep) sweep_register_row(rows, cols, x.p, g.p, samples, copy_gbs);

    // Cross-entropy, loss + gradient: the fused kernel (one launch), its framework split (forward,
    // backward: two launches, the logits read twice) and the unfused path (log_softmax to f32, NLL,
    // NLL backward, log_softmax backward).
    const k::SoftmaxArgs xe = xent_args(rows, cols, x.p, g.p, lab.p, loss.p, lse.p, one.p);
    {
      k::SoftmaxArgs f = xe;
      f.op = k::SoftmaxOp::xent_fused;
      f.stats = nullptr;
      const double us = median_us([&] { k::softmax(f); }, samples, 10);
      row("xent", rows, cols, "f16->f16", "fused_xent 1 pass", us, bytes, copy_gbs, bytes);
      k::SoftmaxArgs fw = xe, bw = xe;
      fw.op = k::SoftmaxOp::xent_forward;
      bw.op = k::SoftmaxOp::xent_backward;
      const double us2 = median_us([&] { k::softmax(fw); k::softmax(bw); }, samples, 10);
      row("xent", rows, cols, "f16->f16", "fused_xent fwd+bwd", us2, bytes, copy_gbs, bytes);
    }
    {
      Buf logp(n * 4), glogp(n * 4), gl(static_cast<size_t>(rows) * 4);
      const double us =
          median_us([&] { unfused_xent(rows, cols, x.p, logp.p, glogp.p, lab.p, loss.p, g.p); }, samples, 5);
      // The logits and the gradient (f16), and the f32 log-probabilities and their gradient.
      row("xent", rows, cols, "f16->f16", "unfused (4 kernels)", us, bytes, copy_gbs, 12.0 * static_cast<double>(n));
    }
  }

  // 10-class heads: launch-bound; microseconds per call.
  for (auto [rows, cols] : heads) {
    const size_t n = static_cast<size_t>(rows * cols);
    Buf x(n * 2), y(n * 4), g(n * 2), lse(static_cast<size_t>(rows) * 8), loss(static_cast<size_t>(rows) * 4),
        lab(static_cast<size_t>(rows) * 4), one(4), logp(n * 4), glogp(n * 4);
    upload_random(x.p, n, DType::f16, kLogitSeed, -8.0f, 8.0f);  // logits in [-8, 8)
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) labels[static_cast<size_t>(r)] = static_cast<int32_t>(r % cols);
    upload(lab.p, labels.data(), labels.size() * 4, "labels");
    const float f1 = 1.0f;
    upload(one.p, &f1, 4, "one");
    for (const auto& rung : rungs) {
      const k::SoftmaxArgs a = softmax_args(rows, cols, x.p, g.p);
      if (declined(rung, a)) continue;
      row("softmax", rows, cols, "f16->f16", rung, median_us([&] { k::softmax(a, rung); }, samples, 100), 0, 1,
          4.0 * static_cast<double>(n));
    }
    const k::SoftmaxArgs xe = xent_args(rows, cols, x.p, g.p, lab.p, loss.p, lse.p, one.p);
    k::SoftmaxArgs f = xe, fw = xe, bw = xe;
    f.op = k::SoftmaxOp::xent_fused;
    fw.op = k::SoftmaxOp::xent_forward;
    bw.op = k::SoftmaxOp::xent_backward;
    const double ws = 4.0 * static_cast<double>(n);
    row("xent", rows, cols, "f16->f16", "fused_xent 1 pass", median_us([&] { k::softmax(f); }, samples, 100), 0, 1,
        ws);
    row("xent", rows, cols, "f16->f16", "fused_xent fwd+bwd",
        median_us([&] { k::softmax(fw); k::softmax(bw); }, samples, 100), 0, 1, ws);
    row("xent", rows, cols, "f16->f16", "unfused (4 kernels)",
        median_us([&] { unfused_xent(rows, cols, x.p, logp.p, glogp.p, lab.p, loss.p, g.p); }, samples, 50),
        0, 1, 3.0 * ws);
  }
  check(cudaDeviceSynchronize(), "final sync");
  return 0;
}
