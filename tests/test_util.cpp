#include "tests/test_util.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>

#include "kernels/half.h"

namespace hl::test {

uint64_t fresh_seed() {
  if (const char* env = std::getenv("HALFLING_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  static uint64_t counter = 0;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t seed = (t ^ (0x9E3779B97F4A7C15ull * ++counter)) % 1000000007ull;
  std::cout << "[ seed     ] HALFLING_TEST_SEED=" << seed << "\n";
  return seed;
}

double rel_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]) && std::isfinite(ref[i])) return INFINITY;
    const double d = out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0.0) return std::sqrt(num);
  return std::sqrt(num / den);
}

std::vector<double> random_values(size_t n, uint64_t seed, double lo, double hi, DType t) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) {
    x = dist(rng);
    if (t == DType::f16) x = static_cast<double>(round_to_half(static_cast<float>(x)));
    if (t == DType::f32) x = static_cast<double>(static_cast<float>(x));
    if (t == DType::i32) x = std::floor(x);
  }
  return v;
}

std::string data_dir(const std::string& name) {
  // Same convention as datasets/fetch.sh: $HALFLING_DATA, else <repo>/data.
  const char* env = std::getenv("HALFLING_DATA");
  const std::filesystem::path root = env ? std::filesystem::path(env) : std::filesystem::path(HALFLING_SOURCE_DIR) / "data";
  const std::filesystem::path p = root / name;
  return std::filesystem::exists(p) ? p.string() : std::string();
}

}  // namespace hl::test
