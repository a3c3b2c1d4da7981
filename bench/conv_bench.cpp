// Convolution benchmark: every CUDA rung of the conv ladder (kernels/cuda/conv/) and cuDNN, on the
// LeNet layers and the VGG-small 3x3 layers, for the three passes (forward, backward_data,
// backward_weight), FP16 NCHW inputs and outputs, FP32 accumulation.
//
//   build/bench/conv_bench [--batch 128] [--runs 25] [--layers all|lenet|vgg] [--only TEXT]
//                          [--passes forward,backward_data,backward_weight] [--variants a,b,...] [--no-cudnn]
//                          [--sweep-splits] [--tiled-layout]
//
// --only keeps the layers whose name contains TEXT (e.g. "256->256"), --passes and --variants the named
// passes and rungs, --no-cudnn leaves cuDNN's search and column out: together they point a profiler
// (scripts/gpu_check.sh ncu) at one kernel on one layer.
//
// --sweep-splits also times the two weight-gradient kernels, implicit_gemm_wmma's (rung 3's, which
// implicit_gemm_table and implicit_gemm_nhwc hand backward_weight to) and implicit_gemm_nhwc_wgrad's,
// at every count of reduction slices their limits allow on each layer (each count that gives a new cut:
// every one up to 40, then about 15% apart), next to their rules' count, and prints the fastest: the
// measurement kernels/wave_split.h's model stands in for. Rows "NAME splits=S" (and "NAME rule").
//
// --tiled-layout runs rungs 4 and 4b with the tiled layout change (nchw_to_nhwc_tiled_kernel, opt-in
// since 2026-11-28: implicit_gemm_nhwc.h) instead of the per-element copy, for a comparison of the two
// in the same session; the header line says which copy the run used.
//
// Each measurement: two warm-up calls, then --runs samples timed with CUDA events on the halfling
// stream, each of one call, or of as many back-to-back calls as fill 0.2 ms where a call is shorter
// (median_ms); the median time per call is reported as TFLOP/s (2 * N*K*P*Q*C*R*S flops per pass) and
// as a percentage of cuDNN's time for the same layer and pass. The forward pass runs without bias/ReLU,
// like cudnnConvolutionForward.
//
// Each row is checked (a wrong kernel is not a fast kernel): after it is timed, the pass's output is
// filled with NaN and the row's kernel runs once more, so an element it does not write stays NaN. The
// reference is cuDNN's output for the same layer and pass in the same run, from the fastest of its
// GEMM-type algorithms (the top of CudnnConv says why not the timed one). The last column gives
// ||out - cuDNN|| / ||cuDNN||; a row with an output that is not finite where cuDNN's is (a NaN: not
// written), or more than kTolerance from cuDNN's, prints "WRONG: <why>" there and "-" for its TFLOP/s
// and percentage, and the program exits with status 3 once every row is printed. Without cuDNN the
// rows are checked for elements not written only.
//
// cuDNN runs with the same numerics (CUDNN_DATA_HALF tensors, CUDNN_DATA_FLOAT compute,
// CUDNN_TENSOR_OP_MATH) and the fastest of the algorithms its own search finds runnable
// (cudnnFindConvolution*Algorithm), each timed here with the rungs' median and the workspace it asks
// for. The search times each algorithm once, and its first pick is not always the fastest by a median:
// on an H100 (2026-11-27, the seventh session's two runs, commits 547a68f and 52b2024) the pick for VGG-small's 256->256 backward data
// took 0.0817 ms in one run (algo 1) and 0.2390 in the next (algo 5), so a reference taken from the
// pick alone moved a rung's "% of cuDNN" by a factor of almost three. Built without cuDNN (CMake did not
// find it), the cuDNN column is left out and the program says why.
//
// Without a usable GPU it prints "no CUDA device: <reason>" and exits 0.
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/stats.h"  // the median, and the check of a row's output
#include "kernels/conv.h"
#include "kernels/cuda/conv/implicit_gemm_index.h"
#include "kernels/cuda/conv/implicit_gemm_nhwc.h"  // the tiled layout change's hook
#include "kernels/cuda/conv/implicit_gemm_nhwc_wgrad.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/runtime.h"
#include "kernels/wave_split.h"

#ifdef HALFLING_HAVE_CUDNN
#include <cudnn.h>
#endif

using namespace hl;
using kernels::ConvArgs;
using kernels::ConvPass;

namespace {

struct Layer {
  const char* name;
  int64_t C, H, W, K, R, S, pad;  // stride 1 everywhere, as in both networks
};

const Layer kLeNet[] = {{"lenet_conv1 1->32 5x5 28x28", 1, 28, 28, 32, 5, 5, 2},
                        {"lenet_conv2 32->64 5x5 14x14", 32, 14, 14, 64, 5, 5, 2}};
const Layer kVgg[] = {{"vgg 3->64 3x3 32x32", 3, 32, 32, 64, 3, 3, 1},
                      {"vgg 64->64 3x3 32x32", 64, 32, 32, 64, 3, 3, 1},
                      {"vgg 128->128 3x3 16x16", 128, 16, 16, 128, 3, 3, 1},
                      {"vgg 256->256 3x3 8x8", 256, 8, 8, 256, 3, 3, 1}};

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(detail::concat("conv_bench: ", what, ": ", cudaGetErrorString(e)));
}

cudaStream_t stream() { return static_cast<cudaStream_t>(runtime::cuda_stream()); }

// Median milliseconds per call over `runs` timed samples of f, after two warm-up calls. Each sample
// times bench::calls_for's back-to-back calls between two events (bench/stats.h): one call from 0.2 ms
// up, more for the short ones, whose time alone would include their launch. Slow calls (direct's
// backward_weight) get fewer samples, at least 5, so the whole benchmark stays within minutes.
double median_ms(const std::function<void()>& f, int runs) {
  f();
  f();
  runtime::cuda_synchronize();
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  float total = 0.0f;
  const auto sample = [&](int calls) {
    check_cuda(cudaEventRecord(start, stream()), "cudaEventRecord");
    for (int c = 0; c < calls; ++c) f();
    check_cuda(cudaEventRecord(stop, stream()), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0.0f;
    check_cuda(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    total += t;
    return static_cast<double>(t) / calls;
  };
  const int calls = bench::calls_for(sample);
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    ms.push_back(sample(calls));
    if (total > 3000.0f && ms.size() >= 5) break;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return bench::median(ms);
}

// How far a row's output may be from cuDNN's, norm-wise, before the row is WRONG. Both sides sum exact
// FP32 products of FP16 values in FP32 (reductions of up to 131072 terms here: about 1.5e-5 relative
// apart at most) and round the result to f16 (2^-11 relative at most, about 3e-4 norm-wise for the
// two roundings): 1e-2 leaves 30x that, as gemm_bench does for an f16 C. A tap, an input channel or a
// slice of the reduction left out (a ninth of a 3x3 sum, a 256th of the widest layer's channels) is a
// difference of 0.06 or more, and an element not written is NaN, counted apart.
constexpr double kTolerance = 1e-2;

// The pass's output (y, dx or dw; f16) as doubles.
std::vector<double> download_out(const ConvArgs& p) {
  const size_t n = static_cast<size_t>(p.out_numel());
  std::vector<uint16_t> h(n);
  runtime::cuda_memcpy_async(h.data(), p.out(), n * 2, runtime::CopyKind::device_to_host);
  runtime::cuda_synchronize();
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = half_bits_to_float(h[i]);
  return out;
}

// A row's check run: the pass's output filled with NaN (bytes 0xFF: a NaN in f16) on the halfling
// stream, f once more, and the output read back.
std::vector<double> check_run(const ConvArgs& p, const std::function<void()>& f) {
  runtime::cuda_memset_async(p.out(), 0xFF, static_cast<size_t>(p.out_numel()) * 2);
  f();
  return download_out(p);
}

// Device buffer of n halves filled with uniform values in [-1, 1).
struct HalfBuffer {
  void* ptr = nullptr;
  HalfBuffer(int64_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    for (auto& v : h) v = float_to_half_bits(dist(rng));
    ptr = runtime::cuda_malloc(h.size() * 2);
    runtime::cuda_memcpy_async(ptr, h.data(), h.size() * 2, runtime::CopyKind::host_to_device);
    runtime::cuda_synchronize();
  }
  ~HalfBuffer() { runtime::cuda_free(ptr); }
  HalfBuffer(const HalfBuffer&) = delete;
  HalfBuffer& operator=(const HalfBuffer&) = delete;
};

#ifdef HALFLING_HAVE_CUDNN
void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw Error(detail::concat("conv_bench: ", what, ": ", cudnnGetErrorString(s)));
}

// How exact each cuDNN algorithm's sums are, for the choice of the reference: 0 for the deterministic
// GEMM-type algorithms (every output a plain FP32 sum of products, as the rungs compute it), 1 for the
// GEMM-type ones that add partial sums with atomics, 2 for the others (FFT and Winograd transform the
// operands first, with rounding errors of their own). cuDNN's fastest is often a Winograd algorithm
// (algo 7 forward, 5 backward on the H100, 2026-11-27), whose distance from an exact sum nothing here
// has measured: the rows are checked against the fastest algorithm of the lowest rank instead.
int exactness_rank(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
      return 0;
    default:
      return 2;
  }
}
int exactness_rank(cudnnConvolutionBwdDataAlgo_t a) {
  if (a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) return 0;
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 ? 1 : 2;
}
int exactness_rank(cudnnConvolutionBwdFilterAlgo_t a) {
  if (a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1) return 0;
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 ? 1 : 2;
}

// One layer's cuDNN descriptors, the timed call of each pass with the best algorithm found, and the
// reference output of the pass for the rows' check (reference()).
class CudnnConv {
 public:
  CudnnConv(cudnnHandle_t h, const ConvArgs& a) : h_(h) {
    check_cudnn(cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateTensorDescriptor(&y_), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateFilterDescriptor(&w_), "cudnnCreateFilterDescriptor");
    check_cudnn(cudnnCreateConvolutionDescriptor(&c_), "cudnnCreateConvolutionDescriptor");
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    check_cudnn(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, i(a.N), i(a.C), i(a.H), i(a.W)),
                "cudnnSetTensor4dDescriptor(x)");
    check_cudnn(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, i(a.N), i(a.K), i(a.P()), i(a.Q())),
                "cudnnSetTensor4dDescriptor(y)");
    check_cudnn(cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW, i(a.K), i(a.C), i(a.R), i(a.S)),
                "cudnnSetFilter4dDescriptor");
    check_cudnn(cudnnSetConvolution2dDescriptor(c_, i(a.pad_h), i(a.pad_w), i(a.stride_h), i(a.stride_w), 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                "cudnnSetConvolution2dDescriptor");
    check_cudnn(cudnnSetConvolutionMathType(c_, CUDNN_TENSOR_OP_MATH), "cudnnSetConvolutionMathType");
  }
  ~CudnnConv() {
    cudnnDestroyConvolutionDescriptor(c_);
    cudnnDestroyFilterDescriptor(w_);
    cudnnDestroyTensorDescriptor(y_);
    cudnnDestroyTensorDescriptor(x_);
    if (ws_ != nullptr) runtime::cuda_free(ws_);
  }
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // The pass of the last time() into its output, once, with the reference algorithm (exactness_rank):
  // the caller poisons the output first. Its number: reference_algo().
  void reference() const { reference_(); }
  int reference_algo() const { return reference_algo_; }

  // Median ms of the pass with cuDNN's fastest algorithm; `algo` receives its number.
  double time(const ConvArgs& a, int runs, int& algo) {
    const float one = 1.0f, zero = 0.0f;
    constexpr int kMaxAlgos = 16;
    int returned = 0;
    switch (a.pass) {
      case ConvPass::forward: {
        cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
        check_cudnn(cudnnFindConvolutionForwardAlgorithm(h_, x_, w_, c_, y_, kMaxAlgos, &returned, perf),
                    "cudnnFindConvolutionForwardAlgorithm");
        return fastest(perf, returned, runs, algo, [&](const cudnnConvolutionFwdAlgoPerf_t& p) {
          return [=, this] {
            check_cudnn(cudnnConvolutionForward(h_, &one, x_, a.x, w_, a.w, c_, p.algo, ws_, p.memory, &zero, y_, a.y),
                        "cudnnConvolutionForward");
          };
        });
      }
      case ConvPass::backward_data: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
        check_cudnn(cudnnFindConvolutionBackwardDataAlgorithm(h_, w_, y_, c_, x_, kMaxAlgos, &returned, perf),
                    "cudnnFindConvolutionBackwardDataAlgorithm");
        return fastest(perf, returned, runs, algo, [&](const cudnnConvolutionBwdDataAlgoPerf_t& p) {
          return [=, this] {
            check_cudnn(
                cudnnConvolutionBackwardData(h_, &one, w_, a.w, y_, a.dy, c_, p.algo, ws_, p.memory, &zero, x_, a.dx),
                "cudnnConvolutionBackwardData");
          };
        });
      }
      case ConvPass::backward_weight: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
        check_cudnn(cudnnFindConvolutionBackwardFilterAlgorithm(h_, x_, y_, c_, w_, kMaxAlgos, &returned, perf),
                    "cudnnFindConvolutionBackwardFilterAlgorithm");
        return fastest(perf, returned, runs, algo, [&](const cudnnConvolutionBwdFilterAlgoPerf_t& p) {
          return [=, this] {
            check_cudnn(
                cudnnConvolutionBackwardFilter(h_, &one, x_, a.x, y_, a.dy, c_, p.algo, ws_, p.memory, &zero, w_, a.dw),
                "cudnnConvolutionBackwardFilter");
          };
        });
      }
    }
    throw Error("conv_bench: unknown convolution pass");
  }

 private:
  // The least median ms over the algorithms the search found runnable (the top of the file says why),
  // each with the workspace it asks for; `algo` receives the fastest one's number. make_call(perf)
  // returns the call of one algorithm; the workspace is grown before it is made, and the call reads
  // ws_ when it runs.
  // The reference is the runnable algorithm of the lowest exactness_rank that cuDNN's search timed
  // fastest (perf comes sorted by its times).
  template <class Perf, class MakeCall>
  double fastest(const Perf* perf, int n, int runs, int& algo, MakeCall&& make_call) {
    double best = std::numeric_limits<double>::infinity();
    int reference_rank = 3;
    for (int i = 0; i < n; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      reserve(perf[i].memory);
      const double ms = median_ms(make_call(perf[i]), runs);
      if (ms < best) {
        best = ms;
        algo = static_cast<int>(perf[i].algo);
      }
      if (exactness_rank(perf[i].algo) < reference_rank) {
        reference_rank = exactness_rank(perf[i].algo);
        reference_ = make_call(perf[i]);
        reference_algo_ = static_cast<int>(perf[i].algo);
      }
    }
    if (!std::isfinite(best)) throw Error("conv_bench: cuDNN found no algorithm that runs this layer");
    return best;
  }
  void reserve(size_t bytes) {
    if (bytes <= ws_bytes_) return;
    if (ws_ != nullptr) runtime::cuda_free(ws_);
    ws_ = runtime::cuda_malloc(bytes);
    ws_bytes_ = bytes;
  }

  cudnnHandle_t h_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t c_ = nullptr;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;  // only grows: the workspace fits every algorithm timed, the reference's too
  std::function<void()> reference_;
  int reference_algo_ = -1;
};
#endif

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

}  // namespace

// One table row of f (a rung's call, with a split count's hook set by the caller): timed, then its check
// run against cuDNN's output for the pass (ref; nullptr without cuDNN), then the row: time, TFLOP/s, the
// percentage of cuDNN's time (ref_ms > 0) and ||out - cuDNN|| / ||cuDNN||, or WRONG with why (and `wrong`
// counts it). Returns the median ms.
double timed_row(const char* layer, const ConvArgs& p, const std::string& label, const std::function<void()>& f,
                 int runs, double ref_ms, const std::vector<double>* ref, int& wrong) {
  const double tflop = 2.0 * static_cast<double>(p.macs()) * 1e-12;
  const char* pass = kernels::conv_pass_name(p.pass);
  const double ms = median_ms(f, runs);
  const std::vector<double> out = check_run(p, f);
  const bench::OutputCheck c = bench::check_output(out, ref);
  const std::string why = bench::wrong_because(c, out.size(), ref != nullptr ? "cuDNN" : nullptr, kTolerance);
  char diff[32] = "-";
  if (ref != nullptr) std::snprintf(diff, sizeof diff, "%.1e", c.diff);
  if (!why.empty()) {
    ++wrong;
    std::printf("| %s | %s | %s | %.4f | - | - | WRONG: %s |\n", layer, pass, label.c_str(), ms, why.c_str());
  } else if (ref_ms > 0) {
    std::printf("| %s | %s | %s | %.4f | %.2f | %.1f | %s |\n", layer, pass, label.c_str(), ms, tflop / (ms * 1e-3),
                100.0 * ref_ms / ms, diff);
  } else {
    std::printf("| %s | %s | %s | %.4f | %.2f | n/a | %s |\n", layer, pass, label.c_str(), ms, tflop / (ms * 1e-3),
                diff);
  }
  return ms;
}

// --sweep-splits for one layer's backward_weight (p): each weight-gradient kernel among `variants` that
// takes the call, with its rule's count and then every count of slices that gives a new cut, each row
// checked as timed_row does.
void sweep_wgrad_splits(const char* layer, const ConvArgs& p, const std::vector<std::string>& variants, int runs,
                        double ref_ms, const std::vector<double>* ref, int& wrong) {
  namespace ig = kernels::cuda::igemm;
  namespace nw = kernels::cuda::nhwc_wgrad;
  const int64_t npq = p.N * p.P() * p.Q();
  for (const char* rung : {"implicit_gemm_wmma", "implicit_gemm_nhwc_wgrad"}) {
    if (std::find(variants.begin(), variants.end(), rung) == variants.end()) continue;
    const auto* var = kernels::ConvRegistry::instance().find(rung, DeviceType::cuda);
    if (var == nullptr || (var->unsupported != nullptr && var->unsupported(p) != nullptr)) continue;  // row above
    const bool rung3 = std::string(rung) == "implicit_gemm_wmma";
    const int64_t most = rung3 ? ig::wgrad_most_splits(npq) : nw::most_splits(nw::problem_for(p));
    const int64_t step = rung3 ? ig::kBK : nw::kBK;
    struct Reset {  // the hook goes back to the rules however the loop ends
      ~Reset() { kernels::wgrad_splits_for_tuning().store(0); }
    } reset;
    const auto call = [&] { kernels::conv2d(p, rung); };
    const double rule_ms = timed_row(layer, p, std::string(rung) + " rule", call, runs, ref_ms, ref, wrong);
    double best_ms = 0;
    int64_t best = 0, last = 0;
    for (int64_t s = 1; s <= most; s = s < 40 ? s + 1 : std::max(s + 1, s * 115 / 100)) {
      const int64_t cut = kernels::cut_reduction(npq, s, step).splits;
      if (cut == last) continue;  // the rounding to whole steps gave the count just timed
      last = cut;
      kernels::wgrad_splits_for_tuning().store(static_cast<int>(s));
      const double ms =
          timed_row(layer, p, std::string(rung) + " splits=" + std::to_string(cut), call, runs, ref_ms, ref, wrong);
      if (best == 0 || ms < best_ms) best = cut, best_ms = ms;
    }
    std::printf("# %s, %s: fastest %lld slices, %.4f ms; the rule's count %.4f ms\n", layer, rung,
                static_cast<long long>(best), best_ms, rule_ms);
  }
}

int main(int argc, char** argv) {
  CLI::App app{"Times the CUDA conv ladder and cuDNN on the LeNet and VGG-small layers"};
  int64_t batch = 128;
  int runs = 25;
  std::string which = "all";
  app.add_option("--batch", batch, "images per batch")->check(CLI::Range(1, 4096));
  app.add_option("--runs", runs, "timed calls per measurement (the median is reported)")->check(CLI::Range(1, 1000));
  app.add_option("--layers", which, "all, lenet or vgg")->check(CLI::IsMember({"all", "lenet", "vgg"}));
  std::string only;
  std::vector<std::string> pass_names, chosen_variants;
  bool no_cudnn = false;
  app.add_option("--only", only, "only the layers whose name contains this text, e.g. 256->256");
  app.add_option("--passes", pass_names, "forward, backward_data, backward_weight (default: all three)")
      ->delimiter(',')
      ->check(CLI::IsMember({"forward", "backward_data", "backward_weight"}));
  app.add_option("--variants", chosen_variants, "CUDA conv rungs to time (default: every one)")->delimiter(',');
  app.add_flag("--no-cudnn", no_cudnn, "leave cuDNN (its algorithm search and its column) out");
  bool sweep_splits = false;
  app.add_flag("--sweep-splits", sweep_splits,
               "also time the weight-gradient kernels at every count of reduction slices (backward_weight)");
  bool tiled_layout = false;
  app.add_flag("--tiled-layout", tiled_layout,
               "rungs 4 and 4b copy to NHWC with the tiled transpose (opt-in) instead of one thread per element");
  CLI11_PARSE(app, argc, argv);

  // Checked before looking for a GPU, so that a typo is refused on any machine.
  std::vector<Layer> layers;
  if (which != "vgg") layers.insert(layers.end(), std::begin(kLeNet), std::end(kLeNet));
  if (which != "lenet") layers.insert(layers.end(), std::begin(kVgg), std::end(kVgg));
  std::string layer_names;
  for (const Layer& L : layers) layer_names += std::string(layer_names.empty() ? "" : "; ") + L.name;
  layers.erase(std::remove_if(layers.begin(), layers.end(),
                              [&](const Layer& L) { return std::string(L.name).find(only) == std::string::npos; }),
               layers.end());
  if (layers.empty()) {
    std::fprintf(stderr, "conv_bench: --only '%s' matches none of the layers (%s)\n", only.c_str(), layer_names.c_str());
    return 2;
  }
  std::vector<ConvPass> passes;
  for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight})
    if (pass_names.empty() ||
        std::find(pass_names.begin(), pass_names.end(), kernels::conv_pass_name(pass)) != pass_names.end())
      passes.push_back(pass);
  std::vector<std::string> variants = kernels::ConvRegistry::instance().names(DeviceType::cuda);
  for (const std::string& v : chosen_variants)
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) {
      std::string known;
      for (const std::string& n : variants) known += (known.empty() ? "" : ", ") + n;
      std::fprintf(stderr, "conv_bench: --variants: no CUDA conv rung '%s' (known: %s)\n", v.c_str(), known.c_str());
      return 2;
    }
  if (!chosen_variants.empty()) variants = chosen_variants;

  if (!runtime::cuda_available()) {
    std::printf("no CUDA device: %s\n", runtime::cuda_unavailable_reason().c_str());
    return 0;
  }
  int wrong = 0;  // rows whose check failed: the exit status is 3 if there are any
  try {
    std::printf("# conv_bench: CUDA conv ladder vs cuDNN, FP16 NCHW in/out, FP32 accumulation, batch %lld\n",
                static_cast<long long>(batch));
    std::printf("# GPU: %s\n", runtime::cuda_device_description().c_str());
    std::printf("# date: %s\n%s\n", today_utc().c_str(), bench::command_line(argc, argv).c_str());
    std::printf("# timing: 2 warm-up calls, median of up to %d timed samples (CUDA events), each of 1 call from 0.2 ms"
                " up, or of as many back-to-back calls as fill 0.2 ms (at most 100; the time per call is shown)\n",
                runs);
    // For the whole run: rungs 4 and 4b (and the ones that hand calls to them) copy with it.
    std::optional<kernels::cuda::nhwc::ScopedTiledLayoutChange> tiled;
    if (tiled_layout) tiled.emplace(true);
    std::printf("# rungs 4 and 4b's NCHW -> NHWC copy: %s\n",
                kernels::cuda::nhwc::tiled_layout_change_chosen() ? "tiled (through shared memory)"
                                                                   : "one thread per element");
#ifdef HALFLING_HAVE_CUDNN
    const bool kCudnn = !no_cudnn;
    cudnnHandle_t handle = nullptr;
    if (kCudnn) {
      check_cudnn(cudnnCreate(&handle), "cudnnCreate");
      check_cudnn(cudnnSetStream(handle, stream()), "cudnnSetStream");
      std::printf("# cuDNN %zu (the fastest, by the median below, of the algorithms cudnnFindConvolution*Algorithm "
                  "found runnable; CUDNN_TENSOR_OP_MATH)\n",
                  cudnnGetVersion());
    } else {
      std::printf("# cuDNN: left out (--no-cudnn)\n");
    }
#else
    std::printf("# cuDNN: not found when this benchmark was built (CMake found no cudnn.h/libcudnn), so there is "
                "no cuDNN column\n");
    constexpr bool kCudnn = false;
#endif
    if (kCudnn)
      std::printf("# vs cuDNN: ||out - cuDNN|| / ||cuDNN||, each output from a run of its own into an output filled\n"
                  "# with NaN first, cuDNN's from the algorithm its row names as the reference; WRONG: an element not\n"
                  "# finite where cuDNN's is (NaN: not written), or vs cuDNN above %.0e\n",
                  kTolerance);
    else
      std::printf("# vs cuDNN: none without cuDNN; WRONG: an element not finite in an output from a run of its own\n"
                  "# into an output filled with NaN first (NaN: not written)\n");
    std::printf("\n| layer | pass | variant | ms | TFLOP/s | %% of cuDNN | vs cuDNN |\n"
                "|---|---|---|---:|---:|---:|---|\n");

    std::mt19937 rng(1234);

    for (const Layer& L : layers) {
      ConvArgs a;
      a.device = DeviceType::cuda;
      a.N = batch, a.C = L.C, a.H = L.H, a.W = L.W, a.K = L.K, a.R = L.R, a.S = L.S;
      a.pad_h = a.pad_w = L.pad;
      a.in_type = a.out_type = DType::f16;
      HalfBuffer x(a.N * a.C * a.H * a.W, rng), w(a.K * a.C * a.R * a.S, rng), dy(a.N * a.K * a.P() * a.Q(), rng);
      HalfBuffer y(a.N * a.K * a.P() * a.Q(), rng), dx(a.N * a.C * a.H * a.W, rng), dw(a.K * a.C * a.R * a.S, rng);
      a.x = x.ptr, a.w = w.ptr, a.dy = dy.ptr, a.y = y.ptr, a.dx = dx.ptr, a.dw = dw.ptr;
#ifdef HALFLING_HAVE_CUDNN
      std::optional<CudnnConv> cudnn;
      if (kCudnn) cudnn.emplace(handle, a);
#endif
      for (ConvPass pass : passes) {
        ConvArgs p = a;
        p.pass = pass;
        double ref_ms = 0.0;
        std::vector<double> ref_out;  // cuDNN's output of this pass, the rows' reference (empty without it)
#ifdef HALFLING_HAVE_CUDNN
        if (cudnn) {
          const double tflop = 2.0 * static_cast<double>(p.macs()) * 1e-12;
          int algo = -1;
          ref_ms = cudnn->time(p, runs, algo);
          ref_out = check_run(p, [&] { cudnn->reference(); });
          const bench::OutputCheck c = bench::check_output(ref_out, nullptr);
          const std::string why = bench::wrong_because(c, ref_out.size(), nullptr, kTolerance);
          if (!why.empty()) {
            ++wrong;
            std::printf("| %s | %s | cuDNN (algo %d) | %.4f | - | - | WRONG: reference algo %d: %s |\n", L.name,
                        kernels::conv_pass_name(pass), algo, ref_ms, cudnn->reference_algo(), why.c_str());
          } else {
            std::printf("| %s | %s | cuDNN (algo %d) | %.4f | %.2f | 100 | reference: algo %d |\n", L.name,
                        kernels::conv_pass_name(pass), algo, ref_ms, tflop / (ref_ms * 1e-3), cudnn->reference_algo());
          }
        }
#endif
        const std::vector<double>* ref = ref_out.empty() ? nullptr : &ref_out;
        for (const std::string& v : variants) {
          const auto* var = kernels::ConvRegistry::instance().find(v, DeviceType::cuda);
          if (const char* why = var->unsupported ? var->unsupported(p) : nullptr) {
            std::printf("| %s | %s | %s | - | - | - (%s) | - |\n", L.name, kernels::conv_pass_name(pass), v.c_str(),
                        why);
            continue;
          }
          timed_row(L.name, p, v, [&] { kernels::conv2d(p, v); }, runs, kCudnn ? ref_ms : 0.0, ref, wrong);
        }
        if (sweep_splits && pass == ConvPass::backward_weight)
          sweep_wgrad_splits(L.name, p, variants, runs, kCudnn ? ref_ms : 0.0, ref, wrong);
        std::fflush(stdout);
      }
    }
#ifdef HALFLING_HAVE_CUDNN
    if (handle != nullptr) cudnnDestroy(handle);
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  if (wrong > 0) {
    std::printf("\n# %d row%s WRONG (above): exit status 3\n", wrong, wrong == 1 ? "" : "s");
    return 3;
  }
  return 0;
}
