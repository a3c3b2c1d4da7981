// Dropout with a counter-based random number generator: the keep/drop decision for element i is a
// pure function of (seed, offset + i), so
//   - the CPU and every GPU produce the same mask for the same seed (tests check it),
//   - the backward pass regenerates the mask instead of storing it (no mask tensor in memory),
//   - a run is reproducible whatever the thread layout.
// The hash is splitmix64 (Steele, Lea & Flood 2014, the seeding generator of Java's SplittableRandom)
// applied to the seed-mixed counter; its top 24 bits form a uniform integer u in [0, 2^24), and the
// element is kept when u >= threshold = round(p * 2^24). Kept values are scaled by 1/(1-p) so that
// the expected output equals the input ("inverted dropout", as in PyTorch); the scale is an f32 and
// each output is rounded once.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/half.h"

namespace hl::kernels {

HL_HOST_DEVICE uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Mixing the seed through one splitmix64 round first keeps neighbouring seeds from producing
// shifted copies of the same stream.
HL_HOST_DEVICE bool dropout_keep(uint64_t seed, uint64_t index, uint32_t threshold) {
  const uint64_t h = splitmix64(splitmix64(seed) ^ index);
  return static_cast<uint32_t>(h >> 40) >= threshold;
}

// round(p * 2^24), for p in [0, 1).
uint32_t dropout_threshold(double p);

// y[i] = keep(i) ? x[i] * scale : 0, scale = 1/(1-p), with keep(i) = dropout_keep(seed, offset + i).
void dropout_forward(DeviceType dev, int64_t n, const void* x, void* y, DType t, double p, uint64_t seed,
                     uint64_t offset);
// dx[i] = keep(i) ? dy[i] * scale : 0 (the same mask, regenerated).
void dropout_backward(DeviceType dev, int64_t n, const void* dy, void* dx, DType t, double p, uint64_t seed,
                      uint64_t offset);

}  // namespace hl::kernels
