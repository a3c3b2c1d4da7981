// MNIST and Fashion-MNIST as in-memory labelled image sets (DESIGN.md §5).
//
// Both ship as four IDX files (see datasets/idx.h): train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each raw or gzipped (".gz" appended). Fetch them
// with datasets/fetch.sh. The loaders check every file (shape, matching counts, labels in range) and
// return the images as f32 [N, 1, 28, 28], already normalized as (pixel/255 - mean) / std.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace hl::data {

enum class Split { train, test };

// An in-memory labelled image set.
struct Dataset {
  Tensor images;  // f32 [N, C, H, W], already normalized
  Tensor labels;  // i32 [N]
  int64_t num_classes = 0;
  std::vector<std::string> class_names;
  std::string name;  // "mnist/train"

  int64_t size() const;
  // Rows [begin, end), sharing storage with this set.
  Dataset subset(int64_t begin, int64_t end) const;
  // The whole set resident on a device (the same tensors if already there).
  Dataset to(Device d) const;
};

// Per-channel normalization applied at load time: x = (pixel/255 - mean) / std.
struct Normalization {
  float mean, std;
};

// dir holds train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-...; the raw file is
// used when present, else the .gz one. Defaults: the training-set mean and std of each data set.
Dataset load_mnist(const std::string& dir, Split split, Normalization norm = {0.1307f, 0.3081f});
Dataset load_fashion_mnist(const std::string& dir, Split split, Normalization norm = {0.2860f, 0.3530f});

const char* split_name(Split s);  // "train" / "test"

}  // namespace hl::data
