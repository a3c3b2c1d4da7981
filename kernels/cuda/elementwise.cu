// CUDA elementwise kernels: binary ops with broadcasting, unary, relu backward, scalar ops, cast, fill.
//
// All of them follow one pattern: a grid-stride loop with 64-bit indices, each element loaded and
// widened to the compute type (float, or double when any operand is f64), computed, then rounded
// once into the output dtype. That is the precision rule of the whole project (DESIGN.md §3): FP16 is
// a storage format, never an arithmetic one. Semantics match the CPU reference in kernels/cpu/.
#include "kernels/backends.h"
#include "kernels/cuda/common.cuh"

namespace hl::kernels::cuda {

namespace {

// ---- binary ----------------------------------------------------------------------------------------

template <class C>
__device__ __forceinline__ C apply_binary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
  }
  return a;
}

// Output element i -> element offsets in a and b: peel off the coordinates from the last (fastest)
// dimension and weigh each by the operand's stride (0 where that operand is broadcast).
__device__ __forceinline__ void broadcast_offsets(const BroadcastIndex& ix, int64_t i, int64_t& ia, int64_t& ib) {
  ia = 0;
  ib = 0;
  for (int d = ix.ndim - 1; d >= 0; --d) {
    const int64_t coord = i % ix.shape[d];
    i /= ix.shape[d];
    ia += coord * ix.stride_a[d];
    ib += coord * ix.stride_b[d];
  }
}

// `dense`: both operands are laid out exactly like the output, so element i of each is at offset i
// and the index arithmetic (two 64-bit divisions per dimension) is skipped. The common case in a
// network: adding two tensors of the same shape.
template <class C>
__global__ void binary_kernel(BinaryOp op, BroadcastIndex ix, bool dense, int64_t n, const void* a, DType ta,
                              const void* b, DType tb, void* out, DType tout) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    int64_t ia = i, ib = i;
    if (!dense) broadcast_offsets(ix, i, ia, ib);
    store_as<C>(out, tout, i, apply_binary<C>(op, load_as<C>(a, ta, ia), load_as<C>(b, tb, ib)));
  }
}

// True when `stride` is the dense row-major stride of ix.shape (dims of size 1 have no say: their
// only coordinate is 0, whatever the stride).
bool is_dense(const BroadcastIndex& ix, const int64_t* stride) {
  int64_t expected = 1;
  for (int d = ix.ndim - 1; d >= 0; --d) {
    if (ix.shape[d] != 1 && stride[d] != expected) return false;
    expected *= ix.shape[d];
  }
  return true;
}

// ---- unary, relu backward, scalar ------------------------------------------------------------------

template <class C>
__device__ __forceinline__ C apply_unary(UnaryOp op, C x) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::relu: return x > C(0) || x != x ? x : C(0);  // NaN stays NaN, like the CPU
    case UnaryOp::exp: return math_exp(x);
    case UnaryOp::log: return math_log(x);
  }
  return x;
}

template <class C>
__global__ void unary_kernel(UnaryOp op, int64_t n, const void* x, DType tx, void* out, DType tout) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    store_as<C>(out, tout, i, apply_unary<C>(op, load_as<C>(x, tx, i)));
  }
}

template <class C>
__global__ void relu_backward_kernel(int64_t n, const void* x, const void* grad_out, void* grad_in, DType t) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    const C g = load_as<C>(x, t, i) > C(0) ? load_as<C>(grad_out, t, i) : C(0);
    store_as<C>(grad_in, t, i, g);
  }
}

template <class C>
__device__ __forceinline__ C apply_scalar(ScalarOp op, C x, C s) {
  switch (op) {
    case ScalarOp::add: return x + s;
    case ScalarOp::mul: return x * s;
    case ScalarOp::rsub: return s - x;
    case ScalarOp::rdiv: return s / x;
    case ScalarOp::pow: return math_pow(x, s);
  }
  return x;
}

template <class C>
__global__ void scalar_kernel(ScalarOp op, int64_t n, const void* x, C s, void* out, DType t) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    store_as<C>(out, t, i, apply_scalar<C>(op, load_as<C>(x, t, i), s));
  }
}

// ---- cast and fill ---------------------------------------------------------------------------------

// Through float (or double when either side is f64): every f16 and f32 value is exact in float, an
// i32 rounds to the nearest float as static_cast does, and store_* truncates toward zero into i32.
template <class C>
__global__ void cast_kernel(int64_t n, const void* x, DType tx, void* out, DType tout) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    store_as<C>(out, tout, i, load_as<C>(x, tx, i));
  }
}

// The value is converted once on the host (bit-exact with the CPU backend) and copied as raw bits.
template <class Bits>
__global__ void fill_kernel(int64_t n, Bits* out, Bits value) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) out[i] = value;
}

template <class Bits>
void launch_fill(int64_t n, void* out, Bits value) {
  fill_kernel<Bits><<<grid_for(n), kBlock, 0, stream()>>>(n, static_cast<Bits*>(out), value);
  HL_LAUNCH_CHECK("fill_kernel");
}

bool any_f64(DType a, DType b, DType c = DType::f32) {
  return a == DType::f64 || b == DType::f64 || c == DType::f64;
}

}  // namespace

void binary(BinaryOp op, const BroadcastIndex& ix, const void* a, DType ta, const void* b, DType tb, void* out,
            DType tout) {
  check_floating(ta, "binary");
  check_floating(tb, "binary");
  check_floating(tout, "binary");
  const int64_t n = ix.numel();
  if (n == 0) return;
  const bool dense = is_dense(ix, ix.stride_a) && is_dense(ix, ix.stride_b);
  if (any_f64(ta, tb, tout)) {
    binary_kernel<double><<<grid_for(n), kBlock, 0, stream()>>>(op, ix, dense, n, a, ta, b, tb, out, tout);
  } else {
    binary_kernel<float><<<grid_for(n), kBlock, 0, stream()>>>(op, ix, dense, n, a, ta, b, tb, out, tout);
  }
  HL_LAUNCH_CHECK("binary_kernel");
}

void unary(UnaryOp op, int64_t n, const void* x, DType tx, void* out, DType tout) {
  check_floating(tx, "unary");
  check_floating(tout, "unary");
  if (n == 0) return;
  if (any_f64(tx, tout)) {
    unary_kernel<double><<<grid_for(n), kBlock, 0, stream()>>>(op, n, x, tx, out, tout);
  } else {
    unary_kernel<float><<<grid_for(n), kBlock, 0, stream()>>>(op, n, x, tx, out, tout);
  }
  HL_LAUNCH_CHECK("unary_kernel");
}

void relu_backward(int64_t n, const void* x, const void* grad_out, void* grad_in, DType t) {
  check_floating(t, "relu_backward");
  if (n == 0) return;
  if (t == DType::f64) {
    relu_backward_kernel<double><<<grid_for(n), kBlock, 0, stream()>>>(n, x, grad_out, grad_in, t);
  } else {
    relu_backward_kernel<float><<<grid_for(n), kBlock, 0, stream()>>>(n, x, grad_out, grad_in, t);
  }
  HL_LAUNCH_CHECK("relu_backward_kernel");
}

void scalar(ScalarOp op, int64_t n, const void* x, double s, void* out, DType t) {
  check_floating(t, "scalar");
  if (n == 0) return;
  if (t == DType::f64) {
    scalar_kernel<double><<<grid_for(n), kBlock, 0, stream()>>>(op, n, x, s, out, t);
  } else {
    scalar_kernel<float><<<grid_for(n), kBlock, 0, stream()>>>(op, n, x, static_cast<float>(s), out, t);
  }
  HL_LAUNCH_CHECK("scalar_kernel");
}

void cast(int64_t n, const void* x, DType tx, void* out, DType tout) {
  if (n == 0) return;
  if (tx == tout) {  // a plain copy (also the only exact path for i32 -> i32)
    if (x != out) {
      HL_CUDA_CHECK(cudaMemcpyAsync(out, x, static_cast<size_t>(n) * dtype_size(tx), cudaMemcpyDeviceToDevice,
                                    stream()));
    }
    return;
  }
  if (any_f64(tx, tout)) {
    cast_kernel<double><<<grid_for(n), kBlock, 0, stream()>>>(n, x, tx, out, tout);
  } else {
    cast_kernel<float><<<grid_for(n), kBlock, 0, stream()>>>(n, x, tx, out, tout);
  }
  HL_LAUNCH_CHECK("cast_kernel");
}

void fill(int64_t n, void* out, DType t, double value) {
  if (n == 0) return;
  switch (t) {
    case DType::f32: return launch_fill<float>(n, out, static_cast<float>(value));
    case DType::f16: return launch_fill<uint16_t>(n, out, double_to_half_bits(value));
    case DType::f64: return launch_fill<double>(n, out, value);
    case DType::i32: return launch_fill<int32_t>(n, out, saturating_i32(value));  // the cast's rule (dtype.h)
  }
}

}  // namespace hl::kernels::cuda
