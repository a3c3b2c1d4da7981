// Softmax ladder, rung 2e: "cluster_row" — one row over a cluster of blocks, read once into registers.
//
// What changes from `register_row`: a row is cut into G contiguous chunks (G = 2, 4 or 8), one per
// block of a thread-block cluster (Hopper, compute capability 9.0). Each block keeps its chunk in
// registers exactly as register_row keeps a whole row (register_row.cuh: load once as FP32, write
// from the registers), reduces its chunk's maximum and sum of exponentials, and publishes them in
// its shared memory; every block of the cluster then reads the G values from the others' shared
// memory (distributed shared memory: cluster.map_shared_rank) and adds them in rank order, so all
// blocks hold the same row statistics, bit for bit, without a trip through global memory. The row
// is still read once and written once, as a copy moves it.
//
// Why: two shapes of the H200 run (bench/results/softmax_register_row_nvidia_h200_2026-11-23.txt)
// miss issue #6's 80% of the copy bandwidth. At 128x65536 a row is too long for one block's
// registers, so block_row reads it three times, with 128 blocks for 132 SMs: one block of 512
// threads per SM (46% of copy). Here the same rows are 128 clusters of 8 blocks of 256 threads,
// which read each value once; the registers hold at most about two such blocks per SM at a time
// (ptxas: up to 124 registers per thread), so the 1024 blocks run in about four waves. At 1024x32768
// register_row gives each row one 1024-thread block that waits at two 32-warp barriers (64%); here 4
// blocks of 256 threads share a row and each waits only for its own 8 warps and the cluster's
// barriers. Prediction, to be measured: both shapes nearer the
// copy; for rows that register_row or register_warp already cover well (4096 columns and fewer) the
// cluster's three barriers per row cost more than they give, so they are left to those rungs.
// Measured on an H200 (2026-11-26, after its tests and the sanitizers passed;
// bench/results/gpu_short_nvidia_h200_2026-11-26.txt), the prediction failed: 128x65536 f16 took
// 31.4 us (22% of copy) against block_row's 15.0, and 1024x32768 93.6 us (37%) against
// register_row's 53.8. It is correct, and slower everywhere it was timed, so it stays opt-in (chosen
// only by name: --softmax cluster_row or HALFLING_SOFTMAX), a rung to learn from, not to train with.
// Why it is slower is the next question: the cluster barriers per row, and blocks that each hold a
// row chunk too small to hide the latency of the distributed-shared-memory exchange, are the suspects.
//
// The cluster's barriers: after the maxima are published, after the sums are published, and at the
// end of each row, so that no block overwrites its published values (next row) or leaves (its shared
// memory would vanish) while another block may still read them. Every block of a cluster takes the
// same rows (they follow the cluster's index), so all reach every barrier.
//
// Paper §3.3: FP32 math on FP16 storage: every value is widened to FP32 on load; max, sum, exp and
// the normalization are FP32; the result is rounded once, on the store.
#include <cooperative_groups.h>

#include <algorithm>

#include "kernels/cuda/softmax/register_row.cuh"
#include "kernels/cuda/softmax/register_row_plan.h"

namespace hl::kernels::cuda {

namespace {

using namespace softmax_detail;
namespace plan_ns = hl::kernels::register_row;
namespace cg = cooperative_groups;

constexpr int kMaxThreads = plan_ns::cluster::kMaxThreads;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // cooperative_groups has clusters from sm_90 on
// This block's chunk of the row: columns [begin, begin + len), len possibly 0 for the last blocks.
struct Chunk {
  int begin, len;
};
__device__ __forceinline__ Chunk chunk_of(int cols, int chunk, int rank) {
  const int begin = rank * chunk;
  return {begin, begin >= cols ? 0 : min(chunk, cols - begin)};
}

// The cluster's combination of one value per block (published by thread 0 of each block in `slot`),
// in rank order: every block computes the same result from the same values in the same order.
// The caller separates the publish from this read with cluster.sync().
template <class Op>
__device__ __forceinline__ float cluster_combine(cg::cluster_group& cluster, float* slot, float init, Op op) {
  float acc = init;
  for (unsigned k = 0; k < cluster.num_blocks(); ++k) acc = op(acc, *cluster.map_shared_rank(slot, k));
  return acc;
}
#endif

// The cluster's reductions for register_forward_row / register_backward_row (register_row.cuh): the
// block reduces its members' values, thread 0 publishes the block's value in `slot`, and after the
// cluster barrier every block combines the G published values in rank order.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
template <class Op>
__device__ __forceinline__ float cluster_reduce(cg::cluster_group& cluster, float block_value, float* slot, float init,
                                                Op op) {
  if (threadIdx.x == 0) *slot = block_value;
  cluster.sync();
  return cluster_combine(cluster, slot, init, op);
}
#endif

template <int P, int N, class TX, class TY>
__global__ void __launch_bounds__(kMaxThreads) cluster_row_forward_kernel(int64_t rows, int cols, int chunk,
                                                                          const TX* x, TY* y, bool log) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float published_max, published_sum;
  const BlockGroup g;
  const Chunk c = chunk_of(cols, chunk, static_cast<int>(cluster.block_rank()));
  const int owned = packs_owned(c.len / N, g.rank(), g.size());  // the packed path needs cols, chunk % N == 0
  // fmaxf ignores NaN, as in register_row; a NaN entry poisons its block's sum, and so the row's.
  const auto row_max = [&](float v) {
    return cluster_reduce(cluster, g.max(v), &published_max, -INFINITY, [](float a, float b) { return fmaxf(a, b); });
  };
  const auto row_sum = [&](float v) {
    return cluster_reduce(cluster, g.sum(v), &published_sum, 0.0f, [](float a, float b) { return a + b; });
  };
  const int64_t blocks = cluster.num_blocks();
  for (int64_t r = blockIdx.x / blocks; r < rows; r += gridDim.x / blocks) {
    register_forward_row<P, N>(g, x + r * cols + c.begin, y + r * cols + c.begin, owned, log, row_max, row_sum);
    cluster.sync();  // the published values are read; they may now change, and the block may exit
  }
#endif
}

// log-softmax backward, gx = dy - exp(y) * sum(dy): register_backward_row's scheme (the chunk of dy
// kept in registers for the sum and the write, y read once), the sum over the cluster.
template <int P, int N, class TY, class TG>
__global__ void __launch_bounds__(kMaxThreads) cluster_row_backward_kernel(int64_t rows, int cols, int chunk,
                                                                           const TY* y, const TY* dy, TG* gx) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float published_sum;
  const BlockGroup g;
  const Chunk c = chunk_of(cols, chunk, static_cast<int>(cluster.block_rank()));
  const int owned = packs_owned(c.len / N, g.rank(), g.size());
  const auto row_sum = [&](float v) {
    return cluster_reduce(cluster, g.sum(v), &published_sum, 0.0f, [](float a, float b) { return a + b; });
  };
  const int64_t blocks = cluster.num_blocks();
  for (int64_t r = blockIdx.x / blocks; r < rows; r += gridDim.x / blocks) {
    const int64_t base = r * cols + c.begin;
    register_backward_row<P, N>(g, y + base, dy + base, gx + base, owned, row_sum);
    cluster.sync();  // as in the forward kernel
  }
#endif
}

// Launch with N values per access (kVec<TX> on the packed path, 1 on the scalar path): a grid of
// whole clusters of p.blocks blocks, one cluster per row (stepping over further rows past 65535
// blocks), through cudaLaunchKernelEx, which takes the cluster size at run time.
template <int N, class TX, class TY>
void launch(const SoftmaxArgs& a, const TX* x, TY* y) {
  const plan_ns::cluster::Plan p = plan_ns::cluster::plan(a.cols, N);
  HL_CHECK(p.blocks > 0, "cluster_row: no plan for ", a.describe());  // unsupported() rules this out
  const int64_t clusters = std::min<int64_t>(a.rows, kMaxGrid / p.blocks);
  const ClusterLaunch grid(dim3(static_cast<unsigned>(clusters * p.blocks)),
                           dim3(static_cast<unsigned>(p.block.threads)), 0, dim3(static_cast<unsigned>(p.blocks)));
  const int cols = static_cast<int>(a.cols);
  with_per_thread<plan_ns::compiled_for, N>("cluster_row", p.block.per_thread, [&](auto pc) {
    constexpr int P = decltype(pc)::value;
    if (a.op == SoftmaxOp::log_softmax_backward) {
      // The status is left for HL_LAUNCH_CHECK (ClusterLaunch says why).
      (void)cudaLaunchKernelEx(&grid.config, cluster_row_backward_kernel<P, N, TX, TY>, a.rows, cols, p.chunk, x,
                               static_cast<const TX*>(a.dy), y);
      HL_LAUNCH_CHECK("cluster_row_backward_kernel");
    } else {
      (void)cudaLaunchKernelEx(&grid.config, cluster_row_forward_kernel<P, N, TX, TY>, a.rows, cols, p.chunk, x, y,
                               a.op == SoftmaxOp::log_softmax);
      HL_LAUNCH_CHECK("cluster_row_forward_kernel");
    }
  });
}

void run(const SoftmaxArgs& a) {
  run_by_width(a, [&](auto n, const auto* x, auto* y) { launch<decltype(n)::value>(a, x, y); });
}

static_assert(plan_ns::cluster::max_cols(8) == 131072 && plan_ns::cluster::max_cols(4) == 65536 &&
                  plan_ns::cluster::max_cols(1) == 65536,
              "update the message below");

const char* unsupported(const SoftmaxArgs& a) {
  if (a.op != SoftmaxOp::softmax && a.op != SoftmaxOp::log_softmax && a.op != SoftmaxOp::log_softmax_backward)
    return "cluster_row computes softmax and log-softmax (cross-entropy: fused_xent)";
  if (const char* why = unsupported_types(a)) return why;
  // An empty row (cols == 0) has no plan but nothing to do either: softmax() returns before running
  // any variant, and this one must not refuse it where every other rung accepts it.
  if (a.cols > 0 && plan_ns::cluster::plan(a.cols, path_width(a)).blocks == 0)
    return "cluster_row keeps a row in the registers of a cluster of up to 8 blocks: at most 131072 columns for "
           "FP16 rows of whole 16-byte packs, 65536 for FP32 rows and for the scalar path (rows not a whole "
           "number of packs, misaligned buffers); longer rows run in online";
  const int cc = runtime::cuda_compute_capability();  // cached; 0 without a GPU
  if (cc != 0 && cc < 90) return "cluster_row needs compute capability 9.0 or newer (thread-block clusters)";
  // The kernels' bodies exist only where they were compiled for sm_90 or newer; a build without such
  // code would run their empty versions by JIT and leave the output unwritten (as mma_sync checks).
  if (cc == 0) return nullptr;  // no GPU: nothing is loaded, nothing would run
  static const int loaded_arch = loaded_ptx_version(cluster_row_forward_kernel<1, 8, __half, __half>);
  if (loaded_arch != 0 && loaded_arch < 90)
    return "this build has no code for compute capability 9.0 or newer, which cluster_row needs (add 90 to "
           "CMAKE_CUDA_ARCHITECTURES)";
  return nullptr;
}

}  // namespace

// opt_in although verified: slower than block_row and register_row wherever it was timed (the header).
// Promote it (clear opt_in, add it to the chooser in kernels/softmax.cpp) only for shapes where
// bench/softmax_bench shows it faster.
HL_REGISTER_VARIANT(SoftmaxArgs, {"cluster_row", DeviceType::cuda, 33,
                                  "a cluster of 2-8 blocks per row (Hopper), the row read once into registers, "
                                  "statistics combined in distributed shared memory",
                                  run, unsupported, /*opt_in=*/true});

}  // namespace hl::kernels::cuda
