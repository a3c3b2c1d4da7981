// Dataset and Normalization (see dataset.h): the parts every loader shares.
#include "datasets/dataset.h"

#include <cmath>

#include "kernels/error.h"

namespace hl::data {

const char* split_name(Split s) { return s == Split::train ? "train" : "test"; }

void Normalization::check(const std::string& op, int64_t channels) const {
  const auto ok_count = [&](size_t n) { return n == 1 || static_cast<int64_t>(n) == channels; };
  HL_CHECK(ok_count(mean.size()) && ok_count(std.size()), op, ": the normalization has ", mean.size(), " mean(s) and ",
           std.size(), " std(s); expected 1 or one per channel (", channels, ")");
  for (size_t i = 0; i < mean.size(); ++i)
    HL_CHECK(std::isfinite(mean[i]), op, ": the normalization mean must be finite (got ", mean[i], ")");
  for (size_t i = 0; i < std.size(); ++i)
    HL_CHECK(std::isfinite(std[i]) && std[i] > 0.0f, op, ": the normalization std must be finite and > 0 (got mean ",
             mean_of(static_cast<int64_t>(i)), ", std ", std[i], ")");
}

std::vector<float> Normalization::table(int64_t c) const {
  // Computed in double and rounded once, so that every loader maps a pixel value to the same float.
  std::vector<float> t(256);
  for (int v = 0; v < 256; ++v)
    t[static_cast<size_t>(v)] = static_cast<float>((v / 255.0 - mean_of(c)) / std_of(c));
  return t;
}

Normalization mnist_normalization() { return {0.1307f, 0.3081f}; }
Normalization fashion_mnist_normalization() { return {0.2860f, 0.3530f}; }
Normalization cifar10_normalization() { return {{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}}; }

Tensor normalize_pixels(const uint8_t* pixels, int64_t n, int64_t c, int64_t h, int64_t w, const Normalization& norm) {
  // Public, so it checks for itself: mean_of(c) and std_of(c) index the vectors without a bound, and a
  // normalization for 2 channels applied to 3 would read past them.
  norm.check("normalize_pixels", c);
  Tensor out = Tensor::empty({n, c, h, w}, DType::f32, Device::cpu);
  float* dst = out.data<float>();
  const int64_t plane = h * w;
  for (int64_t ch = 0; ch < c; ++ch) {
    const std::vector<float> table = norm.table(ch);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t base = (i * c + ch) * plane;
      for (int64_t k = 0; k < plane; ++k) dst[base + k] = table[pixels[base + k]];
    }
  }
  return out;
}

int64_t Dataset::size() const { return images.defined() ? images.size(0) : 0; }

Dataset Dataset::subset(int64_t begin, int64_t end) const {
  HL_CHECK(0 <= begin && begin <= end && end <= size(), "Dataset::subset(", name, "): rows [", begin, ", ", end,
           ") are out of range for a set of ", size(), " rows");
  Dataset out = *this;
  if (images.defined()) {  // a set never loaded has no tensors to slice: its one subset, [0, 0), is itself
    out.images = images.slice_rows(begin, end);
    out.labels = labels.slice_rows(begin, end);
  }
  out.name = detail::concat(name, "[", begin, ":", end, "]");
  return out;
}

Dataset Dataset::to(Device d) const {
  Dataset out = *this;
  out.images = images.to(d);
  out.labels = labels.to(d);
  return out;
}

}  // namespace hl::data
