// GEMM ladder, rung 3: "wmma" — Tensor Cores through nvcuda::wmma, one warp per 16 x 16 tile of C.
//
// What changes from rung 2 (smem_tiled): the multiply-add moves from the FP32 units to the Tensor
// Cores. A warp holds a 16 x 16 slice of op(A), a 16 x 16 slice of op(B) and a 16 x 16 FP32
// accumulator as "fragments" (registers spread over its 32 threads) and one mma_sync does all
// 16 x 16 x 16 = 4096 multiply-adds. This is paper §3.3 in hardware: FP16 products, accumulated in
// an FP32 fragment, rounded to FP16 (if C is f16) only when the result is written.
//
// What it deliberately does not do yet: every warp loads its fragments straight from global memory
// (load_matrix_sync with the matrix's own leading dimension), so the 4 warps of a block that share
// rows of A load them separately, and there is no shared-memory reuse at all. The Tensor Cores are
// far faster than the memory feeding them here; the next rung (wmma_smem) fixes the feeding.
//
// Edges and alignment: a fragment load from global memory needs a 32-byte aligned address and a
// leading dimension that is a multiple of 8 halves, and a whole 16 x 16 slice inside the matrix. When
// a slice hangs over an edge of op(A)/op(B) (any M, N, K that is not a multiple of 16), or the
// matrix is not aligned, the warp first copies the slice into a small shared-memory tile element by
// element, zero outside the matrix, and loads the fragment from there (the scalar fallback is
// inside the kernel, so this rung accepts any alignment). The accumulator goes through a per-warp
// shared-memory tile on the way out, so the epilogue (alpha, beta, bias, ReLU, rounding) can check
// m < M, n < N per element.
//
// f16 inputs only: f32 inputs get a clear "unsupported" and the registry falls back to
// smem_tiled_split_k (smem_tiled's kernel, split along K where that pays).
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

using namespace nvcuda;

constexpr int kWarpsM = 2, kWarpsN = 2;  // 4 warps per block, each owning one 16 x 16 tile of C
constexpr int kThreads = 32 * kWarpsM * kWarpsN;

// Storage layout of op(A) and op(B) as wmma names it. op_a == N: A is stored M x K row by row
// (row_major); op_a == T: A is stored K x M, so op(A)[m][k] sits at k * lda + m (col_major).
// op_b == N: B stored K x N (row_major); op_b == T: B stored N x K (col_major).
template <Op op>
using LayoutOf = std::conditional_t<op == Op::N, wmma::row_major, wmma::col_major>;

// Copy the 16 x 16 slice of a stored matrix starting at (r0, c0) into `tile` (row stride 16), zero
// outside rows x cols: the edge path. 32 lanes, 8 elements each.
__device__ __forceinline__ void stage_slice(__half* tile, const __half* p, int64_t ld, int64_t rows, int64_t cols,
                                            int64_t r0, int64_t c0, int lane) {
  for (int e = lane; e < 16 * 16; e += 32) {
    const int r = e / 16, c = e % 16;
    const int64_t gr = r0 + r, gc = c0 + c;
    tile[e] = gr < rows && gc < cols ? p[gr * ld + gc] : __float2half(0.0f);
  }
}

template <Op op_a, Op op_b>
__global__ void __launch_bounds__(kThreads) gemm_wmma_kernel(GemmArgs g, bool a_direct, bool b_direct) {
  // Per-warp staging for the edge path and for the accumulator on its way out. load/store_matrix_sync
  // need 32-byte aligned shared-memory addresses.
  __shared__ __align__(32) __half a_tile[kWarpsM * kWarpsN][16 * 16];
  __shared__ __align__(32) __half b_tile[kWarpsM * kWarpsN][16 * 16];
  __shared__ __align__(32) float c_tile[kWarpsM * kWarpsN][16 * 16];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t m0 = (static_cast<int64_t>(blockIdx.y) * kWarpsM + warp / kWarpsN) * 16;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarpsN + warp % kWarpsN) * 16;
  if (m0 >= g.M || n0 >= g.N) return;  // a whole warp outside C (no block-wide barrier follows)

  const __half* A = static_cast<const __half*>(g.A);
  const __half* B = static_cast<const __half*>(g.B);
  // Stored shapes: A is M x K (op N) or K x M (op T); B is K x N (op N) or N x K (op T).
  const int64_t a_rows = op_a == Op::N ? g.M : g.K, a_cols = op_a == Op::N ? g.K : g.M;
  const int64_t b_rows = op_b == Op::N ? g.K : g.N, b_cols = op_b == Op::N ? g.N : g.K;

  // The three fragments, in plain view: FP16 inputs, FP32 accumulator (paper §3.3).
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, LayoutOf<op_a>> a_frag;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, LayoutOf<op_b>> b_frag;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);

  for (int64_t k0 = 0; k0 < g.K; k0 += 16) {
    // op(A)[m0.., k0..] starts at stored (m0, k0) for N, (k0, m0) for T; likewise for B.
    const int64_t ar = op_a == Op::N ? m0 : k0, ac = op_a == Op::N ? k0 : m0;
    const int64_t br = op_b == Op::N ? k0 : n0, bc = op_b == Op::N ? n0 : k0;
    if (a_direct && ar + 16 <= a_rows && ac + 16 <= a_cols) {
      wmma::load_matrix_sync(a_frag, A + ar * g.lda + ac, static_cast<unsigned>(g.lda));
    } else {
      stage_slice(a_tile[warp], A, g.lda, a_rows, a_cols, ar, ac, lane);
      __syncwarp();
      wmma::load_matrix_sync(a_frag, a_tile[warp], 16);
    }
    if (b_direct && br + 16 <= b_rows && bc + 16 <= b_cols) {
      wmma::load_matrix_sync(b_frag, B + br * g.ldb + bc, static_cast<unsigned>(g.ldb));
    } else {
      stage_slice(b_tile[warp], B, g.ldb, b_rows, b_cols, br, bc, lane);
      __syncwarp();
      wmma::load_matrix_sync(b_frag, b_tile[warp], 16);
    }
    wmma::mma_sync(acc, a_frag, b_frag, acc);  // acc += a * b on the Tensor Cores
    __syncwarp();  // the staging tiles are free for the next step
  }

  wmma::store_matrix_sync(c_tile[warp], acc, 16, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < 16 * 16; e += 32) {
    const int64_t m = m0 + e / 16, n = n0 + e % 16;
    if (m < g.M && n < g.N) gemm_detail::epilogue_store(g, m, n, c_tile[warp][e]);
  }
}

// A fragment load from global memory needs a 32-byte aligned start and ld a multiple of 8 halves.
// Slices start at multiples of 16 rows and 16 columns: with ld % 8 == 0 a step of 16 rows moves a
// multiple of 256 bytes and a step of 16 columns moves 32 bytes, so a 32-byte aligned base pointer
// keeps every slice start aligned. load_matrix_sync takes ld as an unsigned int, so a row stride of
// 2^32 or more (a matrix of at least 120 GiB, but possible) would be cut short. Otherwise the whole
// matrix takes the staged (scalar) path.
bool direct_ok(const void* p, int64_t ld) {
  return reinterpret_cast<uintptr_t>(p) % 32 == 0 && ld % 8 == 0 && ld <= int64_t{UINT32_MAX};
}

template <Op op_a, Op op_b>
void launch(const GemmArgs& g) {
  const dim3 grid(gemm_detail::blocks_for(g.N, 16 * kWarpsN), gemm_detail::blocks_for(g.M, 16 * kWarpsM));
  gemm_wmma_kernel<op_a, op_b><<<grid, kThreads, 0, stream()>>>(g, direct_ok(g.A, g.lda), direct_ok(g.B, g.ldb));
  HL_LAUNCH_CHECK("gemm_wmma_kernel");
}

void run(const GemmArgs& g) {
  gemm_detail::check_grid_y(g, 16 * kWarpsM, "wmma");
  if (g.op_a == Op::N) {
    g.op_b == Op::N ? launch<Op::N, Op::N>(g) : launch<Op::N, Op::T>(g);
  } else {
    g.op_b == Op::N ? launch<Op::T, Op::N>(g) : launch<Op::T, Op::T>(g);
  }
}

const char* unsupported(const GemmArgs& g) { return gemm_detail::unsupported_wmma(g); }

}  // namespace

HL_REGISTER_VARIANT(GemmArgs, {"wmma", DeviceType::cuda, 30,
                               "Tensor Cores (WMMA 16x16x16, FP32 accumulator), one warp per 16x16 tile, loads from "
                               "global",
                               run, unsupported});

}  // namespace hl::kernels::cuda
