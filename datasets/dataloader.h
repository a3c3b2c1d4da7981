// The DataLoader: cuts a Dataset into mini-batches, in a shuffled order that is a pure function of
// (seed, epoch), so a training run is reproducible across runs and machines.
//
//   DataLoader loader(load_cifar10(dir, Split::train),
//                     {.batch_size = 128, .seed = 1, .device = dev, .dtype = DType::f16,
//                      .augment = Augment::cifar10()});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);
//     for (Batch b; loader.next(b);) { ... b.x: f16 [128, 3, 32, 32] on dev, b.y: i32 [128] ... }
//   }
//
// A batch is made in two steps: gather (copy the chosen rows, augmenting each when asked, into one
// buffer of the requested dtype) and deliver (to the requested device). Which path a batch takes:
//
//  - data set resident on the GPU, loader on the GPU, no augmentation: the shuffled indices go to the
//    GPU once per epoch and each batch is one gather_rows kernel (kernels/gather.h), converting to
//    the batch dtype on the way. No host work, no PCIe traffic: the fast path for small data sets.
//  - data set on the host, loader on the GPU (`prefetch`, the default): two pinned host buffers. When
//    next() hands out batch i (its host-to-device copy already queued on the halfling stream), a
//    worker thread starts gathering and augmenting batch i+1 into the other pinned buffer, while the
//    caller queues batch i's forward and backward pass and the GPU runs them. The next call queues
//    batch i+1's asynchronous copy and returns at once: the GPU never waits for the loader unless the
//    loader is slower than the model. A CUDA event per buffer keeps the worker from overwriting a
//    buffer whose copy the GPU has not finished.
//  - otherwise (CPU training): gathered on the calling thread, straight into the batch tensor.
//
// Every path gives the same batches for the same (seed, epoch): tests check it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/mnist.h"  // existing users include only this header for Dataset and the MNIST loaders
#include "framework/tensor.h"

namespace hl::data {

struct Batch {
  Tensor x;  // [B, C, H, W] in Options::dtype on Options::device
  Tensor y;  // i32 [B] on Options::device
};

// Training-time augmentation of [C, H, W] images, as torchvision's RandomCrop(H, padding) followed by
// RandomHorizontalFlip(): pad each side with black (a raw 0 pixel, i.e. -mean/std once normalized),
// take a random H x W window of the padded image, mirror it left-right with probability 1/2.
struct Augment {
  int64_t crop_padding = 0;      // 0: no random crop
  bool horizontal_flip = false;
  bool enabled() const { return crop_padding > 0 || horizontal_flip; }
  static Augment cifar10() { return {4, true}; }  // DESIGN.md §4, VGG-small
};

// The random choices for one sample: a pure function of (seed, epoch, index in the data set), so an
// augmented epoch is reproducible whatever the batch size, the order or the thread that makes it.
struct AugmentDraw {
  int64_t dx = 0, dy = 0;  // top-left corner of the window in the padded image, each in [0, 2 * padding]
  bool flip = false;
};
AugmentDraw draw_augment(const Augment& a, uint64_t seed, int64_t epoch, int64_t index);
// out = the augmented `in`, both [C, H, W] f32; pad[c] is channel c's fill value.
void augment_image(const float* in, float* out, int64_t channels, int64_t height, int64_t width, const Augment& a,
                   const AugmentDraw& d, const float* pad);

class DataLoader {
 public:
  struct Options {
    int64_t batch_size = 128;
    bool shuffle = true;
    bool drop_last = false;  // drop a last batch smaller than batch_size
    uint64_t seed = 0;
    Device device = Device::cpu;
    DType dtype = DType::f32;  // of the images (labels stay i32); f16 is converted on the host or in the gather
    Augment augment{};         // off by default; use it for training sets only
    bool prefetch = true;      // GPU loader over a host data set: double-buffered pinned copies (see above)
  };

  // Throws hl::Error for batch_size < 1, an empty data set, images/labels that do not match, or an
  // augmentation the images cannot take (they must be [N, C, H, W]).
  DataLoader(Dataset ds, Options opt);
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch: ceil(N / batch_size), or floor with drop_last.
  int64_t num_batches() const;
  // Begin an epoch (the constructor begins epoch 0). With shuffle, the order is a Fisher-Yates
  // permutation drawn from hl::Generator seeded by (seed, epoch) alone.
  void start_epoch(int64_t epoch);
  // The next batch of the current epoch; false (out untouched) when the epoch is over.
  bool next(Batch& out);

  const Dataset& dataset() const { return ds_; }
  const Options& options() const { return opt_; }
  int64_t epoch() const;
  // The sample order of the current epoch (indices into the data set).
  const std::vector<int64_t>& order() const;
  // Which path batches take: "device gather", "pinned prefetch", "host".
  const char* path() const;

 private:
  struct Impl;
  Dataset ds_;
  Options opt_;
  std::unique_ptr<Impl> impl_;  // on the heap, so the prefetch worker's pointer survives a move
};

}  // namespace hl::data
