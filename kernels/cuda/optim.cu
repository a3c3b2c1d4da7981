// CUDA optimizer passes: multi-tensor, fused (kernels/optim.h; paper §3.1 and §3.2).
//
// Why multi-tensor: a model has many parameter tensors, most of them small (biases). One launch per
// tensor would make the optimizer launch-bound. Here one launch covers up to kMaxSlots tensors:
// the kernel argument carries every tensor's pointers plus a prefix sum of how many blocks each
// tensor gets, and each block finds its tensor and its chunk of kChunk elements.
//
// Why fused: in mixed precision the update reads the FP32 master weight, updates it, and writes
// the FP16 working copy from the new master in the same pass, so the masters are read once and no
// separate cast kernel runs. The arithmetic is FP32; the FP16 copy is rounded once, on the store.
//
// Why the scaler's decisions stay here: the found-inf flag, the scale, the count of applied updates
// and SGD's "momentum initialized" flags are read by these kernels from device memory, so a skipped
// step costs no host synchronization (the update kernels return early when *skip is set, and the
// one-thread scaler_update_kernel runs the shared rule of kernels/scaler_rule.h). Counters are only
// incremented by single-thread kernels launched after the multi-block ones that read them, so no
// block ever sees a half-updated value.
//
// Why the same bits as the CPU: each update is a few float operations per element, done here in the
// CPU's order with IEEE division and square root (nvcc's defaults). This file is compiled with
// -fmad=false (CMakeLists.txt): nvcc would otherwise fuse `w - lr * d` into one FMA, rounded once
// where the CPU rounds twice, and the master weights would drift apart by ulps, enough for an FP16
// copy to land on the other side of a tie.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.cuh"
#include "kernels/runtime.h"

namespace hl::kernels::cuda {

namespace {

constexpr int kMaxSlots = 24;       // keeps the kernel argument well under CUDA's 4 KB limit
constexpr int64_t kChunk = 4096;    // elements per block

template <class Slot>
struct SlotBatch {
  int count = 0;
  Slot slots[kMaxSlots];
  int64_t first_block[kMaxSlots + 1];  // slot s owns blocks [first_block[s], first_block[s + 1])
};

// Which slot, and which chunk of it, this block works on (a short linear search).
template <class Slot>
__device__ __forceinline__ int find_slot(const SlotBatch<Slot>& b, int64_t& chunk) {
  int s = 0;
  while (s + 1 < b.count && blockIdx.x >= b.first_block[s + 1]) ++s;
  chunk = blockIdx.x - b.first_block[s];
  return s;
}

// Split `slots` into batches of at most kMaxSlots (1 when multi_tensor() is off: one launch per
// tensor, for measuring what batching saves) and launch `launch(batch, blocks)` for each.
template <class Slot, class N, class Launch>
void for_each_batch(const std::vector<Slot>& slots, N n_of, Launch launch) {
  const int per_launch = multi_tensor() ? kMaxSlots : 1;
  SlotBatch<Slot> b;
  auto flush = [&] {
    if (b.count > 0 && b.first_block[b.count] > 0) launch(b, b.first_block[b.count]);
    b.count = 0;
  };
  for (const Slot& s : slots) {
    if (n_of(s) == 0) continue;
    if (b.count == per_launch) flush();
    if (b.count == 0) b.first_block[0] = 0;
    b.slots[b.count] = s;
    b.first_block[b.count + 1] = b.first_block[b.count] + (n_of(s) + kChunk - 1) / kChunk;
    ++b.count;
  }
  flush();
}

void check_slot(const ParamSlot& s, const char* op) {
  HL_CHECK(s.state_type == DType::f32, op, ": CUDA optimizer state must be f32, got ", dtype_name(s.state_type));
  HL_CHECK(s.param_type == DType::f32 || s.param_type == DType::f16, op, ": CUDA parameters must be f32 or f16, got ",
           dtype_name(s.param_type));
}

__device__ __forceinline__ float read_weight(const ParamSlot& s, int64_t i) {
  return s.master ? static_cast<const float*>(s.master)[i] : load_float(s.param, s.param_type, i);
}

__device__ __forceinline__ void write_weight(const ParamSlot& s, int64_t i, float w) {
  if (s.master) static_cast<float*>(s.master)[i] = w;
  store_float(s.param, s.param_type, i, w);  // the working copy, rounded once from the new master
}

struct SgdScalars {
  float lr, momentum, weight_decay, one_minus_dampening;  // 1 - dampening computed in double, as the CPU
  bool use_momentum, nesterov;
  const int32_t* skip;  // skip the whole update when set and nonzero (uniform across the grid)
};

__global__ void sgd_kernel(SlotBatch<ParamSlot> b, SgdScalars k) {
  if (k.skip != nullptr && *k.skip != 0) return;
  int64_t chunk;
  const ParamSlot& s = b.slots[find_slot(b, chunk)];
  // Read-only here; optim_finish_kernel sets it in a later launch.
  const bool first = s.initialized != nullptr ? *s.initialized == 0 : s.first_step;
  const int64_t end = min(s.n, (chunk + 1) * kChunk);
  const float* g = static_cast<const float*>(s.grad);
  float* buf = static_cast<float*>(s.buf1);
  for (int64_t i = chunk * kChunk + threadIdx.x; i < end; i += blockDim.x) {
    const float w = read_weight(s, i);
    float d = g[i] + k.weight_decay * w;
    if (k.use_momentum) {
      const float m = first ? d : k.momentum * buf[i] + k.one_minus_dampening * d;
      buf[i] = m;
      d = k.nesterov ? d + k.momentum * m : m;
    }
    write_weight(s, i, w - k.lr * d);
  }
}

struct AdamScalars {
  // Every coefficient computed in double and rounded once to float, as the CPU and PyTorch compute
  // them: 1 - beta1, 1 - beta2, AdamW's decay factor 1 - lr * weight_decay, the step size
  // lr / (1 - b1^t) and sqrt(1 - b2^t).
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, decay, step_size, bc2_sqrt;
  bool decoupled;
  // When set: t = *applied_steps + 1 and the bias corrections are computed here, in double as the CPU
  // computes them (step_size and bc2_sqrt above are then ignored).
  const int64_t* applied_steps;
  double lr_64, beta1_64, beta2_64;
  const int32_t* skip;
};

__global__ void adam_kernel(SlotBatch<ParamSlot> b, AdamScalars k) {
  if (k.skip != nullptr && *k.skip != 0) return;  // uniform: every block returns before the barrier
  if (k.applied_steps != nullptr) {
    __shared__ float corr[2];
    if (threadIdx.x == 0) {
      const double t = static_cast<double>(*k.applied_steps + 1);
      corr[0] = static_cast<float>(k.lr_64 / (1.0 - pow(k.beta1_64, t)));
      corr[1] = static_cast<float>(sqrt(1.0 - pow(k.beta2_64, t)));
    }
    __syncthreads();
    k.step_size = corr[0];
    k.bc2_sqrt = corr[1];
  }
  int64_t chunk;
  const ParamSlot& s = b.slots[find_slot(b, chunk)];
  const int64_t end = min(s.n, (chunk + 1) * kChunk);
  const float* g = static_cast<const float*>(s.grad);
  float* m = static_cast<float*>(s.buf1);
  float* v = static_cast<float*>(s.buf2);
  for (int64_t i = chunk * kChunk + threadIdx.x; i < end; i += blockDim.x) {
    float w = read_weight(s, i);
    float gi = g[i];
    if (k.decoupled) {
      w = w * k.decay;
    } else {
      gi = gi + k.weight_decay * w;
    }
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * gi;
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    write_weight(s, i, w - k.step_size * mi / (sqrtf(vi) / k.bc2_sqrt + k.eps));
  }
}

__global__ void unscale_kernel(SlotBatch<GradSlot> b, float inv_scale, int32_t* found_inf, const double* scale) {
  // The same expression as the CPU path: 1/S in double, rounded once to float.
  if (scale != nullptr) inv_scale = static_cast<float>(1.0 / *scale);
  int64_t chunk;
  const GradSlot& s = b.slots[find_slot(b, chunk)];
  const int64_t end = min(s.n, (chunk + 1) * kChunk);
  float* out = static_cast<float*>(s.out);
  bool bad = false;
  for (int64_t i = chunk * kChunk + threadIdx.x; i < end; i += blockDim.x) {
    const float x = load_float(s.grad, s.grad_type, i);
    bad |= !isfinite(x);
    out[i] = x * inv_scale;
  }
  // Every writer stores the same value, so the unsynchronized stores are benign; one flag for all.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1;
}

// Squares and sums in double, as the CPU does: a float sum of a million squares would lose the low
// bits that the clip factor, and so every clipped gradient, depends on.
__global__ void squares_kernel(SlotBatch<ConstSpan> b, int64_t block_offset, double* partials) {
  __shared__ double scratch[32];
  int64_t chunk;
  const ConstSpan& s = b.slots[find_slot(b, chunk)];
  const int64_t end = min(s.n, (chunk + 1) * kChunk);
  double acc = 0.0;
  for (int64_t i = chunk * kChunk + threadIdx.x; i < end; i += blockDim.x) {
    const double x = load_float(s.data, s.type, i);
    acc += x * x;
  }
  acc = block_reduce(acc, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) partials[block_offset + blockIdx.x] = acc;
}

// One block adds the partial sums in a fixed order (deterministic, unlike atomics), in double.
__global__ void sum_partials_kernel(const double* partials, int64_t n, float* out) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  acc = block_reduce(acc, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) *out = static_cast<float>(acc);
}

// Multiply every element by max_norm / (norm + 1e-6) when that is below 1; every thread derives the
// factor from *sum_sq itself (read-only), so the decision never travels to the host.
__global__ void clip_kernel(SlotBatch<Span> b, const float* sum_sq, double max_norm) {
  const double factor = max_norm / (sqrt(static_cast<double>(*sum_sq)) + 1e-6);
  if (!(factor < 1.0)) return;  // NaN norm: leave the gradients alone, like the CPU path
  const float f = static_cast<float>(factor);
  int64_t chunk;
  const Span& s = b.slots[find_slot(b, chunk)];
  const int64_t end = min(s.n, (chunk + 1) * kChunk);
  float* x = static_cast<float*>(s.data);
  for (int64_t i = chunk * kChunk + threadIdx.x; i < end; i += blockDim.x) x[i] = x[i] * f;
}

__global__ void norm_kernel(const float* sum_sq, double* norm_out) { *norm_out = sqrt(static_cast<double>(*sum_sq)); }

// Up to kMaxMarks flags per launch (pointers in the kernel argument, under the 4 KB limit).
constexpr int kMaxMarks = 256;
struct MarkBatch {
  int count;
  int32_t* flags[kMaxMarks];
};

// One block: thread i sets flag i, thread 0 counts the step. Launched after the update kernels.
__global__ void optim_finish_kernel(const int32_t* skip, int64_t* applied_steps, MarkBatch m) {
  if (skip != nullptr && *skip != 0) return;
  if (applied_steps != nullptr && threadIdx.x == 0) ++*applied_steps;
  for (int i = threadIdx.x; i < m.count; i += blockDim.x) *m.flags[i] = 1;
}

// A single thread: the rule is a handful of scalar operations on one state.
__global__ void scaler_update_kernel(ScalerRule rule, ScalerState* state, const int32_t* found_inf, float* scale_f32,
                                     double* history_slot) {
  *history_slot = state->scale;
  scaler_rule(rule, *state, found_inf != nullptr && *found_inf != 0);
  *scale_f32 = static_cast<float>(state->scale);
}

// The partial sums' grow-only scratch buffer (cudaMalloc stays off the hot path).
Scratch& partials_scratch() {
  static Scratch* ws = new Scratch();
  return *ws;
}

}  // namespace

void sgd_update(const std::vector<ParamSlot>& slots, const SgdParams& p) {
  for (const auto& s : slots) {
    check_slot(s, "sgd_update");
    HL_CHECK(p.momentum == 0.0 || s.buf1 != nullptr, "sgd_update: momentum ", p.momentum, " needs a momentum buffer");
  }
  const SgdScalars k{static_cast<float>(p.lr),
                     static_cast<float>(p.momentum),
                     static_cast<float>(p.weight_decay),
                     static_cast<float>(1.0 - p.dampening),
                     p.momentum != 0.0,
                     p.nesterov,
                     p.skip};
  for_each_batch(slots, [](const ParamSlot& s) { return s.n; }, [&](const SlotBatch<ParamSlot>& b, int64_t blocks) {
    sgd_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream()>>>(b, k);
    HL_LAUNCH_CHECK("sgd_kernel");
  });
}

void adam_update(const std::vector<ParamSlot>& slots, const AdamParams& p) {
  for (const auto& s : slots) {
    check_slot(s, "adam_update");
    HL_CHECK(s.buf1 != nullptr && s.buf2 != nullptr, "adam_update: needs both moment buffers");
  }
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
  const AdamScalars k{static_cast<float>(p.beta1),
                      static_cast<float>(p.beta2),
                      static_cast<float>(1.0 - p.beta1),
                      static_cast<float>(1.0 - p.beta2),
                      static_cast<float>(p.eps),
                      static_cast<float>(p.weight_decay),
                      static_cast<float>(1.0 - p.lr * p.weight_decay),
                      static_cast<float>(p.lr / bc1),
                      static_cast<float>(std::sqrt(1.0 - std::pow(p.beta2, static_cast<double>(p.step)))),
                      p.decoupled,
                      p.applied_steps,
                      p.lr,
                      p.beta1,
                      p.beta2,
                      p.skip};
  for_each_batch(slots, [](const ParamSlot& s) { return s.n; }, [&](const SlotBatch<ParamSlot>& b, int64_t blocks) {
    adam_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream()>>>(b, k);
    HL_LAUNCH_CHECK("adam_kernel");
  });
}

void unscale_grads(const std::vector<GradSlot>& slots, float inv_scale, int32_t* found_inf, const double* scale) {
  for (const auto& s : slots) {
    HL_CHECK(s.out_type == DType::f32, "unscale_grads: CUDA output must be f32, got ", dtype_name(s.out_type));
    check_floating(s.grad_type, "unscale_grads");
    HL_CHECK(s.grad_type != DType::f64, "unscale_grads: CUDA gradients must be f32 or f16");
  }
  for_each_batch(slots, [](const GradSlot& s) { return s.n; }, [&](const SlotBatch<GradSlot>& b, int64_t blocks) {
    unscale_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream()>>>(b, inv_scale, found_inf, scale);
    HL_LAUNCH_CHECK("unscale_kernel");
  });
}

void sum_of_squares(const std::vector<ConstSpan>& tensors, float* out) {
  int64_t total_blocks = 0;
  for (const auto& t : tensors) {
    HL_CHECK(t.type == DType::f32 || t.type == DType::f16, "sum_of_squares: CUDA tensors must be f32 or f16");
    total_blocks += (t.n + kChunk - 1) / kChunk;
  }
  Scratch& ws = partials_scratch();
  const std::lock_guard<std::mutex> lock(ws.mu);  // held until every launch is queued
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(total_blocks, 1)) * sizeof(double);
  double* partials = static_cast<double*>(ws.reserve(bytes));
  int64_t offset = 0;
  for_each_batch(tensors, [](const ConstSpan& t) { return t.n; }, [&](const SlotBatch<ConstSpan>& b, int64_t blocks) {
    squares_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream()>>>(b, offset, partials);
    HL_LAUNCH_CHECK("squares_kernel");
    offset += blocks;
  });
  sum_partials_kernel<<<1, 1024, 0, stream()>>>(partials, offset, out);
  HL_LAUNCH_CHECK("sum_partials_kernel");
}

void clip_by_norm(const std::vector<Span>& grads, const float* sum_sq, double max_norm, double* norm_out) {
  for (const auto& g : grads)
    HL_CHECK(g.type == DType::f32, "clip_by_norm: CUDA gradients must be f32, got ", dtype_name(g.type));
  norm_kernel<<<1, 1, 0, stream()>>>(sum_sq, norm_out);
  HL_LAUNCH_CHECK("norm_kernel");
  for_each_batch(grads, [](const Span& g) { return g.n; }, [&](const SlotBatch<Span>& b, int64_t blocks) {
    clip_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream()>>>(b, sum_sq, max_norm);
    HL_LAUNCH_CHECK("clip_kernel");
  });
}

void optim_finish(const int32_t* skip, int64_t* applied_steps, const std::vector<int32_t*>& mark) {
  size_t next = 0;
  do {  // at least one launch (the counter), then one per kMaxMarks flags
    MarkBatch m{};
    while (next < mark.size() && m.count < kMaxMarks) m.flags[m.count++] = mark[next++];
    optim_finish_kernel<<<1, kBlock, 0, stream()>>>(skip, applied_steps, m);
    HL_LAUNCH_CHECK("optim_finish_kernel");
    applied_steps = nullptr;  // counted once, in the first launch
  } while (next < mark.size());
}

void scaler_update(const ScalerRule& rule, ScalerState* state, const int32_t* found_inf, float* scale_f32,
                   double* history_slot) {
  scaler_update_kernel<<<1, 1, 0, stream()>>>(rule, state, found_inf, scale_f32, history_slot);
  HL_LAUNCH_CHECK("scaler_update_kernel");
}

}  // namespace hl::kernels::cuda
