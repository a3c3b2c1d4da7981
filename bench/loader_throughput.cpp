// Data-loader throughput: images per second that the DataLoader delivers, per data set and path,
// with no model attached (an upper bound on how fast training can be fed). Also the time to load
// each data set, and for CIFAR-10's image folder the cold (decode every image) and cached times.
//
// CIFAR-10 is found where load_cifar10 looks (datasets/cifar10.h, find_cifar10): the binary batches in DIR or
// DIR/cifar-10-batches-bin/ first, else the image folder in DIR or DIR/cifar10-jpg/. For the image
// folder the cold row decodes every image without the cache, then the load row reads the folder as
// load_cifar10 does and says what it did: "cache hit", or "no cache: decoded N" (a first run, or a folder
// changed since the cache was written: it then writes the cache). The binary batches have no cold row.
//
//   build/bench/loader_throughput [--mnist DIR] [--cifar10 DIR] [--epochs N] [--device cpu|cuda]
//                                 [--samples DIR]
//
// --samples DIR also writes what the loader delivers as PNG, for the documentation:
// DIR/cifar10_samples.png (10 training images per class, one class per row) and
// DIR/cifar10_augmentation.png (one image of each of the first 8 classes, then the same 8 as three
// augmented epochs draw them).
//
// Each configuration runs one warm-up epoch, then --epochs timed epochs; the median epoch is shown.
// On the GPU an epoch ends with a stream synchronization, so queued copies and gathers are counted.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "datasets/cifar10.h"
#include "datasets/dataloader.h"
#include "datasets/image.h"
#include "datasets/image_folder.h"
#include "datasets/mnist.h"
#include "framework/device.h"
#include "kernels/runtime.h"
#include "tutorials/common/cli.h"

using namespace hl;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Median images/s over `epochs` timed epochs (after one warm-up epoch).
double images_per_second(data::DataLoader& loader, int epochs) {
  std::vector<double> rates;
  for (int e = 0; e <= epochs; ++e) {
    const auto t0 = Clock::now();
    loader.start_epoch(e);
    int64_t n = 0;
    for (data::Batch b; loader.next(b);) n += b.y.numel();
    if (loader.options().device == Device::cuda) runtime::cuda_synchronize();
    if (e > 0) rates.push_back(static_cast<double>(n) / seconds_since(t0));
  }
  return bench::median(rates);
}


void row(const std::string& set, const std::string& what, const data::DataLoader& loader, double rate) {
  std::printf("%-14s %-34s %-16s %12.0f\n", set.c_str(), what.c_str(), loader.path(), rate);
}

void bench_set(const std::string& set, const data::Dataset& ds, Device dev, int epochs, bool augment) {
  for (DType dt : {DType::f32, DType::f16}) {
    data::DataLoader::Options o{.batch_size = 128, .seed = 1, .device = dev, .dtype = dt};
    if (augment) o.augment = data::Augment::cifar10();
    data::DataLoader loader(ds, o);
    const std::string what = std::string("batch 128, ") + dtype_name(dt) + (augment ? ", crop+flip" : "");
    row(set, what, loader, images_per_second(loader, epochs));
    if (dev == Device::cuda && !augment) {
      data::DataLoader resident(ds.to(Device::cuda), o);
      row(set, what + ", on GPU", resident, images_per_second(resident, epochs));
    }
  }
}

// One row per class (the first `per_class` images of each), and the augmentation of 8 images.
void write_samples(const data::Dataset& ds, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::vector<int32_t> labels = ds.labels.to_int();
  const int64_t per_class = 10;
  std::vector<int64_t> picked;
  for (int64_t c = 0; c < ds.num_classes; ++c) {
    int64_t taken = 0;
    for (size_t i = 0; i < labels.size() && taken < per_class; ++i)
      if (labels[i] == c) {
        picked.push_back(static_cast<int64_t>(i));
        ++taken;
      }
  }
  std::vector<data::Image> tiles;
  for (int64_t i : picked) tiles.push_back(data::scale_nearest(data::tensor_to_image(ds.images.slice_rows(i, i + 1), ds.norm), 2));
  data::write_png(dir + "/cifar10_samples.png", data::make_grid(tiles, per_class));

  // Row 0: the images as stored; rows 1-3: epochs 0-2 of a loader with crop (pad 4) + flip.
  const int64_t n = 8;
  std::vector<data::Image> aug;
  std::vector<float> pad;
  for (int64_t c = 0; c < 3; ++c) pad.push_back(-ds.norm.mean_of(c) / ds.norm.std_of(c));
  const data::Augment a = data::Augment::cifar10();
  const std::vector<float> x = ds.images.to_vector();
  for (int64_t epoch = -1; epoch < 3; ++epoch)
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = picked[static_cast<size_t>(k * per_class)];  // the first image of class k
      std::vector<float> out(3072);
      const float* src = x.data() + i * 3072;
      if (epoch < 0) std::copy(src, src + 3072, out.begin());
      else data::augment_image(src, out.data(), 3, 32, 32, a, data::draw_augment(a, 1, epoch, i), pad.data());
      aug.push_back(data::scale_nearest(data::tensor_to_image(Tensor::from_vector(out, {3, 32, 32}), ds.norm), 3));
    }
  data::write_png(dir + "/cifar10_augmentation.png", data::make_grid(aug, n));
  std::printf("samples: wrote %s/cifar10_samples.png and %s/cifar10_augmentation.png\n", dir.c_str(), dir.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DataLoader throughput (images/s) for MNIST and CIFAR-10"};
  std::string mnist_dir = tutorial::default_data_dir("mnist");
  std::string cifar_dir = tutorial::default_data_dir("cifar10");
  std::string device = "cpu";
  int epochs = 3;
  std::string samples;
  app.add_option("--mnist", mnist_dir, "MNIST folder (datasets/fetch.sh mnist)");
  app.add_option("--cifar10", cifar_dir, "CIFAR-10 folder (datasets/fetch.sh cifar10 [--from ...])");
  app.add_option("--device", device, "cpu, cuda or auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--epochs", epochs, "timed epochs per configuration (median reported)")->check(CLI::Range(1, 100));
  app.add_option("--samples", samples, "also write CIFAR-10 sample and augmentation grids (PNG) into this folder");
  CLI11_PARSE(app, argc, argv);

  try {
    const Device dev = parse_device(device);
    std::printf("device: %s\n", dev == Device::cuda ? runtime::cuda_device_description().c_str() : "cpu");
    std::printf("%-14s %-34s %-16s %12s\n", "data set", "configuration", "path", "images/s");

    if (std::filesystem::exists(mnist_dir)) {
      const auto t0 = Clock::now();
      const data::Dataset train = data::load_mnist(mnist_dir, data::Split::train);
      std::printf("%-14s %-34s %-16s %11.2fs\n", "mnist/train", "load (60,000 images, IDX)", "-", seconds_since(t0));
      bench_set("mnist/train", train, dev, epochs, false);
    } else {
      std::printf("mnist: %s is absent, skipped (datasets/fetch.sh mnist)\n", mnist_dir.c_str());
    }

    if (std::filesystem::exists(cifar_dir)) {
      const data::Cifar10Source source = data::find_cifar10(cifar_dir);
      data::Dataset train;
      if (source.kind != data::Cifar10Source::Kind::image_folder) {  // the binary batches (or an error)
        const auto t0 = Clock::now();
        train = data::load_cifar10(cifar_dir, data::Split::train);
        std::printf("%-14s %-34s %-16s %11.2fs\n", "cifar10/train", "load (binary batches)", "-", seconds_since(t0));
      } else {
        // Cold: every image decoded (no cache read or written).
        data::ImageFolderOptions opt;
        opt.channels = static_cast<int>(data::kCifarChannels);
        opt.height = opt.width = data::kCifarSide;
        opt.use_cache = false;
        const auto t0 = Clock::now();
        const data::Dataset cold = data::load_image_folder(source.path, "train", opt);
        std::printf("%-14s %-34s %-16s %11.2fs\n", "cifar10/train",
                    ("load, decode " + std::to_string(cold.size()) + " images").c_str(), "-", seconds_since(t0));
        // Then the load training makes, which says whether the cache answered.
        data::ImageFolderInfo info;
        const auto t1 = Clock::now();
        train = data::load_cifar10(cifar_dir, data::Split::train, data::cifar10_normalization(), "", &info);
        const std::string how =
            info.from_cache ? "load (cache hit)" : "load (no cache: decoded " + std::to_string(info.decoded) + ")";
        std::printf("%-14s %-34s %-16s %11.2fs\n", "cifar10/train", how.c_str(), "-", seconds_since(t1));
      }
      if (!samples.empty()) write_samples(train, samples);
      bench_set("cifar10/train", train, dev, epochs, false);
      bench_set("cifar10/train", train, dev, epochs, true);
    } else {
      std::printf("cifar10: %s is absent, skipped (datasets/fetch.sh cifar10)\n", cifar_dir.c_str());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "loader_throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
