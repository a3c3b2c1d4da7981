// The DataLoader: cuts a Dataset into mini-batches, in a shuffled order that is a pure function of
// (seed, epoch), so a training run is reproducible across runs and machines.
//
//   DataLoader loader(load_mnist(dir, Split::train), {.batch_size = 128, .seed = 1, .device = dev});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);
//     for (Batch b; loader.next(b);) { ... b.x: f32 [128, 1, 28, 28] on dev, b.y: i32 [128] ... }
//   }
//
// A batch is assembled in two steps, gather (copy the chosen rows into one host tensor) and
// deliver (convert to the requested dtype, move to the requested device); later additions (data
// augmentation, pinned double-buffered copies) slot in between those two steps.
#pragma once
#include <cstdint>
#include <vector>

#include "datasets/mnist.h"
#include "framework/tensor.h"

namespace hl::data {

struct Batch {
  Tensor x;  // [B, C, H, W] in Options::dtype on Options::device
  Tensor y;  // i32 [B] on Options::device
};

class DataLoader {
 public:
  struct Options {
    int64_t batch_size = 128;
    bool shuffle = true;
    bool drop_last = false;  // drop a last batch smaller than batch_size
    uint64_t seed = 0;
    Device device = Device::cpu;
    DType dtype = DType::f32;  // of the images (labels stay i32)
  };

  // Throws hl::Error for batch_size < 1, an empty data set, or images/labels that do not match.
  DataLoader(Dataset ds, Options opt);

  // Batches per epoch: ceil(N / batch_size), or floor with drop_last.
  int64_t num_batches() const;
  // Begin an epoch (the constructor begins epoch 0). With shuffle, the order is a Fisher-Yates
  // permutation drawn from hl::Generator seeded by (seed, epoch) alone.
  void start_epoch(int64_t epoch);
  // The next batch of the current epoch; false (out untouched) when the epoch is over.
  bool next(Batch& out);

  const Dataset& dataset() const { return ds_; }
  const Options& options() const { return opt_; }
  int64_t epoch() const { return epoch_; }
  // The sample order of the current epoch (indices into the data set).
  const std::vector<int64_t>& order() const { return order_; }

 private:
  Batch gather(int64_t begin, int64_t end) const;  // rows order_[begin, end) as host tensors
  Batch deliver(Batch host) const;                 // converted to opt_.dtype, moved to opt_.device

  Dataset ds_;
  Tensor host_images_;  // ds_ on the host (the same tensors when it is already there)
  Tensor host_labels_;
  Options opt_;
  std::vector<int64_t> order_;
  int64_t cursor_ = 0;  // position in order_ of the next batch
  int64_t epoch_ = 0;
};

}  // namespace hl::data
