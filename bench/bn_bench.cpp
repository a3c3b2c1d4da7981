// Batch-norm benchmark (GPU): every CUDA batch-norm variant (kernels/batchnorm.h: per_channel, split)
// on VGG-small's batch-norm layers at batch 128, training forward and backward, timed with CUDA events
// after warm-up (median of many samples), next to the device copy bandwidth measured in the same run
// (DESIGN.md §6: every number a ratio).
//
//   build/bench/bn_bench [--samples N] [--quick]
//
// GB/s = compulsory bytes / time: the forward must read x and write y once (2 tensors), the backward
// read x and dy and write dx (3 tensors). Extra passes a variant makes (split's forward reads x three
// times) count against it. "%copy" compares with cudaMemcpyAsync device-to-device moving the same
// number of bytes. The last lines add up one VGG-small step's six batch norms (two layers per shape),
// forward + backward, per variant: the figure to hold against bench/train --profile.
//
// The copy moves 2 tensors, the forward touches 2 and the backward 3, so at one shape the copy can be
// served from the L2 where the backward is not (VGG-small's first shape in f16 on an H100): each row
// also prints its working set and the copy's, and a note where exactly one of them fits the L2
// (bench/stats.h, fits_in_l2). The times themselves are measured as they always were.
// There is no correctness check here: CudaBatchNorm.* (tests/kernels/test_cnn_cuda.cpp) compares every
// variant with the CPU reference.
// Without a GPU it prints "no CUDA device" and exits 0.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/cuda_timing.h"
#include "kernels/batchnorm.h"
#include "kernels/runtime.h"

using namespace hl;
namespace k = hl::kernels;
using bench::Buf;
using bench::check;
using bench::median_us;
using bench::stream;
using bench::upload;
using bench::upload_random;

namespace {

// One row; `bytes` are the compulsory bytes, which are also the row's working set (each tensor once), and
// `copy_bytes` the copy's (x and y).
void row(const char* op, const k::BatchNormShape& s, DType t, const std::string& variant, double us, double bytes,
         double copy_gbs, double copy_bytes, int64_t l2) {
  const double gbs = bytes / (us * 1e-6) / 1e9;
  const std::string shape = std::to_string(s.N) + "x" + std::to_string(s.C) + "x" + std::to_string(s.HW);
  std::printf("%-9s %-14s %-5s %-14s %10.2f %9.1f %6.0f%% %8.1f %8.1f%s\n", op, shape.c_str(), dtype_name(t),
              variant.c_str(), us, gbs, 100.0 * gbs / copy_gbs, bytes / 1e6, copy_bytes / 1e6,
              bench::l2_note(bytes, copy_bytes, l2));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"batch-norm benchmark"};
  int samples = 25;
  bool quick = false;
  app.add_option("--samples", samples, "timed samples per entry (the median is shown)")->check(CLI::Range(3, 1000));
  app.add_flag("--quick", quick, "f16 and the first shape only (a smoke run)");
  CLI11_PARSE(app, argc, argv);

  if (!bench::print_gpu_header("bn_bench", argc, argv)) return 0;
  std::printf("# CUDA events, 3 warm-up calls, median of %d samples; GB/s = compulsory bytes (forward: x read, y\n"
              "# written; backward: x, dy read, dx written) / time; %%copy = GB/s / cudaMemcpyAsync D2D GB/s on the\n"
              "# same bytes, measured in this run. Shapes N x C x H*W: VGG-small's batch norms at batch 128.\n",
              samples);
  const int64_t l2 = bench::l2_bytes();
  bench::print_l2_legend(l2);
  std::printf("%-9s %-14s %-5s %-14s %10s %9s %7s %8s %8s\n", "op", "shape", "dtype", "variant", "us/call", "GB/s",
              "%copy", "ws MB", "copy MB");

  std::vector<std::string> variants;
  for (const auto& v : k::BatchNormRegistry::instance().all())
    if (v.device == DeviceType::cuda) variants.push_back(v.name);

  std::vector<k::BatchNormShape> shapes = {{128, 64, 32 * 32}, {128, 128, 16 * 16}, {128, 256, 8 * 8}};
  std::vector<DType> types = {DType::f16, DType::f32};
  if (quick) {
    shapes.resize(1);
    types = {DType::f16};
  }

  std::map<std::pair<DType, std::string>, double> step_us;  // (dtype, variant) -> six layers, fwd + bwd
  for (DType t : types)
    for (const k::BatchNormShape& s : shapes) {
      const size_t n = static_cast<size_t>(s.N * s.C * s.HW), C = static_cast<size_t>(s.C);
      const size_t bytes = n * dtype_size(t);
      Buf x(bytes), y(bytes), dy(bytes), dx(bytes), gamma(C * 4), beta(C * 4), rm(C * 4), rv(C * 4), sm(C * 4),
          si(C * 4), dg(C * 4), db(C * 4);
      // Random values in [-2, 6): a batch norm's input has a mean away from 0.
      upload_random(x.p, n, t, 1 * 0x9E3779B97F4A7C15ull + 1, -2.0f, 6.0f);
      upload_random(dy.p, n, t, 2 * 0x9E3779B97F4A7C15ull + 1, -2.0f, 6.0f);
      const std::vector<float> ones(C, 1.0f), zeros(C, 0.0f);
      upload(gamma.p, ones.data(), C * 4, "gamma");
      upload(beta.p, zeros.data(), C * 4, "beta");
      upload(rm.p, zeros.data(), C * 4, "running_mean");
      upload(rv.p, ones.data(), C * 4, "running_var");

      const double copy_us = median_us(
          [&] { check(cudaMemcpyAsync(y.p, x.p, bytes, cudaMemcpyDeviceToDevice, stream()), "copy"); }, samples, 10);
      const double copy_bytes = 2.0 * static_cast<double>(bytes);
      const double copy_gbs = copy_bytes / (copy_us * 1e-6) / 1e9;
      row("copy", s, t, "cudaMemcpy D2D", copy_us, copy_bytes, copy_gbs, copy_bytes, l2);

      for (const std::string& v : variants) {
        k::BatchNormRegistry::instance().set_default(v);
        const double fwd = median_us(
            [&] {
              k::batch_norm_forward_train(DeviceType::cuda, s, x.p, y.p, t, gamma.p, beta.p, rm.p, rv.p, sm.p, si.p,
                                          DType::f32, 0.1, 1e-5);
            },
            samples, 10);
        const double bwd = median_us(
            [&] {
              k::batch_norm_backward(DeviceType::cuda, s, x.p, dy.p, dx.p, t, gamma.p, sm.p, si.p, dg.p, db.p,
                                     DType::f32);
            },
            samples, 10);
        row("forward", s, t, v, fwd, 2.0 * static_cast<double>(bytes), copy_gbs, copy_bytes, l2);
        row("backward", s, t, v, bwd, 3.0 * static_cast<double>(bytes), copy_gbs, copy_bytes, l2);
        step_us[{t, v}] += 2.0 * (fwd + bwd);  // VGG-small has two batch norms of each shape
      }
      k::BatchNormRegistry::instance().set_default("");
    }
  check(cudaStreamSynchronize(stream()), "sync");
  if (!quick) {
    for (const auto& [key, us] : step_us)
      std::printf("# VGG-small step, six batch norms forward + backward, %s, %s: %.1f us\n", dtype_name(key.first),
                  key.second.c_str(), us);
  }
  return 0;
}
