// The GEMM ladder against cuBLAS: every registered CUDA GEMM variant, timed with CUDA events on the
// halfling stream (warm-up runs, then the median of --runs), for square sizes and for the training
// GEMMs of the canonical models (DESIGN.md §4) at batch 128: forward (NT), input gradient (NN) and
// weight gradient (TN) of every MLP-512 and LeNet layer, the convolutions as their im2col GEMMs. The
// input gradient of each model's first layer ("MLP fc1 784-512 dgrad", "LeNet conv1 1-32 28x28 dgrad")
// is a GEMM training never runs (the images need no gradient: framework/ops.cpp computes dx only when the
// input requires it): those two rows are labelled "(not in training)" and kept for their shapes' sake.
//
//   build/bench/gemm_bench [--sizes 512,1024,...] [--variants a,b,...] [--runs N] [--out f16|f32]
//                          [--no-models] [--sweep [--sweep-tiles all|clustered|unclustered|I,J,...]] [--tile I]
//
// Inputs are FP16 (random values in [-1, 1)), C is --out (default f16), FP32 accumulation everywhere
// (paper §3.3). Each row shows the median time, TFLOP/s (2MNK / time) and the ratio to cuBLAS in the
// same run, plus the norm-wise difference from cuBLAS's result (a wrong kernel is not a fast kernel):
// after a row is timed, C is filled with NaN and the row's kernel runs once more, so an element it does
// not write cannot pass for the previous row's answer. A row whose C then holds a value that is not
// finite where cuBLAS's is (a NaN: an element not written), or differs from cuBLAS's by more than the
// tolerance (tolerance() below: 1e-2 for an f16 C, 1e-3 for f32), prints "WRONG: <why>" in place of its
// speed columns, and the program exits with status 3 once every row is printed (cuBLAS's own row is
// WRONG if its C holds a value that is not finite). The naive rung is skipped above 2048^3
// multiply-adds unless named in --variants. --sweep also times wmma_pipelined with each candidate block tile of
// kernels/cuda/gemm/wmma_pipelined_tiles.h on every shape, the training shapes included (its tuning
// hook; sm_80+; a forced tile never splits K, so on the long reductions of the weight gradients those
// rows are slow by design), one row per tile, labelled "wmma_pipelined #I" (the tiles are described
// under the table; kOwnTile, #12, is the rung's own), wmma_smem with each K step and copy of
// kernels/cuda/gemm/wmma_smem_k_step.h other than its own (64-deep, batched: its row above), labelled
// "wmma_smem k32", "wmma_smem k64" and "wmma_smem k32 batched", mma_sync with the copy it does not use
// (kernels/cuda/gemm/mma_sync_lanes.h: the lean copy is its own, so "mma_sync general"), wgmma with each tile of
// kernels/cuda/gemm/wgmma_layout.h, "wgmma #I", and wgmma_tma with each tile of
// kernels/cuda/gemm/wgmma_tma_plan.h, "wgmma_tma #I" (both Hopper only). With --variants, the sweep
// times the candidates of the variants named only. --sweep-tiles chooses which of wmma_pipelined's
// tiles it times: "clustered" (Hopper's thread-block cluster tiles, #19 and #20 on 2026-11-28),
// "unclustered" (the others) or tile numbers. scripts/gpu_check.sh times the cluster tiles in programs
// of their own: a cluster tile whose schedule is wrong on the hardware traps (mbarrier.cuh), and the
// CUDA context of the program that ran it is then lost to every row after it. --tile I runs
// every wmma_pipelined row with tile #I instead (rows labelled "wmma_pipelined #I"): what
// scripts/gpu_check.sh's ncu stage uses to profile one candidate tile. A tile past the table, a variant
// that is not registered, or a size below 1 is refused (exit status 2) on any machine.
// Without a GPU it prints "no CUDA device" and exits 0.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "bench/gemm_legend.h"
#include "bench/stats.h"
#include "kernels/cuda/gemm/mma_sync_lanes.h"
#include "kernels/cuda/gemm/wgmma_layout.h"
#include "kernels/cuda/gemm/wgmma_tma_plan.h"
#include "kernels/cuda/gemm/wmma_pipelined_tiles.h"
#include "kernels/cuda/gemm/wmma_smem_k_step.h"
#include "kernels/error.h"
#include "kernels/gemm.h"
#include "kernels/half.h"
#include "kernels/runtime.h"

using namespace hl;
using kernels::GemmArgs;
using kernels::Op;
namespace tiles = kernels::wmma_pipelined;

namespace {

#define BENCH_CUDA_CHECK(call)                                                                   \
  do {                                                                                           \
    const cudaError_t status_ = (call);                                                          \
    if (status_ != cudaSuccess) throw Error(std::string(#call) + ": " + cudaGetErrorString(status_)); \
  } while (0)

struct Shape {
  std::string name;  // "square 4096", "MLP fc1 fwd", ...
  Op op_a, op_b;
  int64_t M, N, K;
};

// Linear layer y = x W^T with x [batch x in], W [out x in]: forward NT (M=batch, N=out, K=in), input
// gradient dx = dy W as NN (M=batch, N=in, K=out), weight gradient dW = dy^T x as TN (M=out, N=in, K=batch).
// A model's first layer gets no input gradient in training: its dgrad row says so (the top of the file).
void add_linear(std::vector<Shape>& s, const std::string& name, int64_t batch, int64_t in, int64_t out,
                bool first = false) {
  s.push_back({name + " fwd", Op::N, Op::T, batch, out, in});
  s.push_back({name + " dgrad" + (first ? " (not in training)" : ""), Op::N, Op::N, batch, in, out});
  s.push_back({name + " wgrad", Op::T, Op::N, out, in, batch});
}

std::vector<Shape> model_shapes() {
  std::vector<Shape> s;
  const int64_t b = 128;
  add_linear(s, "MLP fc1 784-512", b, 784, 512, /*first=*/true);
  add_linear(s, "MLP fc2 512-512", b, 512, 512);
  add_linear(s, "MLP fc3 512-10", b, 512, 10);
  // A 5x5 convolution over an HxW image with C inputs and O outputs, pad 2, as im2col: one row per
  // output pixel (batch*H*W rows), one column per (channel, tap) (C*25), times the O filters.
  add_linear(s, "LeNet conv1 1-32 28x28", b * 28 * 28, 1 * 25, 32, /*first=*/true);
  add_linear(s, "LeNet conv2 32-64 14x14", b * 14 * 14, 32 * 25, 64);
  add_linear(s, "LeNet fc1 3136-256", b, 3136, 256);
  add_linear(s, "LeNet fc2 256-10", b, 256, 10);
  return s;
}

// Device buffer of n halves (or floats) filled with random values in [-1, 1).
void* random_device(size_t n, DType t, uint64_t seed) {
  std::vector<uint16_t> h16;
  std::vector<float> h32;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  const auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<float>((x >> 11) * 0x1p-53 * 2.0 - 1.0);
  };
  const size_t bytes = n * dtype_size(t);
  void* d = runtime::cuda_malloc(bytes);
  if (t == DType::f16) {
    h16.resize(n);
    for (auto& v : h16) v = float_to_half_bits(next());
    runtime::cuda_memcpy_async(d, h16.data(), bytes, runtime::CopyKind::host_to_device);
  } else {
    h32.resize(n);
    for (auto& v : h32) v = next();
    runtime::cuda_memcpy_async(d, h32.data(), bytes, runtime::CopyKind::host_to_device);
  }
  runtime::cuda_synchronize();
  return d;
}

std::vector<double> download(const void* d, size_t n, DType t) {
  std::vector<double> out(n);
  if (t == DType::f16) {
    std::vector<uint16_t> h(n);
    runtime::cuda_memcpy_async(h.data(), d, n * 2, runtime::CopyKind::device_to_host);
    runtime::cuda_synchronize();
    for (size_t i = 0; i < n; ++i) out[i] = half_bits_to_float(h[i]);
  } else {
    std::vector<float> h(n);
    runtime::cuda_memcpy_async(h.data(), d, n * 4, runtime::CopyKind::device_to_host);
    runtime::cuda_synchronize();
    for (size_t i = 0; i < n; ++i) out[i] = h[i];
  }
  return out;
}

// How far a row's C may be from cuBLAS's, norm-wise, before the row is WRONG (bench/stats.h,
// wrong_because), by the dtype of C. Both sides sum exact FP32 products of FP16 inputs in FP32 and differ
// only in the order of the sums: about sqrt(K/2) * 2^-24 relative, under 1e-5 at K = 8192, hence 1e-3 for
// an f32 C. An f16 C adds each side's rounding to f16 (2^-11 relative at most): the committed runs
// (bench/results/gemm_*.txt) differ by up to 3.5e-4, hence 1e-2. Both catch a skipped K step of 32 (a
// difference of sqrt(32 / K): 0.06 at K = 8192) and one 128x128 tile computed wrong anywhere up to
// 8192^2 (a difference of order 1 on 2.4e-4 of C: about 0.02); an element not written is NaN, counted
// apart.
double tolerance(DType c_type) { return c_type == DType::f16 ? 1e-2 : 1e-3; }

// Median milliseconds per call over `runs` timed samples, after `warmup` untimed calls. Each sample
// times bench::calls_for's back-to-back calls between two events (bench/stats.h): one call from 0.2 ms
// up, up to 100 of the short calls of the MNIST layers, whose time alone would include their launch.
double time_ms(const GemmArgs& g, const std::string& variant, int warmup, int runs) {
  cudaStream_t stream = static_cast<cudaStream_t>(runtime::cuda_stream());
  cudaEvent_t start, stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) kernels::gemm(g, variant);
  const auto sample = [&](int calls) {
    BENCH_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int c = 0; c < calls; ++c) kernels::gemm(g, variant);
    BENCH_CUDA_CHECK(cudaEventRecord(stop, stream));
    BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    return static_cast<double>(t) / calls;
  };
  const int calls = bench::calls_for(sample);
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) ms.push_back(sample(calls));
  BENCH_CUDA_CHECK(cudaEventDestroy(start));
  BENCH_CUDA_CHECK(cudaEventDestroy(stop));
  return bench::median(ms);
}

const char* layout(const Shape& s) {
  if (s.op_a == Op::N) return s.op_b == Op::N ? "NN" : "NT";
  return s.op_b == Op::N ? "TN" : "TT";
}

// The legend of one Hopper rung's tiles under the table (wgmma_layout.h's or wgmma_tma_plan.h's): each
// tile's shape, warpgroups, stages and wgmma groups in flight, and where the rung itself chooses it
// (`own(i)`: the note for tile #i, empty for a tile the rung never chooses; the headers' own_tile()).
// tests/bench/test_tile_numbers.cpp reads these legends back from bench/results/.
template <class TileTable, class Own>
void print_wgmma_tiles(const TileTable& tiles, int count, const char* warpgroups, Own own) {
  for (int i = 0; i < count; ++i) {
    const std::string note = own(i);
    std::cout << "#   #" << i << ": " << bench::describe_wgmma(tiles[i], warpgroups)
              << (note.empty() ? "" : " (the rung's own " + note + ")") << "\n";
  }
}

// --sweep-tiles: which of wmma_pipelined_tiles.h's tiles the sweep times. "all"; "clustered" (the tiles
// whose blocks share operands in a thread-block cluster) or "unclustered" (the others); or tile numbers
// "I,J,...", each once. Sets `chosen` (ascending) and returns "", or returns why the words are refused.
std::string parse_sweep_tiles(const std::vector<std::string>& words, std::vector<int>& chosen) {
  chosen.clear();
  if (words.size() == 1 && (words[0] == "all" || words[0] == "clustered" || words[0] == "unclustered")) {
    for (int i = 0; i < tiles::kBigTileCount; ++i)
      if (words[0] == "all" || tiles::kBigTiles[i].clustered() == (words[0] == "clustered")) chosen.push_back(i);
    return "";
  }
  for (const std::string& w : words) {
    size_t used = 0;
    int i = -1;
    try {
      i = std::stoi(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (w == "all" || w == "clustered" || w == "unclustered") return "'" + w + "' stands alone, not in a list";
    if (w.empty() || used != w.size()) return "'" + w + "' is neither a tile number nor all, clustered or unclustered";
    if (i < 0 || i >= tiles::kBigTileCount)
      return "tile " + w + ": wmma_pipelined_tiles.h lists tiles #0 to #" + std::to_string(tiles::kBigTileCount - 1);
    if (std::find(chosen.begin(), chosen.end(), i) != chosen.end()) return "tile " + w + " named twice";
    chosen.push_back(i);
  }
  std::sort(chosen.begin(), chosen.end());
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gemm_bench: every CUDA GEMM variant against cuBLAS (TFLOP/s, % of cuBLAS)"};
  std::vector<int64_t> sizes = {512, 1024, 2048, 4096, 8192};
  std::vector<std::string> variants;
  int runs = 20, warmup = 3;
  std::string out_name = "f16";
  bool no_models = false, sweep = false;
  int forced_tile = -1;
  app.add_option("--sizes", sizes, "square sizes M = N = K")->delimiter(',');
  app.add_option("--variants", variants, "variants to time (default: every CUDA variant)")->delimiter(',');
  app.add_option("--runs", runs, "timed runs per case (the median is shown)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed runs before timing")->check(CLI::NonNegativeNumber);
  app.add_option("--out", out_name, "dtype of C")->check(CLI::IsMember({"f16", "f32"}));
  app.add_flag("--no-models", no_models, "skip the MLP-512 / LeNet training shapes");
  app.add_flag("--sweep", sweep,
               "also time wmma_pipelined's candidate tiles, wmma_smem's other K steps and copies, mma_sync's other "
               "copy and the wgmma and wgmma_tma tiles, on every shape (with --variants, only the candidates of the "
               "variants named)");
  app.add_option("--tile", forced_tile, "run wmma_pipelined with block tile #I of wmma_pipelined_tiles.h (sm_80+)");
  std::vector<std::string> sweep_tile_words = {"all"};
  app.add_option("--sweep-tiles", sweep_tile_words,
                 "the tiles of wmma_pipelined_tiles.h that --sweep times: all (default), clustered (Hopper's "
                 "thread-block cluster tiles), unclustered, or numbers I,J,...")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  // Checked before looking for a GPU, so that a typo is refused on any machine.
  if (forced_tile != -1 && (forced_tile < 0 || forced_tile >= tiles::kBigTileCount)) {
    std::fprintf(stderr, "gemm_bench: --tile %d: wmma_pipelined_tiles.h lists tiles #0 to #%d\n", forced_tile,
                 tiles::kBigTileCount - 1);
    return 2;
  }
  std::vector<int> swept_tiles;
  if (const std::string why = parse_sweep_tiles(sweep_tile_words, swept_tiles); !why.empty()) {
    std::fprintf(stderr, "gemm_bench: --sweep-tiles: %s\n", why.c_str());
    return 2;
  }
  if (app.count("--sweep-tiles") > 0 && !sweep) {
    std::fprintf(stderr, "gemm_bench: --sweep-tiles chooses among the tiles --sweep times: give --sweep too\n");
    return 2;
  }
  for (int64_t n : sizes)
    if (n < 1) {
      std::fprintf(stderr, "gemm_bench: --sizes: %lld is not a size (M = N = K must be >= 1)\n",
                   static_cast<long long>(n));
      return 2;
    }
  // The registry is filled when the program starts, GPU or not.
  const auto& registry = kernels::GemmRegistry::instance();
  for (const auto& v : variants)
    if (registry.find(v, DeviceType::cuda) == nullptr) {
      std::string known;
      for (const std::string& n : registry.names(DeviceType::cuda)) known += (known.empty() ? "" : ", ") + n;
      std::fprintf(stderr, "gemm_bench: --variants: no CUDA GEMM variant '%s' (known: %s)\n", v.c_str(),
                   known.c_str());
      return 2;
    }

  if (!runtime::cuda_available()) {
    std::cout << "no CUDA device: " << runtime::cuda_unavailable_reason() << "\n";
    return 0;
  }
  int wrong = 0;  // rows whose check failed: the exit status is 3 if there are any
  try {
    const bool explicit_variants = !variants.empty();
    if (!explicit_variants) variants = registry.names(DeviceType::cuda);
    // cuBLAS first: every other row is a ratio to it.
    variants.erase(std::remove(variants.begin(), variants.end(), "cublas"), variants.end());
    variants.insert(variants.begin(), "cublas");
    const DType c_type = out_name == "f16" ? DType::f16 : DType::f32;

    std::vector<Shape> shapes;
    for (int64_t n : sizes) shapes.push_back({"square " + std::to_string(n), Op::N, Op::N, n, n, n});
    if (!no_models)
      for (auto& s : model_shapes()) shapes.push_back(s);

    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    std::cout << "# gemm_bench: " << runtime::cuda_device_description() << "\n# date: " << date
              << "\n# inputs f16, C " << out_name << ", FP32 accumulation; median of " << runs << " runs after "
              << warmup << " warm-up, each run 1 call from 0.2 ms up, or as many back-to-back calls as fill 0.2 ms"
              << " (at most 100; the time per call is shown); TFLOP/s = 2MNK / time\n"
              << bench::command_line(argc, argv) << "\n\n";
    std::printf("%-26s %-3s %7s %6s %6s  %-17s %10s %9s %8s %10s\n", "shape", "op", "M", "N", "K", "variant",
                "ms", "TFLOP/s", "%cuBLAS", "vs cuBLAS");

    // The sweep's tiles are sm_80+ (the hook leaves older GPUs on their own tile) and need wmma_pipelined.
    const bool can_sweep = runtime::cuda_compute_capability() >= 80 &&
                           registry.find("wmma_pipelined", DeviceType::cuda) != nullptr;
    if (sweep && !can_sweep) std::cout << "# --sweep: needs wmma_pipelined on an sm_80+ GPU; not run\n\n";
    // With --variants, the sweep times the candidates of the variants named, no others.
    const auto sweeps = [&](const std::string& v) {
      return registry.find(v, DeviceType::cuda) != nullptr &&
             (!explicit_variants || std::find(variants.begin(), variants.end(), v) != variants.end());
    };
    if (forced_tile >= 0 && runtime::cuda_compute_capability() < 80) {
      std::cout << "# --tile: the tuning tiles are for sm_80+; wmma_pipelined runs its own tile on this GPU\n\n";
      forced_tile = -1;
    }

    for (const Shape& s : shapes) {
      const bool sweep_here = sweep && can_sweep;
      GemmArgs g;
      g.device = DeviceType::cuda;
      g.op_a = s.op_a;
      g.op_b = s.op_b;
      g.M = s.M;
      g.N = s.N;
      g.K = s.K;
      kernels::set_dense_ld(g);
      g.ab_type = DType::f16;
      g.c_type = c_type;
      void* A = random_device(static_cast<size_t>(s.M * s.K), DType::f16, 1);
      void* B = random_device(static_cast<size_t>(s.K * s.N), DType::f16, 2);
      void* C = runtime::cuda_malloc(static_cast<size_t>(s.M * s.N) * dtype_size(c_type));
      g.A = A;
      g.B = B;
      g.C = C;
      const double flops = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);
      const size_t c_numel = static_cast<size_t>(s.M * s.N);
      double cublas_ms = 0;
      std::vector<double> cublas_out;  // cuBLAS's C from its check run: the reference of the other rows
      // One row: `label` in the variant column, timed with `variant` (the tuning hook set by the caller).
      const auto time_row = [&](const std::string& v, const std::string& label) {
        std::printf("%-26s %-3s %7lld %6lld %6lld  %-17s ", s.name.c_str(), layout(s), static_cast<long long>(s.M),
                    static_cast<long long>(s.N), static_cast<long long>(s.K), label.c_str());
        const auto* var = registry.find(v, DeviceType::cuda);
        const char* why = var->unsupported != nullptr ? var->unsupported(g) : nullptr;
        if (why != nullptr) {
          std::printf("unsupported: %s\n", why);
          return;
        }
        if (v == "naive" && !explicit_variants && flops > 2.0 * 2048.0 * 2048.0 * 2048.0) {
          std::printf("skipped (slow rung above 2048^3; name it in --variants to time it)\n");
          return;
        }
        double ms = 0;
        try {
          ms = time_ms(g, v, warmup, runs);
        } catch (const Error& e) {  // a tuning tile that does not fit this GPU: say so, go on
          if (label == v) throw;
          std::printf("refused: %s\n", e.what());
          return;
        }
        const double tflops = flops / (ms * 1e-3) / 1e12;
        // The check run: C filled with NaN (bytes 0xFF are a NaN in f16 and in f32) on the halfling
        // stream, then the kernel once more, with the same tuning hook: an element it does not write
        // stays NaN instead of showing the previous row's answer.
        runtime::cuda_memset_async(C, 0xFF, c_numel * dtype_size(c_type));
        kernels::gemm(g, v);
        std::vector<double> out = download(C, c_numel, c_type);
        const bool is_cublas = v == "cublas";
        const std::vector<double>* ref = is_cublas || cublas_out.empty() ? nullptr : &cublas_out;
        const bench::OutputCheck c = bench::check_output(out, ref);
        const std::string wrong_why =
            bench::wrong_because(c, c_numel, ref != nullptr ? "cuBLAS" : nullptr, tolerance(c_type));
        if (is_cublas) {
          cublas_ms = ms;
          cublas_out = std::move(out);
        }
        if (!wrong_why.empty()) {
          ++wrong;
          std::printf("%10.4f WRONG: %s\n", ms, wrong_why.c_str());
        } else if (is_cublas) {
          std::printf("%10.4f %9.2f %7.0f%% %10s\n", ms, tflops, 100.0, "-");
        } else if (ref == nullptr) {
          std::printf("%10.4f %9.2f %8s %10s\n", ms, tflops, "-", "-");
        } else {
          std::printf("%10.4f %9.2f %7.0f%% %10.1e\n", ms, tflops, 100.0 * cublas_ms / ms, c.diff);
        }
        std::fflush(stdout);
      };
      for (const std::string& v : variants) {
        if (forced_tile >= 0 && v.rfind("wmma_pipelined", 0) == 0) {
          const tiles::ScopedBigTile forced(forced_tile);
          time_row(v, v + " #" + std::to_string(forced_tile));
        } else {
          time_row(v, v);
        }
      }
      if (sweep_here) {
        if (sweeps("wmma_pipelined"))
          for (int i : swept_tiles) {
            const tiles::ScopedBigTile tile(i);
            time_row("wmma_pipelined", "wmma_pipelined #" + std::to_string(i));
          }
        if (sweeps("mma_sync")) {  // the copy the rung does not use
          const kernels::mma_sync::ScopedLeanCopy other(!kernels::mma_sync::kLeanCopy);
          time_row("mma_sync", kernels::mma_sync::kLeanCopy ? "mma_sync general" : "mma_sync lean");
        }
        if (sweeps("wgmma"))
          for (int i = 0; i < kernels::cuda::wgmma_layout::kTileCount; ++i) {  // the "wgmma" row: its own choice
            const kernels::wgmma::ScopedTile tile(i);
            time_row("wgmma", "wgmma #" + std::to_string(i));
          }
        if (sweeps("wgmma_tma"))
          for (int i = 0; i < kernels::cuda::wgmma_tma_plan::kTileCount; ++i) {
            const kernels::wgmma_tma::ScopedTile tile(i);
            time_row("wgmma_tma", "wgmma_tma #" + std::to_string(i));
          }
        if (sweeps("wmma_smem"))
          for (bool batched : {false, true})
            for (int k : kernels::wmma_smem::kCandidateKSteps) {
              // The rung's own K step and copy are its row above.
              if (k == kernels::wmma_smem::kKStep && batched == kernels::wmma_smem::kBatchedCopy) continue;
              const kernels::wmma_smem::ScopedKStep step(k);
              const kernels::wmma_smem::ScopedBatchedCopy copy(batched);
              time_row("wmma_smem", "wmma_smem k" + std::to_string(k) + (batched ? " batched" : ""));
            }
      }
      runtime::cuda_free(A);
      runtime::cuda_free(B);
      runtime::cuda_free(C);
    }
    if (sweep && can_sweep) {  // the legend of the rows the sweep added
      std::cout << "\n# --sweep:\n";
      if (sweeps("wmma_pipelined")) {
        std::cout << "# 'wmma_pipelined #I': wmma_pipelined with block tile #I for every problem "
                  << "(kernels/cuda/gemm/wmma_pipelined_tiles.h; #" << tiles::kOwnTile
                  << " is the tile the rung uses for big problems)"
                  << (static_cast<int>(swept_tiles.size()) < tiles::kBigTileCount ? ", the tiles --sweep-tiles chose"
                                                                                   : "")
                  << ":\n";
        for (int i : swept_tiles) std::cout << "#   #" << i << ": " << tiles::describe(tiles::kBigTiles[i]) << "\n";
      }
      if (sweeps("wmma_smem"))
        std::cout << "# 'wmma_smem kN': wmma_smem with K step N and the general copy, 'kN batched' with the batched "
                     "one (the rung's own is "
                  << kernels::wmma_smem::kKStep << (kernels::wmma_smem::kBatchedCopy ? " batched" : "")
                  << "): kernels/cuda/gemm/wmma_smem_k_step.h;\n";
      if (sweeps("mma_sync"))
        std::cout << "# 'mma_sync " << (kernels::mma_sync::kLeanCopy ? "general" : "lean")
                  << "': mma_sync with the copy it does not use (its own: the "
                  << (kernels::mma_sync::kLeanCopy ? "lean" : "general")
                  << " copy; kernels/cuda/gemm/mma_sync_lanes.h);\n";
      if (sweeps("wgmma")) {
        std::cout << "# 'wgmma #I': wgmma with tile #I of kernels/cuda/gemm/wgmma_layout.h (compute capability 9.0 "
                     "only):\n";
        namespace wl = kernels::cuda::wgmma_layout;
        print_wgmma_tiles(wl::kTiles, wl::kTileCount, "2 warpgroups", [](int i) -> std::string {
          return i == 0 ? "for C wider than 64 columns" : i == wl::kNarrowTile ? "for 64 columns or fewer" : "";
        });
      }
      if (sweeps("wgmma_tma")) {
        std::cout << "# 'wgmma_tma #I': wgmma_tma with tile #I of kernels/cuda/gemm/wgmma_tma_plan.h (compute "
                     "capability 9.0 only; rows that are not 16-byte aligned are refused):\n";
        namespace tp = kernels::cuda::wgmma_tma_plan;
        // wgmma_tma_plan.h's own_tile(): by the output's width and how many SMs the tiles fill.
        print_wgmma_tiles(tp::kTiles, tp::kTileCount, "a producer and 2 consumer warpgroups", [](int i) -> std::string {
          if (i == tp::kWideTile) return "where its tiles number at least 3/4 of the SMs";
          if (i == tp::kNarrowTile)
            return "for 64 columns or fewer, and where #0's tiles would leave more than half the SMs idle";
          return i == 0 ? "in between" : "";
        });
      }
    }
    std::cout << "\n# %cuBLAS = cuBLAS time / variant time (higher is better); 'vs cuBLAS' = ||C - C_cublas|| / "
                 "||C_cublas|| (expect ~1e-3 for an f16 C: both round to f16, ~1e-6 for f32), each C from a run\n"
                 "# of its own into a C filled with NaN first; WRONG: an element not finite where cuBLAS's is (NaN: "
                 "not written), or 'vs cuBLAS' above "
              << tolerance(c_type) << " (" << out_name << " C)\n";
    if (!no_models)
      std::cout << "# 'dgrad (not in training)': the input gradient of a model's first layer, which training does "
                   "not compute\n";
  } catch (const std::exception& e) {
    std::cerr << "gemm_bench: " << e.what() << "\n";
    return 1;
  }
  if (wrong > 0) {
    std::printf("\n# %d row%s WRONG (above): exit status 3\n", wrong, wrong == 1 ? "" : "s");
    return 3;
  }
  return 0;
}
