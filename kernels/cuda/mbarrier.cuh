// mbarriers and thread-block clusters as inline PTX (sm_90): the hand-off between the roles of rung 8
// (gemm/wgmma_tma.cu: the TMA unit, a producer warpgroup and two consumer warpgroups) and between the
// blocks of wmma_pipelined's cluster tiles (gemm/wmma_pipelined.cu, gemm/cluster_share.h: blocks
// that fill each other's shared memory). Every definition sits under __CUDA_ARCH__ >= 900, so a file
// includes this unconditionally and guards the kernel bodies that call it the same way.
//
// An mbarrier is a 64-bit object in shared memory that counts arrivals and, separately, bytes of
// asynchronous transactions (the TMA unit's copies, a peer block's st.async); a phase completes when
// both counts reach zero, and then the next phase starts with the same arrival count. A waiter names
// the phase by its parity (ring_phases.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hl::kernels::cuda::mbarrier_ops {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(uint32_t bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// One of the expected arrivals, and `bytes` more of transactions that must land before the phase can
// complete (the copy engine's boxes, or a peer's st.async).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// kCluster: acquire at cluster scope, for a phase that a peer block's writes completed (st.async), so
// that those writes are visible to this thread once the wait succeeds. Otherwise the default, CTA scope.
template <bool kCluster = false>
__device__ __forceinline__ bool mbarrier_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  if constexpr (kCluster) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } else {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
  return done != 0;
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// Waits until the phase of the given parity has completed (ring_phases.h names which). try_wait
// itself suspends the thread for a while before it answers no, so the loop does not spin hot. A
// schedule that is wrong on the hardware would wait forever and take the whole test run (and a GPU
// session's budget) with it: after kHangNs the thread traps, which ends the kernel with a launch error
// instead. No correct run comes near it: a wait lasts as long as one copy or one K step of the other
// side, microseconds, or milliseconds under compute-sanitizer. (No printf to say where: any call in
// rung 8's kernel makes ptxas serialize its wgmma, "wgmma pipeline crossing function boundary".)
constexpr uint64_t kHangNs = 20'000'000'000ull;  // 20 s
template <bool kCluster = false>
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  if (mbarrier_try_wait<kCluster>(bar, parity)) return;
  const uint64_t start = global_ns();
  while (!mbarrier_try_wait<kCluster>(bar, parity))
    if (global_ns() - start > kHangNs) __trap();
}

// ---- thread-block clusters -----------------------------------------------------------------------------

// This block's place in its cluster, along x and y.
__device__ __forceinline__ uint32_t cluster_ctaid_x() {
  uint32_t v = 0;
  asm("mov.u32 %0, %%cluster_ctaid.x;\n" : "=r"(v));
  return v;
}
__device__ __forceinline__ uint32_t cluster_ctaid_y() {
  uint32_t v = 0;
  asm("mov.u32 %0, %%cluster_ctaid.y;\n" : "=r"(v));
  return v;
}

// This block's rank in its cluster, the number mapa takes.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t v = 0;
  asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(v));
  return v;
}

// The number of blocks in this block's cluster (1 when launched without one).
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t v = 0;
  asm("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(v));
  return v;
}

// The address in block `rank`'s shared memory of what lies at `addr` in this block's (the two blocks
// run the same kernel, so the same variable sits at the same offset): a shared::cluster address.
__device__ __forceinline__ uint32_t map_to_rank(uint32_t addr, uint32_t rank) {
  uint32_t remote = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  return remote;
}

// 16 bytes into another block's shared memory (a shared::cluster address), counted as 16 bytes of
// transactions on the mbarrier `remote_bar` of that same block when they have landed. Asynchronous:
// the thread goes on at once, and the receiver learns of the bytes only through that barrier.
__device__ __forceinline__ void st_async_16(uint32_t remote, const uint4& v, uint32_t remote_bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(remote),
      "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar)
      : "memory");
}

// One arrival on an mbarrier of another block (a shared::cluster address), releasing at cluster scope
// this thread's earlier memory accesses, and those ordered before them by a __syncthreads.
__device__ __forceinline__ void mbarrier_arrive_remote(uint32_t remote_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote_bar) : "memory");
}

// The barriers this thread initialized, visible to the other blocks of the cluster (before the
// cluster barrier that lets them use them).
__device__ __forceinline__ void fence_mbarrier_init_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The cluster-wide barrier in two halves: every thread of every block must arrive before any passes
// the wait; what happens between the two overlaps the wait.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }

#endif  // __CUDA_ARCH__ >= 900

}  // namespace hl::kernels::cuda::mbarrier_ops
