// DataLoader: every sample exactly once per epoch, an order that is a pure function of
// (seed, epoch), batch counts and sizes with and without drop_last, dtype/device delivery, errors.
// The data set is made so that row i holds the value i and label i, so a batch shows its indices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "datasets/dataloader.h"
#include "framework/ops.h"
#include "kernels/half.h"
#include "tests/datasets/data_files.h"
#include "tests/test_util.h"

namespace hl::test {
namespace {

using data::Batch;
using data::DataLoader;
using data::Dataset;

// n rows of shape [1, 2, 2]: row i is (i, i + 0.25, i + 0.5, i + 0.75), label i.
Dataset indexed_dataset(int64_t n) {
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int64_t i = 0; i < n; ++i) {
    for (float f : {0.0f, 0.25f, 0.5f, 0.75f}) x.push_back(static_cast<float>(i) + f);
    y.push_back(static_cast<int32_t>(i));
  }
  Dataset ds;
  ds.images = Tensor::from_vector(x, {n, 1, 2, 2});
  ds.labels = Tensor::from_vector(y, {n});
  ds.num_classes = n;
  ds.name = "indexed";
  return ds;
}

DataLoader::Options opts(int64_t batch_size, bool shuffle, bool drop_last, uint64_t seed = 0) {
  DataLoader::Options o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = seed;
  return o;
}

// The labels of every batch of one epoch, in order; also checks each batch's images match its labels.
std::vector<int32_t> run_epoch(DataLoader& loader, int64_t epoch, std::vector<int64_t>* sizes = nullptr) {
  loader.start_epoch(epoch);
  std::vector<int32_t> seen;
  for (Batch b; loader.next(b);) {
    const std::vector<int32_t> y = b.y.to_int();
    const std::vector<float> x = b.x.to_vector();
    EXPECT_EQ(b.x.shape(), (Shape{static_cast<int64_t>(y.size()), 1, 2, 2}));
    for (size_t r = 0; r < y.size(); ++r)
      for (size_t k = 0; k < 4; ++k) EXPECT_EQ(x[4 * r + k], static_cast<float>(y[r]) + 0.25f * static_cast<float>(k));
    seen.insert(seen.end(), y.begin(), y.end());
    if (sizes) sizes->push_back(static_cast<int64_t>(y.size()));
  }
  return seen;
}

std::vector<int32_t> iota(int64_t n, int32_t first = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(DataLoader, CoversEveryIndexExactlyOncePerEpoch) {
  DataLoader loader(indexed_dataset(103), opts(10, true, false, fresh_seed()));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int32_t> seen = run_epoch(loader, epoch);
    EXPECT_NE(seen, iota(103)) << "epoch " << epoch << " was not shuffled";
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, iota(103)) << "epoch " << epoch;
  }
}

TEST(DataLoader, OrderIsAPureFunctionOfSeedAndEpoch) {
  const uint64_t seed = fresh_seed();
  DataLoader a(indexed_dataset(257), opts(32, true, false, seed));
  DataLoader b(indexed_dataset(257), opts(32, true, false, seed));
  // a walks through epochs 0..2 first; b jumps straight to epoch 3. Same order.
  for (int64_t e = 0; e < 3; ++e) run_epoch(a, e);
  EXPECT_EQ(run_epoch(a, 3), run_epoch(b, 3));
  // Repeating an epoch repeats its order.
  EXPECT_EQ(run_epoch(a, 1), run_epoch(b, 1));
  // Different epochs and different seeds give different orders.
  EXPECT_NE(run_epoch(a, 1), run_epoch(a, 2));
  DataLoader c(indexed_dataset(257), opts(32, true, false, seed + 1));
  EXPECT_NE(run_epoch(a, 1), run_epoch(c, 1));
}

TEST(DataLoader, ConstructorBeginsEpochZero) {
  DataLoader a(indexed_dataset(50), opts(7, true, false, 42));
  std::vector<int32_t> first;
  for (Batch b; a.next(b);) {
    const auto y = b.y.to_int();
    first.insert(first.end(), y.begin(), y.end());
  }
  EXPECT_EQ(a.epoch(), 0);
  EXPECT_EQ(first, run_epoch(a, 0));
}

TEST(DataLoader, OrderIsPinnedAcrossMachines) {
  // The permutation depends only on hl::Generator's documented algorithm (splitmix64-seeded
  // xoshiro256**, rejection-sampled below()), the (seed, epoch) mixing and the Fisher-Yates loop.
  // Pinned here (and reproduced by an independent re-implementation of those steps in Python), so a
  // change to any of them, which would change every training run, is noticed.
  DataLoader loader(indexed_dataset(10), opts(10, true, false, 0));
  const std::vector<int64_t> epoch0 = loader.order();
  loader.start_epoch(1);
  const std::vector<int64_t> epoch1 = loader.order();
  EXPECT_EQ(epoch0, (std::vector<int64_t>{5, 4, 7, 1, 2, 0, 6, 9, 8, 3}));
  EXPECT_EQ(epoch1, (std::vector<int64_t>{8, 1, 9, 2, 5, 7, 6, 0, 3, 4}));
}

// The shuffle's last step swaps positions 0 and 1 (or not, by a draw of below(2)); with two
// samples that is the whole shuffle, so over 64 epochs both orders appear.
TEST(DataLoader, ShuffleReachesItsLastSwap) {
  DataLoader loader(indexed_dataset(2), opts(2, true, false, fresh_seed()));
  std::set<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 64; ++epoch) {
    loader.start_epoch(epoch);
    orders.insert(loader.order());
  }
  EXPECT_EQ(orders, (std::set<std::vector<int64_t>>{{0, 1}, {1, 0}}));
}

TEST(DataLoader, WithoutShuffleTheOrderIsSequential) {
  DataLoader loader(indexed_dataset(25), opts(4, false, false));
  EXPECT_EQ(run_epoch(loader, 0), iota(25));
  EXPECT_EQ(run_epoch(loader, 5), iota(25));
}

TEST(DataLoader, BatchCountsAndLastBatch) {
  std::vector<int64_t> sizes;
  DataLoader keep(indexed_dataset(103), opts(10, true, false));
  EXPECT_EQ(keep.num_batches(), 11);
  EXPECT_EQ(run_epoch(keep, 0, &sizes).size(), 103u);
  ASSERT_EQ(sizes.size(), 11u);
  EXPECT_EQ(sizes.back(), 3);  // the last, partial batch
  EXPECT_TRUE(std::all_of(sizes.begin(), sizes.end() - 1, [](int64_t s) { return s == 10; }));

  sizes.clear();
  DataLoader drop(indexed_dataset(103), opts(10, true, true));
  EXPECT_EQ(drop.num_batches(), 10);
  std::vector<int32_t> seen = run_epoch(drop, 0, &sizes);
  EXPECT_EQ(sizes, std::vector<int64_t>(10, 10));
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "a sample appeared twice";

  // An exact multiple: drop_last changes nothing.
  EXPECT_EQ(DataLoader(indexed_dataset(100), opts(10, true, true)).num_batches(), 10);
  EXPECT_EQ(DataLoader(indexed_dataset(100), opts(10, true, false)).num_batches(), 10);
  // Fewer samples than one batch.
  DataLoader small(indexed_dataset(5), opts(8, true, true));
  EXPECT_EQ(small.num_batches(), 0);
  Batch b;
  EXPECT_FALSE(small.next(b));
  DataLoader small_keep(indexed_dataset(5), opts(8, true, false));
  EXPECT_EQ(small_keep.num_batches(), 1);
  sizes.clear();
  run_epoch(small_keep, 0, &sizes);
  EXPECT_EQ(sizes, std::vector<int64_t>{5});
  // A last batch of one sample, and batches of one: each counts.
  EXPECT_EQ(DataLoader(indexed_dataset(101), opts(10, true, false)).num_batches(), 11);
  EXPECT_EQ(DataLoader(indexed_dataset(7), opts(1, true, false)).num_batches(), 7);
}

TEST(DataLoader, NextStaysFalseUntilTheNextEpoch) {
  DataLoader loader(indexed_dataset(6), opts(4, true, false));
  Batch b;
  EXPECT_TRUE(loader.next(b));
  EXPECT_TRUE(loader.next(b));
  const Tensor last = b.x;
  EXPECT_FALSE(loader.next(b));
  EXPECT_FALSE(loader.next(b));
  EXPECT_EQ(b.x.data_ptr(), last.data_ptr()) << "a false next() must leave the batch alone";
  loader.start_epoch(1);
  EXPECT_TRUE(loader.next(b));
}

TEST(DataLoader, ConvertsToTheRequestedDtype) {
  DataLoader::Options o = opts(8, true, false, 3);
  o.dtype = DType::f16;
  DataLoader loader(indexed_dataset(20), o);
  for (Batch b; loader.next(b);) {
    EXPECT_EQ(b.x.dtype(), DType::f16);
    EXPECT_EQ(b.y.dtype(), DType::i32);
    EXPECT_EQ(b.x.device(), Device::cpu);
  }
  // Values i + k/4 (i < 20) are exact in f16, so run_epoch's value checks hold too.
  EXPECT_EQ(run_epoch(loader, 0).size(), 20u);
}

TEST(DataLoader, WorksOnASubset) {
  const Dataset ds = indexed_dataset(50);
  DataLoader loader(ds.subset(10, 30), opts(6, true, false, 9));
  std::vector<int32_t> seen = run_epoch(loader, 0);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, iota(20, 10));
}

TEST(DataLoader, DeliversToCuda) {
  HL_REQUIRE_CUDA();
  DataLoader::Options o = opts(16, true, false, 5);
  o.device = Device::cuda;
  o.dtype = DType::f16;
  DataLoader loader(indexed_dataset(40), o);
  std::vector<int32_t> seen;
  for (Batch b; loader.next(b);) {
    EXPECT_EQ(b.x.device(), Device::cuda);
    EXPECT_EQ(b.y.device(), Device::cuda);
    EXPECT_EQ(b.x.dtype(), DType::f16);
    const auto y = b.y.to_int();
    seen.insert(seen.end(), y.begin(), y.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, iota(40));
  // A set already resident on the GPU gives the same batches.
  DataLoader on_gpu(indexed_dataset(40).to(Device::cuda), o);
  DataLoader on_cpu(indexed_dataset(40), o);
  EXPECT_EQ(run_epoch(on_gpu, 2), run_epoch(on_cpu, 2));
}

TEST(DataLoader, RejectsBadOptionsAndEmptySets) {
  EXPECT_HL_ERROR(DataLoader(indexed_dataset(5), opts(0, true, false)), "DataLoader(indexed)", "batch_size", "got 0");
  EXPECT_HL_ERROR(DataLoader(indexed_dataset(5), opts(-3, true, false)), "batch_size");
  EXPECT_HL_ERROR(DataLoader(indexed_dataset(5).subset(2, 2), opts(4, true, false)), "empty");
  EXPECT_HL_ERROR(DataLoader(Dataset{}, opts(4, true, false)), "DataLoader(");
  Dataset no_labels = indexed_dataset(5), no_images = indexed_dataset(5);
  no_labels.labels = Tensor();
  no_images.images = Tensor();
  EXPECT_HL_ERROR(DataLoader(no_labels, opts(4, true, false)), "DataLoader(indexed)", "no images or no labels");
  EXPECT_HL_ERROR(DataLoader(no_images, opts(4, true, false)), "DataLoader(indexed)", "no images or no labels");
  DataLoader::Options o = opts(4, true, false);
  o.dtype = DType::i32;
  EXPECT_HL_ERROR(DataLoader(indexed_dataset(5), o), "dtype");
  Dataset mismatched = indexed_dataset(5);
  mismatched.labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2}, {3});
  EXPECT_HL_ERROR(DataLoader(mismatched, opts(4, true, false)), "labels");
  // The labels' dtype and rank are each checked alone: i32 [5, 1], and f32 [5].
  Dataset column = indexed_dataset(5), floats = indexed_dataset(5);
  column.labels = column.labels.reshape({5, 1});
  floats.labels = floats.labels.to(DType::f32);
  for (const Dataset& bad : {column, floats})
    EXPECT_HL_ERROR(DataLoader(bad, opts(4, true, false)),
                    "DataLoader(indexed): labels must be i32 [5] to match images ", bad.images.describe(), ", got ",
                    bad.labels.describe());
  // A 0-d tensor of images has no samples at all; a 1-d one holds one value per sample, and loads.
  Dataset scalar = indexed_dataset(1);
  scalar.images = Tensor::scalar(3.0);
  EXPECT_HL_ERROR(DataLoader(scalar, opts(4, true, false)), "DataLoader(indexed)", "the data set is empty");
  Dataset flat = indexed_dataset(3);
  flat.images = Tensor::from_vector(std::vector<float>{0.5f, 1.5f, 2.5f}, {3});
  DataLoader flat_loader(flat, opts(3, false, false));
  Batch b;
  ASSERT_TRUE(flat_loader.next(b));
  EXPECT_EQ(b.x.to_vector(), (std::vector<float>{0.5f, 1.5f, 2.5f}));
}

}  // namespace
}  // namespace hl::test

// ---- augmentation, dtype and device paths (issue 3) ------------------------------------------------

namespace hl::test {
namespace {

using data::Augment;
using data::AugmentDraw;

// n random images [n, c, h, w], labels i % 10, with a per-channel normalization recorded.
Dataset random_images(int64_t n, int64_t c, int64_t h, int64_t w, uint64_t seed) {
  Generator gen(seed);
  Dataset ds;
  ds.images = Tensor::uniform({n, c, h, w}, gen, -2.0, 2.0);
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  ds.labels = Tensor::from_vector(y, {n});
  ds.num_classes = 10;
  ds.name = "random";
  ds.norm = c == 3 ? data::cifar10_normalization() : data::mnist_normalization();
  return ds;
}

// Batches concatenated on the host as float (images) and int (labels).
using Contents = std::pair<std::vector<float>, std::vector<int32_t>>;
void append(Contents& out, const Batch& b) {
  const auto x = b.x.to_vector();
  const auto y = b.y.to_int();
  out.first.insert(out.first.end(), x.begin(), x.end());
  out.second.insert(out.second.end(), y.begin(), y.end());
}

// Every batch of one epoch, each read back before the next is asked for.
Contents epoch_contents(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  Contents out;
  for (Batch b; loader.next(b);) append(out, b);
  return out;
}

TEST(Augment, DrawIsAPureFunctionOfSeedEpochAndIndex) {
  const Augment a = Augment::cifar10();
  const uint64_t seed = fresh_seed();
  std::vector<int> dx_seen(9, 0);
  int flips = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const AugmentDraw d = data::draw_augment(a, seed, 3, i);
    const AugmentDraw again = data::draw_augment(a, seed, 3, i);
    ASSERT_EQ(d.dx, again.dx);
    ASSERT_EQ(d.dy, again.dy);
    ASSERT_EQ(d.flip, again.flip);
    ASSERT_GE(d.dx, 0);
    ASSERT_LE(d.dx, 8);
    ASSERT_GE(d.dy, 0);
    ASSERT_LE(d.dy, 8);
    dx_seen[static_cast<size_t>(d.dx)]++;
    flips += d.flip;
  }
  // 2000 draws: each of the 9 offsets expected 222 times; 100 is more than 8 standard deviations
  // (sqrt(2000 * 1/9 * 8/9) = 14) away, so a failure means a broken draw, not bad luck. Likewise flips.
  for (int c : dx_seen) EXPECT_GT(c, 100);
  EXPECT_NEAR(flips, 1000, 150);
  // Another epoch or seed gives other draws (the chance that 50 draws all agree is negligible).
  int same_epoch = 0, same_seed = 0;
  for (int64_t i = 0; i < 50; ++i) {
    const AugmentDraw d = data::draw_augment(a, seed, 3, i);
    const AugmentDraw e = data::draw_augment(a, seed, 4, i);
    const AugmentDraw s = data::draw_augment(a, seed + 1, 3, i);
    same_epoch += d.dx == e.dx && d.dy == e.dy && d.flip == e.flip;
    same_seed += d.dx == s.dx && d.dy == s.dy && d.flip == s.flip;
  }
  EXPECT_LT(same_epoch, 50);
  EXPECT_LT(same_seed, 50);
}

// The draws are pinned like the order (OrderIsPinnedAcrossMachines), and reproduced by the same kind
// of independent Python re-implementation: dx, dy, then the flip, each drawn with below() from a
// generator seeded by mix64(mix64(mix64(seed ^ the augmentation stream) ^ epoch) ^ index); a flip is a
// draw of 1. Without a crop, the flip is the first draw.
TEST(Augment, DrawsArePinnedAcrossMachines) {
  struct Want {
    int64_t dx, dy;
    bool flip;
  };
  const std::vector<Want> crop_and_flip{{4, 8, true}, {8, 0, false}, {7, 3, true},
                                        {0, 1, false}, {1, 1, true}, {8, 2, true}};
  const std::vector<bool> flip_only{true, false, false, true, true, false};
  for (int64_t i = 0; i < 6; ++i) {
    const AugmentDraw d = data::draw_augment(Augment::cifar10(), 42, 0, i);
    const Want& w = crop_and_flip[static_cast<size_t>(i)];
    EXPECT_TRUE(d.dx == w.dx && d.dy == w.dy && d.flip == w.flip)
        << "index " << i << ": " << d.dx << ", " << d.dy << ", " << d.flip;
    const AugmentDraw f = data::draw_augment(Augment{0, true}, 42, 0, i);
    EXPECT_TRUE(f.dx == 0 && f.dy == 0 && f.flip == flip_only[static_cast<size_t>(i)]) << "index " << i;
  }
  // A crop padding of 1 draws both offsets from {0, 1, 2}: each value shows within 300 draws
  // (missing one has a chance of 2 (2/3)^300, below 1e-52).
  std::set<int64_t> dx_seen, dy_seen;
  const uint64_t seed = fresh_seed();
  for (int64_t i = 0; i < 300; ++i) {
    const AugmentDraw d = data::draw_augment(Augment{1, false}, seed, 0, i);
    ASSERT_FALSE(d.flip);
    dx_seen.insert(d.dx);
    dy_seen.insert(d.dy);
  }
  EXPECT_EQ(dx_seen, (std::set<int64_t>{0, 1, 2}));
  EXPECT_EQ(dy_seen, (std::set<int64_t>{0, 1, 2}));
}

TEST(Augment, CropAndFlipMoveEveryPixelWhereExpected) {
  const int64_t c = 2, h = 5, w = 7, p = 4;
  std::vector<float> in(static_cast<size_t>(c * h * w));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) + 0.5f;
  const float pad[2] = {-100.0f, -200.0f};
  const Augment a{p, true};
  for (int64_t dy = 0; dy <= 2 * p; ++dy)
    for (int64_t dx = 0; dx <= 2 * p; ++dx)
      for (bool flip : {false, true}) {
        std::vector<float> out(in.size(), NAN);
        data::augment_image(in.data(), out.data(), c, h, w, a, {dx, dy, flip}, pad);
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t y = 0; y < h; ++y)
            for (int64_t x = 0; x < w; ++x) {
              // Reference: pad into a (h + 2p) x (w + 2p) canvas, crop at (dy, dx), then mirror.
              const int64_t cx = flip ? w - 1 - x : x;
              const int64_t sy = y + dy - p, sx = cx + dx - p;
              const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
              const float want = inside ? in[static_cast<size_t>((ch * h + sy) * w + sx)] : pad[ch];
              ASSERT_EQ(out[static_cast<size_t>((ch * h + y) * w + x)], want)
                  << "dy " << dy << " dx " << dx << " flip " << flip << " at " << ch << "," << y << "," << x;
            }
      }
  // No padding, no flip: the identity.
  std::vector<float> out(in.size());
  data::augment_image(in.data(), out.data(), c, h, w, Augment{}, {0, 0, false}, pad);
  EXPECT_EQ(out, in);
}

// Each row of an augmented epoch (`got`, in `order`) is its sample's own crop and flip for that epoch,
// made by augment_image with black (-mean/std) padding. The images are [N, C, H, W].
void expect_augmented_rows(const Dataset& ds, const DataLoader::Options& o, int64_t epoch,
                           const std::vector<int64_t>& order, const std::vector<float>& got) {
  const int64_t c = ds.images.size(1), h = ds.images.size(2), w = ds.images.size(3), row = c * h * w;
  ASSERT_EQ(got.size(), order.size() * static_cast<size_t>(row));
  const std::vector<float> src = ds.images.to_vector();
  std::vector<float> pad;
  for (int64_t k = 0; k < c; ++k) pad.push_back(-ds.norm.mean_of(k) / ds.norm.std_of(k));
  std::vector<float> want(static_cast<size_t>(row));
  for (size_t r = 0; r < order.size(); ++r) {
    const int64_t i = order[r];
    data::augment_image(src.data() + i * row, want.data(), c, h, w, o.augment,
                        data::draw_augment(o.augment, o.seed, epoch, i), pad.data());
    ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin() + static_cast<long>(r) * row)) << "row " << r;
  }
}

TEST(DataLoader, AugmentedEpochsAreReproducibleAndIndependentOfBatchSize) {
  const uint64_t seed = fresh_seed();
  const Dataset ds = random_images(37, 3, 8, 8, seed);
  DataLoader::Options o = opts(8, true, false, seed);
  o.augment = Augment::cifar10();
  DataLoader a(ds, o);
  o.batch_size = 5;
  DataLoader b(ds, o);
  const auto ea = epoch_contents(a, 2);
  EXPECT_EQ(ea, epoch_contents(b, 2)) << "the augmentation of a sample must not depend on the batch size";
  EXPECT_EQ(ea, epoch_contents(a, 2)) << "repeating an epoch repeats its augmentation";
  EXPECT_NE(ea.first, epoch_contents(a, 3).first);
  a.start_epoch(2);
  expect_augmented_rows(ds, o, 2, a.order(), ea.first);
}

// Images that are not square (4 rows of 6): the loader hands augment_image each side as it is.
TEST(DataLoader, AugmentsImagesThatAreNotSquare) {
  const uint64_t seed = fresh_seed();
  const Dataset ds = random_images(5, 3, 4, 6, seed);
  DataLoader::Options o = opts(5, false, false, seed);
  o.augment = Augment::cifar10();
  DataLoader loader(ds, o);
  const auto got = epoch_contents(loader, 0).first;
  ASSERT_EQ(got.size(), 5u * 72u);
  expect_augmented_rows(ds, o, 0, loader.order(), got);  // no shuffle: row i is sample i
}

// f16 images are augmented like their f32 values: the loader widens them before it crops and flips.
TEST(DataLoader, AugmentsF16Images) {
  const uint64_t seed = fresh_seed();
  Dataset ds = random_images(6, 3, 8, 8, seed);
  ds.images = ds.images.to(DType::f16);  // values an f16 holds, so the f32 copy below is exact
  Dataset wide = ds;
  wide.images = ds.images.to(DType::f32);
  DataLoader::Options o = opts(4, true, false, seed);
  o.augment = Augment::cifar10();
  DataLoader narrow_loader(ds, o), wide_loader(wide, o);
  EXPECT_EQ(epoch_contents(narrow_loader, 1), epoch_contents(wide_loader, 1));
}

TEST(DataLoader, F16BatchesAreTheRoundedF32Batches) {
  const uint64_t seed = fresh_seed();
  const Dataset ds = random_images(29, 3, 6, 6, seed);
  for (bool augment : {false, true}) {
    DataLoader::Options o = opts(7, true, false, seed);
    if (augment) o.augment = Augment::cifar10();
    DataLoader f32(ds, o);
    o.dtype = DType::f16;
    DataLoader f16(ds, o);
    auto [x32, y32] = epoch_contents(f32, 1);
    auto [x16, y16] = epoch_contents(f16, 1);
    EXPECT_EQ(y16, y32);
    ASSERT_EQ(x16.size(), x32.size());
    for (size_t i = 0; i < x32.size(); ++i) ASSERT_EQ(x16[i], round_to_half(x32[i])) << "element " << i;
  }
}

TEST(DataLoader, RejectsAugmentationItCannotApply) {
  DataLoader::Options o = opts(4, true, false);
  o.augment = Augment::cifar10();
  Dataset flat = indexed_dataset(6);
  flat.images = flat.images.reshape({6, 4});
  EXPECT_HL_ERROR(DataLoader(flat, o), "augmentation needs images [N, C, H, W]");
  o.augment.crop_padding = -1;
  EXPECT_HL_ERROR(DataLoader(indexed_dataset(6), o), "crop_padding");
}

TEST(DataLoader, IsMovable) {
  DataLoader a(indexed_dataset(20), opts(6, true, false, 4));
  Batch b;
  ASSERT_TRUE(a.next(b));
  DataLoader moved(std::move(a));
  EXPECT_EQ(run_epoch(moved, 1).size(), 20u);
}

// Every GPU path gives exactly the batches of the CPU path (same seed, epoch, dtype, augmentation).
TEST(DataLoader, GpuPathsMatchTheHostPath) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  const Dataset ds = random_images(300, 3, 8, 8, seed);
  for (DType dt : {DType::f32, DType::f16})
    for (bool augment : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (augment ? " augmented" : ""));
      DataLoader::Options o = opts(64, true, false, seed);
      o.dtype = dt;
      if (augment) o.augment = Augment::cifar10();
      DataLoader host(ds, o);
      EXPECT_STREQ(host.path(), "host");
      o.device = Device::cuda;
      DataLoader pinned(ds, o);
      EXPECT_STREQ(pinned.path(), "pinned prefetch");
      DataLoader resident(ds.to(Device::cuda), o);
      EXPECT_STREQ(resident.path(), augment ? "pinned prefetch" : "device gather");
      o.prefetch = false;
      DataLoader plain(ds, o);
      EXPECT_STREQ(plain.path(), "host");
      for (int64_t epoch : {0, 1, 0}) {  // also re-starting an epoch mid-way through the prefetch
        const auto want = epoch_contents(host, epoch);
        EXPECT_EQ(epoch_contents(pinned, epoch), want);
        EXPECT_EQ(epoch_contents(resident, epoch), want);
        EXPECT_EQ(epoch_contents(plain, epoch), want);
      }
      pinned.start_epoch(5);
      Batch b;
      ASSERT_TRUE(pinned.next(b));
      EXPECT_EQ(b.x.device(), Device::cuda);
      EXPECT_EQ(b.x.dtype(), dt);
      pinned.start_epoch(6);  // abandons a prefetched batch
      EXPECT_EQ(epoch_contents(pinned, 6), epoch_contents(host, 6));
    }
}

// The pinned path's worker refills a pinned buffer only after the GPU has copied the batch out of it
// (it waits on the slot's event). Each test above reads a batch back before asking for the next, which
// waits for the GPU and would hide a missing wait. Here the stream is kept busy between the calls, so
// each batch's copy runs long after it was queued, while the worker prepares the next batches in the
// other buffer and then in this one again; the batches are read only when the epoch is over.
TEST(DataLoader, PinnedBuffersAreNotRefilledBeforeTheGpuCopiedThem) {
  HL_REQUIRE_CUDA();
  const uint64_t seed = fresh_seed();
  const Dataset ds = random_images(640, 3, 8, 8, seed);
  DataLoader::Options o = opts(64, true, false, seed);
  DataLoader host(ds, o);
  o.device = Device::cuda;
  DataLoader pinned(ds, o);
  ASSERT_STREQ(pinned.path(), "pinned prefetch");
  const auto want = epoch_contents(host, 0);
  // 64 Mi floats: each add reads 512 MiB and writes 256 MiB, about 0.1-0.3 ms on any GPU this runs on,
  // against microseconds to gather a batch of 64 small images on the host.
  const Tensor big = Tensor::ones({64 << 20}, DType::f32, Device::cuda);
  Tensor busy = add(big, big);
  pinned.start_epoch(0);
  std::vector<Batch> batches;
  for (Batch b; pinned.next(b);) {
    batches.push_back(b);
    for (int i = 0; i < 8; ++i) busy = add(busy, big);  // queued ahead of the next batch's copy
  }
  ASSERT_EQ(batches.size(), 10u);
  Contents got;
  for (const Batch& b : batches) append(got, b);
  EXPECT_EQ(got.second, want.second);
  // Counted rather than compared whole: a failure names the first wrong batch, not 122,880 values.
  ASSERT_EQ(got.first.size(), want.first.size());
  size_t wrong = 0, first_wrong = 0;
  for (size_t i = 0; i < got.first.size(); ++i) {
    if (got.first[i] == want.first[i]) continue;
    if (wrong++ == 0) first_wrong = i;
  }
  EXPECT_EQ(wrong, 0u) << "the first wrong value is in batch " << first_wrong / (64 * 3 * 8 * 8);
  EXPECT_EQ(busy.slice_rows(0, 1).to_vector()[0], 2.0f + 8.0f * 10.0f) << "the busy work ran";
}

}  // namespace
}  // namespace hl::test
