// Tutorial 04: the GEMM ladder. Runs every registered GEMM variant of the chosen device on the GEMMs
// of MLP-512 (and square ones), checks each against a float64 reference computed here from the same
// FP16-rounded inputs, and prints the time, TFLOP/s and (on a GPU) the ratio to cuBLAS in one table.
// The chapter is tutorials/04_gemm_ladder/README.md; the kernels are kernels/cuda/gemm/*.cu.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "framework/device.h"
#include "kernels/error.h"
#include "kernels/gemm.h"
#include "kernels/half.h"
#include "kernels/runtime.h"
#include "tutorials/common/cli.h"

using namespace hl;
using kernels::GemmArgs;
using kernels::Op;

namespace {

struct Shape {
  std::string name;
  Op op_a, op_b;
  int64_t M, N, K;
};

const char* layout(Op a, Op b) {
  if (a == Op::N) return b == Op::N ? "NN" : "NT";
  return b == Op::N ? "TN" : "TT";
}

// Memory for one matrix on the chosen device, filled from host values rounded to dtype t.
class Buffer {
 public:
  Buffer(Device dev, DType t, const std::vector<double>& values) : dev_(dev), t_(t), n_(values.size()) {
    std::vector<unsigned char> bytes(n_ * dtype_size(t));
    for (size_t i = 0; i < n_; ++i) {
      if (t == DType::f16) {
        const uint16_t h = double_to_half_bits(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      } else {
        const float f = static_cast<float>(values[i]);
        std::memcpy(bytes.data() + 4 * i, &f, 4);
      }
    }
    ptr_ = dev == Device::cuda ? runtime::cuda_malloc(bytes.size()) : ::operator new(bytes.size());
    write(bytes);
  }
  ~Buffer() {
    if (dev_ == Device::cuda) {
      runtime::cuda_free(ptr_);
    } else {
      ::operator delete(ptr_);
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return ptr_; }
  void poison() { write(std::vector<unsigned char>(n_ * dtype_size(t_), 0xFF)); }  // all-ones bits: NaN in f16 and f32
  double at(size_t i) const { return host_[i]; }
  // Copy back to the host (after the GEMM), as doubles.
  void fetch() {
    std::vector<unsigned char> bytes(n_ * dtype_size(t_));
    if (dev_ == Device::cuda) {
      runtime::cuda_memcpy_async(bytes.data(), ptr_, bytes.size(), runtime::CopyKind::device_to_host);
      runtime::cuda_synchronize();
    } else {
      std::memcpy(bytes.data(), ptr_, bytes.size());
    }
    host_.resize(n_);
    for (size_t i = 0; i < n_; ++i) {
      if (t_ == DType::f16) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        host_[i] = half_bits_to_float(h);
      } else {
        float f;
        std::memcpy(&f, bytes.data() + 4 * i, 4);
        host_[i] = f;
      }
    }
  }

 private:
  void write(const std::vector<unsigned char>& bytes) {
    if (dev_ == Device::cuda) {
      runtime::cuda_memcpy_async(ptr_, bytes.data(), bytes.size(), runtime::CopyKind::host_to_device);
      runtime::cuda_synchronize();
    } else {
      std::memcpy(ptr_, bytes.data(), bytes.size());
    }
  }
  Device dev_;
  DType t_;
  size_t n_;
  void* ptr_ = nullptr;
  std::vector<double> host_;
};

void synchronize(Device dev) {
  if (dev == Device::cuda) runtime::cuda_synchronize();
}

// Median milliseconds per call over `batches` batches of `reps` calls (after one warm-up call).
// Host clock around a synchronized batch: portable to the CPU backend, and on the GPU the batch
// amortizes the launch and synchronization cost (bench/gemm_bench times with CUDA events).
double time_ms(const GemmArgs& g, const std::string& variant, int batches, int reps) {
  using Clock = std::chrono::steady_clock;
  kernels::gemm(g, variant);
  synchronize(g.device);
  std::vector<double> ms;
  for (int b = 0; b < batches; ++b) {
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) kernels::gemm(g, variant);
    synchronize(g.device);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / reps);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"04_gemm_ladder: every GEMM variant, checked against float64 and timed"};
  tutorial::CommonFlags f;
  f.precision = "fp16";
  bool f32_inputs = false;
  tutorial::add_common_flags(app, f, {"fp16"});
  app.add_flag("--f32-inputs", f32_inputs, "FP32 inputs instead of FP16 (the WMMA rungs then decline)");
  CLI11_PARSE(app, argc, argv);
  if (f.list_variants) {
    tutorial::print_variants();
    return 0;
  }
  try {
    const Device dev = tutorial::apply_common_flags(f);  // checks --gemm against the device's variants
    kernels::GemmRegistry::instance().set_default("");   // this program names each variant itself
    const DType ab = f32_inputs ? DType::f32 : DType::f16;
    const DType c_type = DType::f32;

    std::vector<std::string> variants = kernels::GemmRegistry::instance().names(dev);
    // A CUDA name after a fallback to the CPU was dropped by apply_common_flags (with a notice): run them all.
    if (!f.gemm.empty() && kernels::GemmRegistry::instance().find(f.gemm, dev) != nullptr) variants = {f.gemm};
    const bool gpu = dev == Device::cuda;

    std::cout << "halfling 04_gemm_ladder on " << device_name(dev)
              << (gpu ? ": " + runtime::cuda_device_description() : std::string()) << "\n";
    std::cout << "inputs " << dtype_name(ab) << ", C " << dtype_name(c_type) << ", FP32 accumulation (paper §3.3)\n";
    if (!gpu) {
      const auto cuda_names = kernels::GemmRegistry::instance().names(Device::cuda);
      std::string list;
      for (const auto& n : cuda_names) list += (list.empty() ? "" : ", ") + n;
      if (cuda_names.empty()) {
        std::cout << "note: the CUDA rungs need a GPU and a CUDA build (this build has no CUDA); running the CPU "
                     "variants\n";
      } else {
        std::cout << "note: the CUDA rungs (" << list << ") need a GPU (" << runtime::cuda_unavailable_reason()
                  << "); running the CPU variants\n";
      }
    }

    // MLP-512's first layer at batch 128 (forward x W^T, weight gradient dy^T x), then square ones.
    std::vector<Shape> shapes = {{"square 64", Op::N, Op::N, 64, 64, 64},
                                 {"MLP fc1 forward", Op::N, Op::T, 128, 512, 784}};
    if (!f.smoke) {
      shapes.push_back({"MLP fc1 weight grad", Op::T, Op::N, 512, 784, 128});
      shapes.push_back({"square 512", Op::N, Op::N, 512, 512, 512});
      if (gpu) {
        shapes.push_back({"square 1024", Op::N, Op::N, 1024, 1024, 1024});
        shapes.push_back({"square 4096", Op::N, Op::N, 4096, 4096, 4096});
      }
    }
    const int batches = f.smoke ? 1 : 5;

    std::printf("\n%-20s %-2s %5s %5s %5s  %-16s %9s %4s %9s %8s%s\n", "shape", "op", "M", "N", "K", "variant",
                "rel.err", "ok", "ms", "TFLOP/s", gpu ? "  vs cuBLAS" : "");
    bool all_ok = true;
    uint64_t seed = f.seed;
    for (const Shape& s : shapes) {
      std::mt19937_64 rng(seed++);
      std::uniform_real_distribution<double> dist(-1.0, 1.0);
      // Inputs rounded to FP16 first (even for --f32-inputs), so the reference sees exactly what the kernels see.
      std::vector<double> a(static_cast<size_t>(s.M * s.K)), b(static_cast<size_t>(s.K * s.N));
      for (auto& x : a) x = half_bits_to_float(double_to_half_bits(dist(rng)));
      for (auto& x : b) x = half_bits_to_float(double_to_half_bits(dist(rng)));

      // float64 reference for a sample of rows (every row up to 256; beyond that, where the full reference
      // would cost minutes of CPU time, 64 evenly spaced rows from the first, and the last: a kernel with no
      // tile for a partial last block of rows gets that one wrong).
      std::vector<int64_t> rows;
      const int64_t step = s.M <= 256 ? 1 : s.M / 64;
      for (int64_t m = 0; m < s.M; m += step) rows.push_back(m);
      if (rows.back() != s.M - 1) rows.push_back(s.M - 1);
      std::vector<double> ref(rows.size() * static_cast<size_t>(s.N));
#pragma omp parallel for
      for (int64_t ri = 0; ri < static_cast<int64_t>(rows.size()); ++ri) {
        const int64_t m = rows[static_cast<size_t>(ri)];
        for (int64_t n = 0; n < s.N; ++n) {
          double acc = 0;
          for (int64_t k = 0; k < s.K; ++k) {
            const double x = s.op_a == Op::N ? a[static_cast<size_t>(m * s.K + k)] : a[static_cast<size_t>(k * s.M + m)];
            const double y = s.op_b == Op::N ? b[static_cast<size_t>(k * s.N + n)] : b[static_cast<size_t>(n * s.K + k)];
            acc += x * y;
          }
          ref[static_cast<size_t>(ri * s.N + n)] = acc;
        }
      }

      Buffer da(dev, ab, a), db(dev, ab, b), dc(dev, c_type, std::vector<double>(static_cast<size_t>(s.M * s.N), 0.0));
      GemmArgs g;
      g.device = dev;
      g.op_a = s.op_a;
      g.op_b = s.op_b;
      g.M = s.M;
      g.N = s.N;
      g.K = s.K;
      kernels::set_dense_ld(g);
      g.A = da.get();
      g.B = db.get();
      g.ab_type = ab;
      g.C = dc.get();
      g.c_type = c_type;
      const double flops = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);

      double cublas_ms = 0;
      std::vector<std::string> order = variants;
      if (gpu && std::find(order.begin(), order.end(), "cublas") == order.end()) order.push_back("cublas");
      // cuBLAS first, so that every other row can show the ratio.
      std::stable_partition(order.begin(), order.end(), [](const std::string& v) { return v == "cublas"; });
      for (const std::string& v : order) {
        std::printf("%-20s %-2s %5lld %5lld %5lld  %-16s ", s.name.c_str(), layout(s.op_a, s.op_b),
                    static_cast<long long>(s.M), static_cast<long long>(s.N), static_cast<long long>(s.K), v.c_str());
        const auto* var = kernels::GemmRegistry::instance().find(v, dev);
        if (const char* why = var->unsupported != nullptr ? var->unsupported(g) : nullptr) {
          std::printf("declines: %s\n", why);
          continue;
        }
        const bool slow = (v == "naive" || v == "reference") && flops > 2.0 * 1024 * 1024 * 1024 && f.gemm != v;
        if (slow) {
          std::printf("skipped (a slow rung at this size; pick it with --gemm %s)\n", v.c_str());
          continue;
        }
        dc.poison();
        kernels::gemm(g, v);
        synchronize(dev);
        dc.fetch();
        double num = 0, den = 0;
        for (size_t ri = 0; ri < rows.size(); ++ri) {
          for (int64_t n = 0; n < s.N; ++n) {
            const double o = dc.at(static_cast<size_t>(rows[ri] * s.N + n)), r = ref[ri * static_cast<size_t>(s.N) + static_cast<size_t>(n)];
            num += (o - r) * (o - r);
            den += r * r;
          }
        }
        const double err = std::sqrt(num / den);  // NaN (a missed element) fails the check below
        // FP32 accumulation of K <= 4096 terms: norm-wise error ~ sqrt(K) 2^-24 ~ 4e-6 (Tensor Cores
        // truncate, up to ~4x that); 1e-4 leaves room and still catches any real bug (errors ~1e-1).
        const bool ok = err <= 1e-4;
        all_ok = all_ok && ok;
        const int reps = f.smoke ? 1 : std::max(1, static_cast<int>(std::min(200.0, 2e10 / flops * (gpu ? 50 : 0.05))));
        const double ms = time_ms(g, v, batches, reps);
        const double tflops = flops / (ms * 1e-3) / 1e12;
        if (v == "cublas") cublas_ms = ms;
        std::printf("%9.1e %4s %9.4f %8.3g", err, ok ? "yes" : "NO", ms, tflops);  // %g: CPU rates are tiny
        if (gpu && cublas_ms > 0) std::printf("  %9.0f%%", 100.0 * cublas_ms / ms);
        std::printf("\n");
      }
    }
    std::cout << "\nrel.err = ||C - C_ref|| / ||C_ref|| against float64 on the same FP16-rounded inputs"
              << " (ok: <= 1e-4; FP32 accumulation lands near 1e-6)\n";
    if (gpu) std::cout << "vs cuBLAS = cuBLAS time / variant time, in this run\n";
    if (!all_ok) {
      std::cout << "SOME VARIANT IS WRONG\n";
      return 1;
    }
  } catch (const Error& e) {
    std::cerr << "04_gemm_ladder: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
