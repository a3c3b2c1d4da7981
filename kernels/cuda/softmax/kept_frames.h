// The arithmetic of the softmax rung `packed_kept` (packed_kept.cu): whole-number base-2 frames, so that
// every change of frame is an exact power of two. Plain C++ with host/device functions
// (HL_HOST_DEVICE), so that the kernel calls exactly this code and a CPU test
// (tests/kernels/test_kept_frames.cpp) checks it without a GPU: the frames, the lags of a thread's packs
// against a record of every frame, the factors they give, and the merge of the threads' pairs.
//
// A thread folds its packs one by one into (m, h, s): m the largest value so far, h = frame_of(m) its
// frame, s the sum of 2^(x log2e - h) over the values so far. The exponentials of a pack are taken in
// the frame of the moment and kept; when the frame rises, s is rescaled by 2^(h - h') and the packs
// already kept fall that many frames behind (Lags). A probability is then kept * 2^(pack's frame - H) / S
// for the row's frame H and sum S, and every factor in it is a power of two: no rounding but 1/S and the
// product.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels::cuda::kept_frames {

inline constexpr float kLog2e = 1.4426950408889634f;

// 2^k for an integer-valued k <= 0, exactly, from its bits; 0 below 2^-126 (flushed, as the kernel's
// EX2s flush) and for k = -inf.
HL_HOST_DEVICE float exp2_int(float k) {
  if (!(k >= -126.0f)) return 0.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int>(k) + 127) << 23;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// The frame of a maximum m: the integer ceil(fl(m log2e)), at or above every x log2e with x <= m (to
// within half an ulp of the product: a term 2^(x log2e - h) is at most 2^(2^-8) for FP16 values);
// 0 for m = -inf (a thread that has seen only -inf, whose terms are all 2^-inf = 0); +inf for m = +inf.
HL_HOST_DEVICE float frame_of(float m) { return m == -INFINITY ? 0.0f : ceilf(m * kLog2e); }

// Four bytes added with saturation at 255 (the SIMD video instruction's meaning, __vaddus4).
HL_HOST_DEVICE uint32_t add_bytes_saturating(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vaddus4(a, b);
#else
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t s = ((a >> (8 * i)) & 0xFFu) + ((b >> (8 * i)) & 0xFFu);
    r |= (s > 255u ? 255u : s) << (8 * i);
  }
  return r;
#endif
}

// How many frames each of a thread's packs lies behind the thread's current frame, one byte per pack
// in two registers (up to 8 packs): the exponent of the factor that takes the pack's kept values to the
// thread's frame. A byte saturates at 255, whose factor 2^-255 is 0 anyway. (Eight floats of frames were
// three registers too many for a 1024-thread block, whose threads may have 64: ptxas spilled.)
struct Lags {
  static constexpr int kPacks = 8;
  uint32_t b[2] = {0u, 0u};
  // The thread's frame rose by d >= 1: every pack folded so far lies d further behind. The bytes of
  // packs not yet folded rise too; each is cleared when its pack is folded (now).
  HL_HOST_DEVICE void rose_by(float d) {
    const uint32_t splat = static_cast<uint32_t>(fminf(d, 255.0f)) * 0x01010101u;
    b[0] = add_bytes_saturating(b[0], splat);
    b[1] = add_bytes_saturating(b[1], splat);
  }
  HL_HOST_DEVICE void now(int i) { b[i / 4] &= ~(0xFFu << (8 * (i % 4))); }
  HL_HOST_DEVICE float of(int i) const { return static_cast<float>((b[i / 4] >> (8 * (i % 4))) & 0xFFu); }
};

// ---- where the exponentials are kept ------------------------------------------------------------------

// Of a thread's P packs, how many keep their exponentials in shared memory (packs 0 .. kept_shared - 1).
// The last one's are computed again for the output, from its FP16 values still in registers: 8 more
// EX2s per thread, where keeping them needed 8 registers, and a 1024-thread block's threads may have 64
// (ptxas spilled with them).
constexpr int kept_shared(int P) { return P > 1 ? P - 1 : 0; }
// The kept values are stored [2 i + half][stride] as float4 (half: values 0-3 or 4-7 of pack i), a warp's
// 32 threads at 512 contiguous bytes (no bank conflicts), with a stride fixed at compile time so that
// every store and load is one base register plus an immediate offset: with the block size as the
// stride, ptxas kept a separate address register per store, and spilled. The stride is the block size
// rounded up to 256, 512 or 1024.
constexpr int stride_for(int threads) { return threads <= 256 ? 256 : threads <= 512 ? 512 : 1024; }
// The shared memory of a block of `threads` threads with P packs each: 224 KiB for P = 8 in 1024
// threads (a 65536-column row), 112 KiB in 512 (32768 columns: two blocks per SM on an H100).
constexpr int64_t shared_bytes(int threads, int P) {
  return static_cast<int64_t>(stride_for(threads)) * 2 * kept_shared(P) * 16;
}
// The block's other shared memory: the merge's frame and sum for each of up to 32 warps (packed_kept.cu's
// merge_frames, which asserts it). A GPU's limit per block is on both together, so the rung checks it
// against block_shared_bytes: against the kept values alone, a row within 256 bytes of the limit would
// pass the check and fail at launch.
inline constexpr int64_t kMergeBytes = 2 * 32 * sizeof(float);
constexpr int64_t block_shared_bytes(int threads, int P) { return shared_bytes(threads, P) + kMergeBytes; }

// A sum of exponentials in the frame h: sum 2^(x log2e - h). h = -inf: no finite maximum seen.
struct FrameSum {
  float h, s;
};

// Two pairs in the larger frame. The factors are exact powers of two; a pair from -inf counts 0, and two
// from the same frame add as they are (also two -inf, or two +inf: a +inf maximum makes the row NaN
// through its own sum, x - inf = NaN for x = +inf).
HL_HOST_DEVICE FrameSum combine(FrameSum a, FrameSum b) {
  const float h = fmaxf(a.h, b.h);
  return {h, a.s * (a.h == h ? 1.0f : exp2_int(a.h - h)) + b.s * (b.h == h ? 1.0f : exp2_int(b.h - h))};
}

// One thread's fold. enter(i, pm) takes pack i (i < 8) with largest value pm (NaN ignored, as fmaxf
// does); the caller then adds the pack's terms 2^(x log2e - h), in the frame h that enter leaves.
struct Fold {
  float m = -INFINITY, h = 0.0f, s = 0.0f;
  Lags lags;
  HL_HOST_DEVICE void enter(int i, float pm) {
    const float m_new = fmaxf(m, pm);
    const float h_new = frame_of(m_new);
    // A new frame rescales the sum by exactly 2^(h - h_new) and puts the packs folded so far that much
    // further behind. None from -inf: the packs so far hold only zeros, whatever their lags, and s is 0,
    // or NaN if one of them held a NaN, which must stay (2^(0 - h_new) may not even be a factor below 1).
    // A maximum that rises within its frame changes nothing.
    if (h_new != h && m != -INFINITY) {
      s *= exp2_int(h - h_new);
      lags.rose_by(h_new - h);
    }
    m = m_new;
    h = h_new;
    lags.now(i);
  }
  // The thread's pair for the block's merge.
  HL_HOST_DEVICE FrameSum pair() const { return {m == -INFINITY ? -INFINITY : h, s}; }
  // The factor that takes pack i's kept exponentials to probabilities, for the row's frame row_h and
  // inv = 1 / S (NaN for a row without a finite maximum): 2^(the pack's frame - row_h) * inv. A thread
  // that has seen only -inf has frame 0 and exponentials 0, whatever the row's frame: min(., 0) keeps
  // its factor finite.
  HL_HOST_DEVICE float factor(int i, float row_h, float inv) const {
    return exp2_int(fminf(h - row_h, 0.0f) - lags.of(i)) * inv;
  }
};

}  // namespace hl::kernels::cuda::kept_frames
