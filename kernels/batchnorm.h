// BatchNorm2d (Ioffe & Szegedy 2015) over NCHW activations: per channel c,
//   y = gamma[c] * (x - mean[c]) * invstd[c] + beta[c],   invstd = 1 / sqrt(var + eps)
// with mean/var the batch statistics over (N, H, W) in training and the running statistics in
// evaluation. Training also updates the running statistics the way PyTorch does:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)   (unbiased, M = N*H*W)
// while the normalization itself uses the biased var.
//
// Precision (paper §3.3, DESIGN.md §3: batch-norm statistics and parameters stay FP32): x, y, dy and
// dx share one dtype t (f16 or f32; f64 on the CPU for gradient checks); gamma, beta, the running
// statistics, the saved statistics and dgamma/dbeta have dtype tp = f32 (f64 exactly when t is f64).
// Statistics are computed with two passes (mean first, then the mean of squared deviations), never
// as E[x^2] - E[x]^2 (which cancels catastrophically) and never in f16: an f16 input whose variance
// exceeds 65504 (the f16 maximum) still gives finite f32 statistics. The CPU accumulates in double,
// the GPU in f32.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/channel_slices.h"
#include "kernels/dtype.h"
#include "kernels/half.h"  // HL_HOST_DEVICE
#include "kernels/registry.h"

namespace hl::kernels {

struct BatchNormShape {
  int64_t N = 0, C = 0, HW = 0;  // x is [N, C, HW] (HW = H*W; 1 for BatchNorm1d-style input)
  int64_t count() const { return N * HW; }
};

// Training forward. running_mean / running_var may be null (no running statistics are kept).
// save_mean[C] and save_invstd[C] (dtype tp) receive the batch statistics for the backward pass.
// Needs count() >= 2 (an unbiased variance of one value is undefined).
void batch_norm_forward_train(DeviceType dev, const BatchNormShape& s, const void* x, void* y, DType t,
                              const void* gamma, const void* beta, void* running_mean, void* running_var,
                              void* save_mean, void* save_invstd, DType tp, double momentum, double eps);

// Evaluation forward: normalizes with the running statistics.
void batch_norm_forward_eval(DeviceType dev, const BatchNormShape& s, const void* x, void* y, DType t,
                             const void* gamma, const void* beta, const void* running_mean,
                             const void* running_var, DType tp, double eps);

// Backward of the training forward (batch statistics):
//   dbeta  = sum dy,   dgamma = sum dy * xhat,
//   dx     = gamma * invstd / M * (M * dy - dbeta - xhat * dgamma)
// dx has dtype t; dgamma, dbeta have dtype tp and are overwritten (the framework accumulates).
void batch_norm_backward(DeviceType dev, const BatchNormShape& s, const void* x, const void* dy, void* dx, DType t,
                         const void* gamma, const void* save_mean, const void* save_invstd, void* dgamma,
                         void* dbeta, DType tp);

// ---- the CUDA kernels as a registry family (DESIGN.md §2) -----------------------------------------
//
// The training forward and the backward are reductions over each channel's M = N*H*W values followed
// by an elementwise pass, and there are two ways to spread them over the GPU
// (kernels/cuda/batchnorm.cu):
//   per_channel  one block per channel does everything. Readable, but C blocks (64 for VGG-small's
//                first layers) leave half of a 132-SM GPU idle, and one block streams 131,072 values.
//   split        S blocks per channel (BatchNormSplit below) each reduce a slice; a small kernel per
//                channel combines the S partial sums in a fixed order (deterministic: the same
//                bits on every run of the same call on the same GPU; S depends on the SM count and
//                the slices on whether the pointers allow 16-byte loads, so another GPU or a
//                misaligned copy of the data may round differently); the elementwise pass runs over
//                the whole tensor; 16-byte loads where H*W allows.
// Both keep the two-pass statistics of the header comment. The evaluation forward is one elementwise
// kernel, the same for both. Choose with HALFLING_BN=NAME or --bn NAME; --list-variants lists them.
struct BatchNormArgs {
  static constexpr const char* family = "bn";
  static constexpr const char* env_var = "HALFLING_BN";

  enum class Pass { forward_train, backward };
  DeviceType device = DeviceType::cuda;
  Pass pass = Pass::forward_train;
  BatchNormShape s;
  DType t = DType::f32;  // x, y, dy, dx; the parameters and statistics are f32 on the GPU
  const void* x = nullptr;
  void* y = nullptr;          // forward_train
  const void* dy = nullptr;   // backward
  void* dx = nullptr;         // backward
  const float* gamma = nullptr;
  const float* beta = nullptr;          // forward_train
  float* running_mean = nullptr;        // forward_train, may be null
  float* running_var = nullptr;         // forward_train, may be null
  float* save_mean = nullptr;           // written by forward_train, read by backward
  float* save_invstd = nullptr;         // written by forward_train, read by backward
  float* dgamma = nullptr;              // backward
  float* dbeta = nullptr;               // backward
  float momentum = 0.1f, eps = 1e-5f;  // forward_train

  // "batch_norm forward N128 C64 HW1024 f16 on cuda": used in error messages.
  std::string describe() const {
    return std::string("batch_norm ") + (pass == Pass::forward_train ? "forward" : "backward") + " N" +
           std::to_string(s.N) + " C" + std::to_string(s.C) + " HW" + std::to_string(s.HW) + " " + dtype_name(t) +
           " on " + device_name(device);
  }
};
using BatchNormRegistry = Registry<BatchNormArgs>;

// How the `split` variant cuts each channel's reduction: S blocks per channel, each over a slice of
// `chunk` vectors of the channel's M / vec vectors (the last slice may be shorter; none is empty).
// vec is the vector width in elements: 16 bytes' worth (8 f16 or 4 f32) when H*W is a multiple of it,
// so that no vector straddles two images, else 1. S aims at 4 blocks per SM over all channels, but
// gives each thread at least 8 vectors to sum, so a small reduction is not split into slivers.
struct BatchNormSplit {
  int64_t vec = 1;
  int64_t vectors = 0;  // M / vec per channel
  int64_t blocks_per_channel = 1;
  int64_t chunk = 0;    // vectors per block
};

// aligned: whether the tensors' pointers allow 16-byte loads (else vec = 1).
inline BatchNormSplit plan_batch_norm_split(const BatchNormShape& s, DType t, int sm_count, int threads, bool aligned) {
  BatchNormSplit p;
  const int64_t v16 = t == DType::f16 ? 8 : 4;
  p.vec = aligned && s.HW % v16 == 0 ? v16 : 1;
  p.vectors = s.N * s.HW / p.vec;
  const ChannelSlices slices = slice_channels(p.vectors, s.C, sm_count, threads);
  p.chunk = slices.chunk;
  p.blocks_per_channel = slices.count;
  return p;
}

// Where the `split` kernels find their data (plain arithmetic, usable on the host for the tests).
// Vector k of channel c (k < N*HW/vec) is element k*vec of the channel's N*HW values: image
// n = k / (HW/vec), position (k % (HW/vec)) * vec. HW is a multiple of vec, so a vector never straddles
// two images.
HL_HOST_DEVICE int64_t bn_channel_vector_offset(const BatchNormShape& s, int64_t vec, int64_t c, int64_t k) {
  const int64_t hwv = s.HW / vec, n = k / hwv;
  return (n * s.C + c) * s.HW + (k - n * hwv) * vec;
}
// The channel of the vector that starts at element k*vec of the whole [N, C, HW] tensor.
HL_HOST_DEVICE int64_t bn_vector_channel(const BatchNormShape& s, int64_t vec, int64_t k) {
  return (k / (s.HW / vec)) % s.C;
}

}  // namespace hl::kernels
