// Reduction benchmark (GPU): reduce_sum's two paths on the sums training makes, timed with CUDA events
// after warm-up (median of many samples), next to the device copy bandwidth measured in the same run
// (DESIGN.md §6: every number a ratio).
//
//   build/bench/reduce_bench [--samples N] [--quick]
//
// The paths (kernels/reduce_plan.h): "channel", the kernels of reduce.cu that take a sum of the [A, C, B]
// shape (a convolution's bias gradient, sum(dy, {0, 2, 3})), and "cub", CUB's segmented reduction, which
// takes every other sum (the channel path is reduce_sum's choice for its shape since its H100 run,
// reduce_plan.h's kChannelPathIsDefault). The hook forces each path here. A sum the channel path does
// not take runs the same kernels under both names, and the table says so.
//
// GB/s = the input's bytes / time: a sum must read its input once, and its output is small. "%copy"
// compares with cudaMemcpyAsync device-to-device moving the same number of bytes in and out (2x the
// input), the rate a kernel that streams memory can hope for. The copy's working set is twice the
// sum's (the input and the copy of it), so at some shapes the copy is served from the L2 and the sum is
// not, or the reverse: each row prints both working sets and a note where exactly one fits the L2
// (bench/stats.h, fits_in_l2). The times themselves are measured as they always were. There is no
// correctness check here: CudaReduce.* (tests/kernels) compares both paths with a float64 reference.
// Without a GPU it prints "no CUDA device" and exits 0.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/cuda_timing.h"
#include "kernels/reduce.h"
#include "kernels/reduce_plan.h"
#include "kernels/runtime.h"

using namespace hl;
namespace k = hl::kernels;
using bench::Buf;
using bench::check;
using bench::median_us;
using bench::stream;
using bench::upload_random;

namespace {

struct Sum {
  const char* what;
  std::vector<int64_t> shape;
  std::vector<int> reduced;
};

std::string shape_text(const Sum& s) {
  std::string t;
  for (size_t d = 0; d < s.shape.size(); ++d) {
    bool r = false;
    for (int x : s.reduced) r = r || static_cast<size_t>(x) == d;
    if (d > 0) t += 'x';
    t += std::to_string(s.shape[d]);
    if (r) t += 'r';
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"reduction benchmark"};
  int samples = 25;
  bool quick = false;
  app.add_option("--samples", samples, "timed samples per entry (the median is shown)")->check(CLI::Range(3, 1000));
  app.add_flag("--quick", quick, "f16 and the first sum only (a smoke run)");
  CLI11_PARSE(app, argc, argv);

  if (!bench::print_gpu_header("reduce_bench", argc, argv)) return 0;
  std::printf("# CUDA events, 3 warm-up calls, median of %d samples of 10 calls; GB/s = input bytes / time;\n"
              "# %%copy = GB/s / cudaMemcpyAsync D2D GB/s (2x the input's bytes moved), measured in this run.\n"
              "# Shapes: 'r' marks a summed dimension. Outputs f32, as the bias gradients' are (ops_cnn.cpp).\n",
              samples);
  const int64_t l2 = bench::l2_bytes();
  bench::print_l2_legend(l2);
  std::printf("%-22s %-18s %-5s %-8s %-34s %10s %9s %7s %8s %8s\n", "sum", "shape", "dtype", "path", "plan", "us/call",
              "GB/s", "%copy", "ws MB", "copy MB");

  std::vector<Sum> sums = {
      {"lenet conv1 bias grad", {128, 32, 28, 28}, {0, 2, 3}},
      {"lenet conv2 bias grad", {128, 64, 14, 14}, {0, 2, 3}},
      {"vgg bn 64 channels", {128, 64, 32, 32}, {0, 2, 3}},
      {"vgg bn 256 channels", {128, 256, 8, 8}, {0, 2, 3}},
      {"linear bias grad", {128, 256}, {0}},
      {"row sums", {4096, 4096}, {1}},
  };
  std::vector<DType> types = {DType::f16, DType::f32};
  if (quick) {
    sums.resize(1);
    types = {DType::f16};
  }

  for (DType t : types)
    for (const Sum& s : sums) {
      const k::ReduceIndex ix = k::ReduceIndex::of(s.shape, s.reduced);
      const size_t n = static_cast<size_t>(ix.out_numel() * ix.reduce_numel());
      const size_t bytes = n * dtype_size(t);
      Buf x(bytes), y(bytes), out(static_cast<size_t>(ix.out_numel()) * 4);
      upload_random(x.p, n, t, 0x9E3779B97F4A7C15ull + 1, -2.0f, 2.0f);
      const double copy_us = median_us(
          [&] { check(cudaMemcpyAsync(y.p, x.p, bytes, cudaMemcpyDeviceToDevice, stream()), "copy"); }, samples, 10);
      const double copy_bytes = 2.0 * static_cast<double>(bytes);
      const double copy_gbs = copy_bytes / (copy_us * 1e-6) / 1e9;
      // The sum's working set: its input, and its f32 output.
      const double sum_bytes = static_cast<double>(bytes) + 4.0 * static_cast<double>(ix.out_numel());
      const k::reduce_plan::ChannelSum p = k::reduce_plan::plan_channel_sum(
          ix, dtype_size(t), k::reduce_plan::address_alignment(x.p), runtime::cuda_sm_count(), 256);
      for (bool channel : {true, false}) {
        const k::reduce_plan::ScopedChannelPath path(channel);
        const double us = median_us(
            [&] { k::reduce_sum(DeviceType::cuda, ix, x.p, t, out.p, DType::f32, 1.0); }, samples, 10);
        std::string plan = "CUB segmented / device reduce";
        if (channel && p.applies) {
          plan = "A" + std::to_string(p.A) + " C" + std::to_string(p.C) + " B" + std::to_string(p.B) + ", vec " +
                 std::to_string(p.vec) + ", " + std::to_string(p.slices) + " slices";
        } else if (channel) {
          plan = "not taken: CUB as below";
        }
        const double gbs = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
        std::printf("%-22s %-18s %-5s %-8s %-34s %10.2f %9.1f %6.0f%% %8.1f %8.1f%s\n", s.what, shape_text(s).c_str(),
                    dtype_name(t), channel ? "channel" : "cub", plan.c_str(), us, gbs, 100.0 * gbs / copy_gbs,
                    sum_bytes / 1e6, copy_bytes / 1e6, bench::l2_note(sum_bytes, copy_bytes, l2));
      }
    }
  check(cudaStreamSynchronize(stream()), "sync");
  return 0;
}
