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

#include "datasets/dataset.h"

namespace hl::data {

// dir holds train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-...; the raw file is
// used when present, else the .gz one. Defaults: the training-set mean and std of each data set.
Dataset load_mnist(const std::string& dir, Split split, Normalization norm = mnist_normalization());
Dataset load_fashion_mnist(const std::string& dir, Split split,
                           Normalization norm = fashion_mnist_normalization());

}  // namespace hl::data
