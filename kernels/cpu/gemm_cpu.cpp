// CPU GEMM variants (kernels/gemm.h has the semantics).
//
//   reference  the triple loop: the definition every other variant is tested against.
//   blocked    the CPU fast path: packed panels, a register-tiled micro-kernel written with portable
//              vector types, compiled for AVX-512, AVX2/FMA and baseline SSE2/NEON and picked at run
//              time for the CPU at hand; OpenMP across tiles of C.
//   blocked_avx512, blocked_avx2, blocked_portable
//              the same, pinned to one micro-kernel (for tests and benchmarks; skipped on a CPU
//              without that instruction set).
//
// All follow the GPU's numerics (paper §3.3): f16 inputs are widened to f32 (exactly), products are
// accumulated in f32, and the result is rounded to f16 (nearest-even) only when it is stored. f64
// inputs accumulate in f64 (gradient checks).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_cpu_plan.h"
#include "kernels/gemm.h"
#include "kernels/half.h"

namespace hl::kernels {
namespace {

// ================================================================================================
// Shared by all variants: element access and the epilogue
// ================================================================================================

// The arithmetic type for an input type: f64 stays f64, f16 and f32 compute in f32.
template <class S>
using acc_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

template <class T, class S>
inline T widen(S x) {
  if constexpr (std::is_same_v<S, half>) {
    return static_cast<T>(cpu::f16_to_f32(x.bits));  // branch-free: the packing loops vectorize
  } else {
    return static_cast<T>(x);
  }
}

// dst[0..n) = src[0..n) widened: contiguous on both sides, so the loop vectorizes; f16 -> f32 goes
// through the run converter, which uses F16C where the CPU has it (half_convert_cpu.cpp).
template <class T, class S>
inline void widen_run(const S* __restrict src, T* __restrict dst, int64_t n) {
  if constexpr (std::is_same_v<S, half> && std::is_same_v<T, float>) {
    cpu::widen_f16_run(src, dst, n);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = widen<T>(src[i]);
  }
}

template <class CT, class T>
inline CT narrow(T v) {
  if constexpr (std::is_same_v<CT, half>) {
    return half::from_bits(cpu::f32_to_f16(v));  // nearest even, the one rounding of an f16 output
  } else {
    return static_cast<CT>(v);
  }
}

// C = act(alpha * acc + beta * C + bias), computed in T (the accumulation type) and rounded once on
// the store. beta == 0 never reads C: it may hold NaN (tests poison it on purpose).
template <class T>
struct Epilogue {
  T alpha, beta;
  std::vector<T> bias;  // widened copy of the bias (empty: no bias)
  bool relu;
  void* C;
  DType c_type;
  int64_t ldc;

  explicit Epilogue(const GemmArgs& g)
      : alpha(static_cast<T>(g.alpha)),
        beta(static_cast<T>(g.beta)),
        relu(g.relu),
        C(g.C),
        c_type(g.c_type),
        ldc(g.ldc) {
    if (g.bias == nullptr) return;
    bias.resize(static_cast<size_t>(g.N));
    for (int64_t j = 0; j < g.N; ++j) {
      switch (g.bias_type) {
        case DType::f16: bias[j] = widen<T>(static_cast<const half*>(g.bias)[j]); break;
        case DType::f64: bias[j] = static_cast<T>(static_cast<const double*>(g.bias)[j]); break;
        default: bias[j] = static_cast<T>(static_cast<const float*>(g.bias)[j]); break;
      }
    }
  }

  // Store the m x n block acc (row stride ld_acc) at C[i0.., j0..].
  void store(int64_t i0, int64_t j0, int64_t m, int64_t n, const T* acc, int64_t ld_acc) const {
    // gemm() pairs f64 accumulation with an f64 output only, and f32 with f16 or f32.
    if constexpr (std::is_same_v<T, double>) {
      store_as<double>(i0, j0, m, n, acc, ld_acc);
    } else if (c_type == DType::f16) {
      store_as<half>(i0, j0, m, n, acc, ld_acc);
    } else {
      store_as<float>(i0, j0, m, n, acc, ld_acc);
    }
  }

 private:
  // One row of the block: the tests on beta, bias and relu are template flags, so that each of the
  // loops below is branch-free and vectorizes (the version that tested them per element cost as much
  // as the multiply-adds themselves for the small-K products of a convolution, K = 25 in LeNet).
  template <bool kBeta, bool kBias, bool kRelu, class CT>
  void store_row(CT* __restrict c, const T* __restrict acc, const T* __restrict b, int64_t n) const {
    for (int64_t j = 0; j < n; ++j) {
      T v = alpha * acc[j];
      if constexpr (kBeta) v += beta * widen<T>(c[j]);
      if constexpr (kBias) v += b[j];
      // ReLU as everywhere else: x > 0 or NaN keeps x (loss scaling must see a NaN), the rest is +0.
      if constexpr (kRelu) v = cpu::select((v > T(0)) | (v != v), v, T(0));
      c[j] = narrow<CT>(v);
    }
  }

  template <bool kBeta, bool kBias, bool kRelu, class CT>
  void store_rows(int64_t i0, int64_t j0, int64_t m, int64_t n, const T* acc, int64_t ld_acc) const {
    const T* b = kBias ? bias.data() + j0 : nullptr;
    for (int64_t i = 0; i < m; ++i)
      store_row<kBeta, kBias, kRelu>(static_cast<CT*>(C) + (i0 + i) * ldc + j0, acc + i * ld_acc, b, n);
  }

  template <class CT>
  void store_as(int64_t i0, int64_t j0, int64_t m, int64_t n, const T* acc, int64_t ld_acc) const {
    const bool has_beta = beta != T(0), has_bias = !bias.empty();
    // 8 combinations of the flags, each its own loop.
    const auto go = [&](auto kb, auto kbias, auto kr) {
      store_rows<decltype(kb)::value, decltype(kbias)::value, decltype(kr)::value, CT>(i0, j0, m, n, acc, ld_acc);
    };
    using F = std::false_type;
    using Tr = std::true_type;
    if (has_beta) {
      if (has_bias) {
        relu ? go(Tr{}, Tr{}, Tr{}) : go(Tr{}, Tr{}, F{});
      } else {
        relu ? go(Tr{}, F{}, Tr{}) : go(Tr{}, F{}, F{});
      }
    } else {
      if (has_bias) {
        relu ? go(F{}, Tr{}, Tr{}) : go(F{}, Tr{}, F{});
      } else {
        relu ? go(F{}, F{}, Tr{}) : go(F{}, F{}, F{});
      }
    }
  }
};

const char* unsupported_dtypes(const GemmArgs& g) {
  const auto ok = [](DType t) { return t == DType::f16 || t == DType::f32 || t == DType::f64; };
  if (!ok(g.ab_type) || !ok(g.c_type)) return "the CPU computes f16, f32 and f64 only";
  return nullptr;
}

// Call f(S{}) with S the C++ type of the inputs.
template <class F>
void visit_input_type(DType t, F&& f) {
  switch (t) {
    case DType::f16: return f(half{});
    case DType::f64: return f(double{});
    default: return f(float{});
  }
}

// ================================================================================================
// reference: the definition, written to be read, not to be fast
// ================================================================================================
//
// One dot product per element of C, accumulated in order k = 0..K-1 in acc_t (f32 for f16 inputs,
// exactly as a Tensor Core with an FP32 accumulator fragment does, paper §3.3). The inputs are
// widened once up front (exactly; f16 through hl::half's own conversion) into op(A) and op(B)^T, so
// that the dot product reads both along k whatever the layout.
template <class S>
void reference_typed(const GemmArgs& g) {
  using T = acc_t<S>;
  const int64_t M = g.M, N = g.N, K = g.K;
  const S* A = static_cast<const S*>(g.A);
  const S* B = static_cast<const S*>(g.B);
  std::vector<T> a(static_cast<size_t>(M * K)), bt(static_cast<size_t>(N * K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      a[i * K + k] = static_cast<T>(g.op_a == Op::N ? A[i * g.lda + k] : A[k * g.lda + i]);
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k)
      bt[j * K + k] = static_cast<T>(g.op_b == Op::N ? B[k * g.ldb + j] : B[j * g.ldb + k]);

  const Epilogue<T> epilogue(g);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += a[i * K + k] * bt[j * K + k];
      epilogue.store(i, j, 1, 1, &acc, 1);
    }
  }
}

void reference_run(const GemmArgs& g) {
  visit_input_type(g.ab_type, [&](auto tag) { reference_typed<decltype(tag)>(g); });
}

HL_REGISTER_VARIANT(GemmArgs, {"reference", DeviceType::cpu, 0, "triple loop, f32 accumulation (the definition)",
                               reference_run, unsupported_dtypes});

// ================================================================================================
// blocked: the CPU fast path
// ================================================================================================
//
// The classic recipe of high-performance CPU GEMM (Goto & van de Geijn, "Anatomy of high-performance
// matrix multiplication", 2008; BLIS):
//
//   for each panel of up to nc columns of op(B):
//     pack the whole panel (all of K) into NR-wide slivers, widened to f32     (shared, L3)
//     in parallel, for every task = (block of mc rows) x (block of nt columns):
//       for each block of kc steps of K:
//         pack the task's mc x kc block of op(A) into MR-tall slivers          (private, L2)
//         for every B sliver, for every A sliver:                              (B sliver: L1)
//           micro-kernel: an MR x NR tile of C kept in registers, kc rank-1 updates
//
// Packing turns every layout (N/T, any lda) and every input type into one contiguous stream in the
// accumulation type (f16 -> f32 is exact), so one micro-kernel serves them all. Slivers at the edges
// are padded with zeros; the padded part of a tile is computed and thrown away. A task owns its block
// of C for the whole K loop: partial sums wait in a private f32 buffer and the epilogue runs once
// after the last kc block, so an f16 output is rounded exactly once.
//
// Tasks are independent, so the threads meet only twice per panel (after packing B, after the
// tasks) and are handed tasks dynamically: when another program takes a core away - common on a
// shared 2-core machine - the thread that still runs picks up the work instead of everyone waiting
// at a barrier for the one that was descheduled.

// ---- the micro-kernel ----------------------------------------------------------------------------
// An MR x NR tile of C lives in registers as MR x (NR / W) vectors of W lanes. Each step p reads one
// column of the A sliver (MR scalars) and one row of the B sliver (NR values) and does MR x NR
// multiply-adds: a rank-1 update, MR * NR / W vector FMAs for MR + NR / W loads.
//
// The vector type is GCC's portable vector extension (no intrinsics): the compiler picks the
// instructions for the target of the function that inlines this body (vfmadd231ps ymm for AVX2,
// zmm for AVX-512, NEON on ARM). With MR, NR and W compile-time constants the loops unroll fully
// and the accumulators never leave the registers.
template <class T, int MR, int NR, int W>
[[gnu::always_inline]] inline void micro_kernel_body(int64_t kc, const T* __restrict a, const T* __restrict b,
                                                     T* __restrict tile) {
  typedef T vec __attribute__((vector_size(W * sizeof(T))));
  constexpr int NV = NR / W;
  static_assert(NR % W == 0, "NR must be a whole number of vectors");
  vec acc[MR][NV] = {};
  for (int64_t p = 0; p < kc; ++p) {
    vec bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + p * NR + v * W, sizeof(vec));  // unaligned load
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const T ai = a[p * MR + i];  // broadcast
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];  // one FMA each
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) std::memcpy(tile + i * NR + v * W, &acc[i][v], sizeof(vec));
}

// One micro-kernel per instruction set, each with the tile shape that fills its register file:
//   AVX-512: 32 zmm registers of 16 floats -> 12 x 32 tile = 24 accumulators + 2 B vectors + 1 broadcast
//   AVX2:    16 ymm registers of  8 floats ->  6 x 16 tile = 12 accumulators + 2 + 1
//   portable: 128-bit vectors (SSE2 baseline, NEON) -> 4 x 8 tile = 8 accumulators
// The target attribute compiles just that function for the instruction set; the library stays
// runnable on any CPU because the choice is made at run time (cpu_has_* below) - the same idea as
// GCC's target_clones, but with a different tile shape per target.
template <class T_, int MR_, int NR_>
struct KernelShape {
  using T = T_;
  static constexpr int MR = MR_, NR = NR_;
};

struct PortableF32 : KernelShape<float, 4, 8> {
  static void run(int64_t kc, const float* a, const float* b, float* t) {
    micro_kernel_body<float, MR, NR, 4>(kc, a, b, t);
  }
};
struct PortableF64 : KernelShape<double, 4, 4> {
  static void run(int64_t kc, const double* a, const double* b, double* t) {
    micro_kernel_body<double, MR, NR, 2>(kc, a, b, t);
  }
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HL_GEMM_X86 1
struct Avx2F32 : KernelShape<float, 6, 16> {
  __attribute__((target("avx2,fma"))) static void run(int64_t kc, const float* a, const float* b, float* t) {
    micro_kernel_body<float, MR, NR, 8>(kc, a, b, t);
  }
};
struct Avx2F64 : KernelShape<double, 6, 8> {
  __attribute__((target("avx2,fma"))) static void run(int64_t kc, const double* a, const double* b, double* t) {
    micro_kernel_body<double, MR, NR, 4>(kc, a, b, t);
  }
};
struct Avx512F32 : KernelShape<float, 12, 32> {
  __attribute__((target("avx512f,fma"))) static void run(int64_t kc, const float* a, const float* b, float* t) {
    micro_kernel_body<float, MR, NR, 16>(kc, a, b, t);
  }
};
struct Avx512F64 : KernelShape<double, 12, 16> {
  __attribute__((target("avx512f,fma"))) static void run(int64_t kc, const double* a, const double* b, double* t) {
    micro_kernel_body<double, MR, NR, 8>(kc, a, b, t);
  }
};
// (__builtin_cpu_init makes the answer valid even when asked from a static initializer.)
bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}
#endif

// ---- cache blocking ------------------------------------------------------------------------------
// The block sizes and the budgets behind them are in kernels/cpu/gemm_cpu_plan.h (gemm_plan::blocking).
namespace gemm_plan = cpu::gemm_plan;
using gemm_plan::ceil_div;

// Scratch memory that grows and is kept, so a training loop does not page-fault fresh buffers on
// every step. One set per thread (the OpenMP workers live as long as the program); 64-byte aligned
// so packed slivers start on cache lines.
enum ScratchSlot { kPackedA, kPackedB, kPartialC, kScratchSlots };

template <class T>
T* scratch(ScratchSlot slot, int64_t count) {
  struct Buffer {
    struct Free {
      void operator()(T* p) const { ::operator delete[](p, std::align_val_t{64}); }
    };
    std::unique_ptr<T[], Free> data;
    int64_t capacity = 0;
  };
  thread_local Buffer buffers[kScratchSlots];
  Buffer& buf = buffers[slot];
  if (buf.capacity < count) {
    buf.data.reset(static_cast<T*>(::operator new[](static_cast<size_t>(count) * sizeof(T), std::align_val_t{64})));
    buf.capacity = count;
  }
  return buf.data.get();
}

// Packing copies a sliver out of the stored matrix in one of two ways:
//   - the stored rows run along the sliver's rows (op(A) = A^T, op(B) = B): one contiguous copy per
//     row of the sliver;
//   - the stored rows run along the sliver's columns (op(A) = A, op(B) = B^T): a transpose. It walks
//     K in chunks of 32 values, so the few lines of the sliver being written stay in L1 until every
//     stored row has filled its column of them, and widens each chunk into a small buffer first, so
//     the f16 -> f32 conversion always runs on contiguous data, vectorized.
constexpr int64_t kTransposeChunk = 32;

// f32 to f32 (the common case: no widening), a 4 x 4 block at a time in 128-bit vectors (GCC's vector
// extension: SSE2 on any x86-64, NEON on ARM): four row loads, eight shuffles, four stores of four
// consecutive sliver values, instead of sixteen scalar loads and stores. Returns the rows done (a
// multiple of 4); the caller copies the rest one value at a time. The values move, nothing is
// computed: the GEMM's results are the same bits either way.
using cpu::f32x4;

template <int R>
int64_t pack_transposed_4x4(const float* __restrict src, int64_t ld, int64_t rows, int64_t p0, int64_t len,
                            float* __restrict dst) {
  const int64_t rows4 = rows / 4 * 4, len4 = len / 4 * 4;
  for (int64_t r = 0; r < rows4; r += 4) {
    const float* s0 = src + r * ld + p0;
    for (int64_t p = 0; p < len4; p += 4) {
      f32x4 a, b, c, d;
      std::memcpy(&a, s0 + p, 16), std::memcpy(&b, s0 + ld + p, 16);
      std::memcpy(&c, s0 + 2 * ld + p, 16), std::memcpy(&d, s0 + 3 * ld + p, 16);
      const f32x4 ab_lo = __builtin_shufflevector(a, b, 0, 4, 1, 5), ab_hi = __builtin_shufflevector(a, b, 2, 6, 3, 7);
      const f32x4 cd_lo = __builtin_shufflevector(c, d, 0, 4, 1, 5), cd_hi = __builtin_shufflevector(c, d, 2, 6, 3, 7);
      const f32x4 col0 = __builtin_shufflevector(ab_lo, cd_lo, 0, 1, 4, 5);  // a[p] b[p] c[p] d[p]
      const f32x4 col1 = __builtin_shufflevector(ab_lo, cd_lo, 2, 3, 6, 7);
      const f32x4 col2 = __builtin_shufflevector(ab_hi, cd_hi, 0, 1, 4, 5);
      const f32x4 col3 = __builtin_shufflevector(ab_hi, cd_hi, 2, 3, 6, 7);
      float* o = dst + (p0 + p) * R + r;
      std::memcpy(o, &col0, 16), std::memcpy(o + R, &col1, 16);
      std::memcpy(o + 2 * R, &col2, 16), std::memcpy(o + 3 * R, &col3, 16);
    }
    for (int64_t p = len4; p < len; ++p)  // the chunk's last len % 4 columns
      for (int64_t i = 0; i < 4; ++i) dst[(p0 + p) * R + r + i] = s0[i * ld + p];
  }
  return rows4;
}

// dst[p * R + r] = src[r * ld + p] for r < rows, p < n.
template <class T, class S, int R>
void pack_transposed(const S* __restrict src, int64_t ld, int64_t rows, int64_t n, T* __restrict dst) {
  for (int64_t p0 = 0; p0 < n; p0 += kTransposeChunk) {
    const int64_t len = std::min(kTransposeChunk, n - p0);
    int64_t r = 0;
    if constexpr (std::is_same_v<S, float> && std::is_same_v<T, float>)
      r = pack_transposed_4x4<R>(src, ld, rows, p0, len, dst);
    for (; r < rows; ++r) {
      const S* row = src + r * ld + p0;
      if constexpr (std::is_same_v<S, T>) {
        for (int64_t p = 0; p < len; ++p) dst[(p0 + p) * R + r] = row[p];
      } else {
        T piece[kTransposeChunk];
        widen_run(row, piece, len);
        for (int64_t p = 0; p < len; ++p) dst[(p0 + p) * R + r] = piece[p];
      }
    }
  }
}

// Pack rows [i0, i0+m) x columns [p0, p0+kc) of op(A) as one MR-tall sliver: dst[p * MR + i].
template <class T, class S, int MR>
void pack_a_sliver(const GemmArgs& g, int64_t i0, int64_t m, int64_t p0, int64_t kc, T* __restrict dst) {
  const S* A = static_cast<const S*>(g.A);
  if (g.op_a == Op::N) {  // A[i][p]: stored rows are the sliver's columns
    pack_transposed<T, S, MR>(A + i0 * g.lda + p0, g.lda, m, kc, dst);
  } else {  // A[p][i]: stored rows are the sliver's rows
    for (int64_t p = 0; p < kc; ++p) widen_run(A + (p0 + p) * g.lda + i0, dst + p * MR, m);
  }
  // Zero the padding rows (their results are discarded; zeros keep them finite and cheap).
  for (int64_t p = 0; p < kc; ++p)
    for (int64_t i = m; i < MR; ++i) dst[p * MR + i] = T(0);
}

// Pack rows [p0, p0+kc) x columns [j0, j0+n) of op(B) as one NR-wide sliver: dst[p * NR + j].
template <class T, class S, int NR>
void pack_b_sliver(const GemmArgs& g, int64_t p0, int64_t kc, int64_t j0, int64_t n, T* __restrict dst) {
  const S* B = static_cast<const S*>(g.B);
  if (g.op_b == Op::N && n == NR && std::is_same_v<S, T>) {
    // A whole sliver row of the same type: a copy of constant size, which the compiler inlines as a
    // few vector moves (the loop below becomes a call to memmove per row: 8% of LeNet's CPU time).
    for (int64_t p = 0; p < kc; ++p) std::memcpy(dst + p * NR, B + (p0 + p) * g.ldb + j0, NR * sizeof(T));
  } else if (g.op_b == Op::N) {  // B[p][j]: stored rows are the sliver's rows
    for (int64_t p = 0; p < kc; ++p) widen_run(B + (p0 + p) * g.ldb + j0, dst + p * NR, n);
  } else {  // B[j][p]: stored rows are the sliver's columns
    pack_transposed<T, S, NR>(B + j0 * g.ldb + p0, g.ldb, n, kc, dst);
  }
  for (int64_t p = 0; p < kc; ++p)
    for (int64_t j = n; j < NR; ++j) dst[p * NR + j] = T(0);
}

template <class S, class Kernel>
void blocked_typed(const GemmArgs& g) {
  using T = typename Kernel::T;
  static_assert(std::is_same_v<T, acc_t<S>>, "the kernel computes in the accumulation type of the inputs");
  constexpr int MR = Kernel::MR;
  constexpr int NR = Kernel::NR;
  const int64_t M = g.M, N = g.N, K = g.K;

  const gemm_plan::Blocking plan = gemm_plan::blocking(M, N, K, MR, NR);
  const int64_t kc_step = plan.kc_step, k_blocks = plan.k_blocks, mc_step = plan.mc_step, m_tasks = plan.m_tasks;
  const int64_t nt_step = plan.nt_step, nc_step = plan.nc_step;

  // The packed panel of op(B): for each kc block, nc / NR slivers of kc x NR, one after another.
  T* b_pack = scratch<T>(kPackedB, plan.packed_b);
  const Epilogue<T> epilogue(g);

#pragma omp parallel if (plan.parallel && !omp_in_parallel())  // a conv may run one GEMM per thread
  {
    T* a_pack = scratch<T>(kPackedA, mc_step * kc_step);
    T* partial = k_blocks > 1 ? scratch<T>(kPartialC, mc_step * nt_step) : nullptr;

    for (int64_t jc = 0; jc < N; jc += nc_step) {
      const int64_t nc = std::min(nc_step, N - jc);
      const int64_t n_slivers = ceil_div(nc, NR);
      const auto b_sliver = [&](int64_t pc, int64_t kc, int64_t s) {
        return b_pack + pc * n_slivers * NR + s * kc * NR;
      };

#pragma omp for collapse(2) schedule(dynamic, 4)
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        for (int64_t s = 0; s < n_slivers; ++s) {
          const int64_t pc = kb * kc_step, kc = std::min(kc_step, K - pc);
          pack_b_sliver<T, S, NR>(g, pc, kc, jc + s * NR, std::min<int64_t>(NR, nc - s * NR), b_sliver(pc, kc, s));
        }
      }  // implicit barrier: the panel is complete

      const int64_t n_tasks = ceil_div(nc, nt_step);
#pragma omp for collapse(2) schedule(dynamic, 1)
      for (int64_t mt = 0; mt < m_tasks; ++mt) {
        for (int64_t nt = 0; nt < n_tasks; ++nt) {
          const int64_t ic = mt * mc_step, mc = std::min(mc_step, M - ic);
          const int64_t jt = nt * nt_step, ntw = std::min(nt_step, nc - jt);  // task columns, relative to jc
          for (int64_t kb = 0; kb < k_blocks; ++kb) {
            const int64_t pc = kb * kc_step, kc = std::min(kc_step, K - pc);
            const bool first = kb == 0, last = kb == k_blocks - 1;
            for (int64_t r = 0; r * MR < mc; ++r)
              pack_a_sliver<T, S, MR>(g, ic + r * MR, std::min<int64_t>(MR, mc - r * MR), pc, kc, a_pack + r * MR * kc);

            for (int64_t y = 0; y < ntw; y += NR) {  // B sliver outermost: it stays in L1
              for (int64_t x = 0; x < mc; x += MR) {
                alignas(64) T tile[MR * NR];
                Kernel::run(kc, a_pack + x * kc, b_sliver(pc, kc, (jt + y) / NR), tile);

                const int64_t m = std::min<int64_t>(MR, mc - x), n = std::min<int64_t>(NR, ntw - y);  // edges
                if (k_blocks > 1) {
                  T* part = partial + x * nt_step + y;  // this tile's sum over the earlier kc blocks
                  if (!first)
                    for (int64_t i = 0; i < m; ++i)
                      for (int64_t j = 0; j < n; ++j) tile[i * NR + j] += part[i * nt_step + j];
                  if (!last) {
                    for (int64_t i = 0; i < m; ++i)
                      for (int64_t j = 0; j < n; ++j) part[i * nt_step + j] = tile[i * NR + j];
                    continue;
                  }
                }
                epilogue.store(ic + x, jc + jt + y, m, n, tile, NR);
              }
            }
          }
        }
      }  // implicit barrier: the next panel may overwrite b_pack
    }
  }
}

// ---- the variants ------------------------------------------------------------------------------
// "blocked" runs the widest micro-kernel this CPU has. The same driver pinned to one instruction set
// is registered too, below it in priority: the tests then cover every micro-kernel the CPU can run
// (not only the one "blocked" picks), and a benchmark shows what each vector width buys.
enum class Isa { portable, avx2, avx512 };

bool cpu_supports(Isa isa) {
  switch (isa) {
#if defined(HL_GEMM_X86)
    case Isa::avx512: return cpu_has_avx512();
    case Isa::avx2: return cpu_has_avx2();
#else
    case Isa::avx512:
    case Isa::avx2: return false;
#endif
    case Isa::portable: return true;
  }
  return false;
}

Isa best_isa() {
  static const Isa isa = cpu_supports(Isa::avx512) ? Isa::avx512 : cpu_supports(Isa::avx2) ? Isa::avx2 : Isa::portable;
  return isa;
}

template <class S>
void blocked_isa(const GemmArgs& g, Isa isa) {
  constexpr bool f64 = std::is_same_v<S, double>;
  switch (isa) {
#if defined(HL_GEMM_X86)
    case Isa::avx512: return blocked_typed<S, std::conditional_t<f64, Avx512F64, Avx512F32>>(g);
    case Isa::avx2: return blocked_typed<S, std::conditional_t<f64, Avx2F64, Avx2F32>>(g);
#endif
    default: return blocked_typed<S, std::conditional_t<f64, PortableF64, PortableF32>>(g);
  }
}

void run_with(const GemmArgs& g, Isa isa) {
  visit_input_type(g.ab_type, [&](auto tag) { blocked_isa<decltype(tag)>(g, isa); });
}

template <Isa isa>
void blocked_pinned_run(const GemmArgs& g) {
  run_with(g, isa);
}

template <Isa isa>
const char* blocked_pinned_unsupported(const GemmArgs& g) {
  // The arguments first: a call no CPU could run should say why on every machine, not only on those
  // that happen to have the instructions.
  if (const char* why = unsupported_dtypes(g)) return why;
  if (!cpu_supports(isa)) return isa == Isa::avx512 ? "this CPU has no AVX-512" : "this CPU has no AVX2/FMA";
  return nullptr;
}

HL_REGISTER_VARIANT(GemmArgs, {"blocked", DeviceType::cpu, 10,
                               "packed panels, register-tiled micro-kernel (the widest this CPU has), OpenMP",
                               [](const GemmArgs& g) { run_with(g, best_isa()); }, unsupported_dtypes});
HL_REGISTER_VARIANT(GemmArgs, {"blocked_avx512", DeviceType::cpu, 3, "blocked with the 12x32 AVX-512 micro-kernel",
                               blocked_pinned_run<Isa::avx512>, blocked_pinned_unsupported<Isa::avx512>});
HL_REGISTER_VARIANT(GemmArgs, {"blocked_avx2", DeviceType::cpu, 2, "blocked with the 6x16 AVX2/FMA micro-kernel",
                               blocked_pinned_run<Isa::avx2>, blocked_pinned_unsupported<Isa::avx2>});
HL_REGISTER_VARIANT(GemmArgs, {"blocked_portable", DeviceType::cpu, 1,
                               "blocked with the 4x8 micro-kernel in baseline 128-bit vectors (SSE2, NEON)",
                               blocked_pinned_run<Isa::portable>, unsupported_dtypes});

}  // namespace
}  // namespace hl::kernels
