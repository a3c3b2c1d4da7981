// What every loader returns: an in-memory labelled image set, and the per-channel normalization
// that turned its pixels into model inputs.
//
// Images are stored already normalized, as f32 [N, C, H, W], x = (pixel/255 - mean[c]) / std[c].
// The set remembers mean and std, so that later steps can undo them: saving a sample as PNG, or
// padding a random crop with black (a raw 0 pixel is -mean[c]/std[c] after normalization).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace hl::data {

enum class Split { train, test };
const char* split_name(Split s);  // "train" / "test"

// x = (pixel/255 - mean[c]) / std[c]. One value applies to every channel; otherwise one per
// channel. `Normalization{0.1307f, 0.3081f}` (MNIST) and `Normalization::unit()` (pixel/255)
// keep working as before the per-channel generalization.
struct Normalization {
  std::vector<float> mean{0.0f}, std{1.0f};

  Normalization() = default;
  Normalization(float m, float s) : mean{m}, std{s} {}
  Normalization(std::vector<float> m, std::vector<float> s) : mean(std::move(m)), std(std::move(s)) {}
  static Normalization unit() { return {}; }  // x = pixel/255, in [0, 1]

  // mean/std of channel c (the single value when there is only one).
  float mean_of(int64_t c) const { return mean.size() == 1 ? mean[0] : mean[static_cast<size_t>(c)]; }
  float std_of(int64_t c) const { return std.size() == 1 ? std[0] : std[static_cast<size_t>(c)]; }
  // Throws hl::Error("<op>: ...") unless there are 1 or `channels` finite means and finite stds > 0.
  void check(const std::string& op, int64_t channels) const;
  // The 256 normalized values of channel c, indexed by raw pixel value.
  std::vector<float> table(int64_t c) const;
};

// The training-set statistics of each data set (the usual published values).
Normalization mnist_normalization();          // 0.1307, 0.3081
Normalization fashion_mnist_normalization();  // 0.2860, 0.3530
Normalization cifar10_normalization();        // (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)

struct Dataset {
  Tensor images;  // f32 [N, C, H, W], already normalized with `norm`
  Tensor labels;  // i32 [N], each in [0, num_classes)
  int64_t num_classes = 0;
  std::vector<std::string> class_names;
  std::string name;  // "mnist/train"
  Normalization norm;

  int64_t size() const;
  // Rows [begin, end), sharing storage with this set.
  Dataset subset(int64_t begin, int64_t end) const;
  // The whole set resident on a device (the same tensors if already there). On the GPU the
  // DataLoader gathers batches there, with no host work per batch (datasets/dataloader.h).
  Dataset to(Device d) const;
};

// f32 [N, C, H, W] from N*C*H*W raw channel-major bytes, normalized per channel. Throws hl::Error
// ("normalize_pixels: ...") for a normalization that is not 1 or C values of each (see check).
Tensor normalize_pixels(const uint8_t* pixels, int64_t n, int64_t c, int64_t h, int64_t w, const Normalization& norm);

}  // namespace hl::data
