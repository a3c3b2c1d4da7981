// Tutorial 09: VGG-small on CIFAR-10 in mixed precision (Micikevicius et al. 2018, §3.1-3.3): FP16
// working weights and activations, FP32 master weights, batch norm kept in FP32, dynamic loss
// scaling, random crop (pad 4) + horizontal flip, SGD with momentum 0.9 and weight decay 5e-4 under a
// warm-up + cosine learning-rate schedule. The chapter is tutorials/09_cifar10_vgg/README.md.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "datasets/cifar10.h"
#include "datasets/dataloader.h"
#include "datasets/image.h"
#include "framework/amp.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "kernels/conv.h"
#include "kernels/runtime.h"
#include "tutorials/common/cli.h"
#include "tutorials/common/models.h"
#include "tutorials/common/schedule.h"
#include "tutorials/common/trainer.h"

using namespace hl;
namespace fs = std::filesystem;

namespace {

// Which of load_cifar10's two forms the folder holds, for the header line (find_cifar10: where
// load_cifar10 looks).
std::string cifar_source(const std::string& dir) {
  const data::Cifar10Source s = data::find_cifar10(dir);
  switch (s.kind) {
    case data::Cifar10Source::Kind::binary: return "binary batches in " + s.path;
    case data::Cifar10Source::Kind::image_folder: return "image folder " + s.path;
    case data::Cifar10Source::Kind::none: break;
  }
  return "nothing recognizable in " + dir;  // load_cifar10 then throws with the fix
}

// Row 0: 8 training images (one per class) as stored; rows 1-3: what the loader's crop + flip made
// of them in epochs 1, 2 and 3. Each pixel enlarged 3x.
void save_augmentation_grid(const data::Dataset& train, uint64_t seed, const std::string& path) {
  const int64_t cols = 8;
  data::Dataset few = tutorial::balanced_subset(train, 1).subset(0, cols);
  std::vector<data::Image> tiles;
  auto add_batch = [&](const data::Augment& a, int64_t epoch) {
    data::DataLoader loader(few, {.batch_size = cols, .shuffle = false, .seed = seed, .augment = a});
    loader.start_epoch(epoch);
    data::Batch b;
    HL_CHECK(loader.next(b), "save_augmentation_grid: no batch");
    for (int64_t i = 0; i < cols; ++i)
      tiles.push_back(data::scale_nearest(
          data::tensor_to_image(b.x.slice_rows(i, i + 1).reshape({b.x.size(1), b.x.size(2), b.x.size(3)}), few.norm), 3));
  };
  add_batch(data::Augment{}, 0);
  for (int64_t epoch = 1; epoch <= 3; ++epoch) add_batch(data::Augment::cifar10(), epoch);
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
  data::write_png(path, data::make_grid(tiles, cols));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"halfling tutorial 09: VGG-small on CIFAR-10 in mixed precision with augmentation"};
  tutorial::CommonFlags f;
  f.epochs = 30;
  f.precision = "mixed";
  f.lr = 0.1;
  f.schedule = "cosine";
  f.warmup_epochs = 2;
  tutorial::add_common_flags(app, f, {"fp32", "fp16", "mixed"});
  tutorial::add_schedule_flags(app, f);
  double weight_decay = 5e-4;
  std::string samples = "09_augmentation.png";
  int64_t max_steps = -1;
  bool no_augment = false;
  std::string save_path;
  app.add_option("--weight-decay", weight_decay, "L2 weight decay added to the gradients (SGD)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--samples", samples, "write a PNG grid of augmented training images here (\"\": none)")
      ->capture_default_str();
  app.add_option("--max-steps", max_steps,
                 "stop each epoch after this many steps, at least 1 (default: the whole epoch; 3 with --smoke)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_flag("--no-augment", no_augment, "train without random crop and flip (to see what augmentation buys)");
  app.add_option("--save", save_path, "save the trained model (FP32 master weights) with its card to this checkpoint, "
                                      "for tutorial 10");
  CLI11_PARSE(app, argc, argv);

  try {
    if (f.list_variants) {
      tutorial::print_variants();
      return 0;
    }
    const Device dev = tutorial::apply_common_flags(f);
    // The output paths are checked now, before the data loads: found unwritable only after training,
    // the trained model would be lost.
    if (!save_path.empty()) tutorial::check_writable("--save", save_path, tutorial::WrittenBy::atomic_replace);
    if (!f.csv.empty()) tutorial::check_writable("--csv", f.csv, tutorial::WrittenBy::stream);
    const std::string dir = f.data.empty() ? tutorial::default_data_dir("cifar10") : f.data;
    const std::string source = cifar_source(dir);
    data::Dataset train = data::load_cifar10(dir, data::Split::train);
    data::Dataset test = data::load_cifar10(dir, data::Split::test);
    int64_t epochs = f.epochs;
    int64_t batch = f.batch;
    if (f.smoke) {  // seconds on a CPU: what CI runs so that this chapter never rots
      train = tutorial::balanced_subset(train, 52);  // 520 images
      test = tutorial::balanced_subset(test, 10);    // 100 images
      epochs = tutorial::smoke_epochs(f, 2);
      batch = std::min<int64_t>(batch, 16);
      if (max_steps < 0) max_steps = 3;
      f.warmup_epochs = std::min(f.warmup_epochs, 1.0);  // so that the short run shows the warm-up and the decay
    }
    const amp::Precision precision = amp::parse_precision(f.precision);
    const DType dt = amp::compute_dtype(precision);
    // fp32 trains without loss scaling (DESIGN.md §3); an explicit --loss-scale with it gets a note.
    const std::string loss_scale = tutorial::loss_scale_for(precision, f.loss_scale, app.count("--loss-scale") > 0);
    const std::string scale_str = amp::ScalerConfig::parse(loss_scale).str();
    std::printf("halfling 09_cifar10_vgg: VGG-small on CIFAR-10 (%s), %lld train / %lld test images, %lld epoch(s), "
                "batch %lld, device %s%s, precision %s, loss scale %s\n",
                source.c_str(), static_cast<long long>(train.size()), static_cast<long long>(test.size()),
                static_cast<long long>(epochs), static_cast<long long>(batch), device_name(dev),
                dev == Device::cuda ? (" (" + runtime::cuda_device_description() + ")").c_str() : "",
                f.precision.c_str(), scale_str.c_str());

    if (!samples.empty()) {
      save_augmentation_grid(train, f.seed, samples);
      std::printf("augmentation samples: wrote %s (row 1: as stored; rows 2-4: random crop (pad 4) + flip in "
                  "epochs 1-3)\n",
                  samples.c_str());
    }

    // Memory above what is already held (the data sets): weights, masters, gradients, momenta, activations.
    const size_t baseline = memory_stats(dev).current_bytes;

    Generator gen(f.seed);
    std::shared_ptr<nn::Sequential> model = nn::vgg_small(gen);
    model->fuse_linear_relu(true);
    model->to(dev);
    // The FP32 master copy is taken now, from the FP32 initialization (paper §3.1), before the
    // weights become FP16 working copies.
    optim::SGD sgd(model->parameters(), {.lr = f.lr,
                                         .momentum = f.momentum,
                                         .weight_decay = weight_decay,
                                         .master_weights = amp::uses_master_weights(precision)});
    model->to(dt);  // BatchNorm2d keeps FP32 (its param_dtype), everything else becomes dt
    std::printf("%s", model->summary().c_str());

    // Show §3.3's exception: under mixed, the first convolution's weights are FP16 working copies,
    // the first batch norm's parameters and statistics stay FP32.
    for (size_t i = 0; i < model->size(); ++i) {
      if (auto* conv = dynamic_cast<nn::Conv2d*>(&(*model)[i])) {
        std::printf("dtypes: layer %zu %s: weight %s, bias %s\n", i, conv->name().c_str(), dtype_name(conv->weight.dtype()),
                    conv->bias.defined() ? dtype_name(conv->bias.dtype()) : "(none)");
        break;
      }
    }
    for (size_t i = 0; i < model->size(); ++i) {
      if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&(*model)[i])) {
        std::printf("dtypes: layer %zu %s: weight %s, bias %s, running_mean %s, running_var %s\n", i, bn->name().c_str(),
                    dtype_name(bn->weight.dtype()), dtype_name(bn->bias.dtype()), dtype_name(bn->running_mean.dtype()),
                    dtype_name(bn->running_var.dtype()));
        break;
      }
    }
    std::printf("optimizer: SGD, momentum %g, weight decay %g, master weights %s\n", f.momentum, weight_decay,
                sgd.has_master_weights() ? "FP32" : "none (the update goes to the weights themselves)");
    std::printf("convolution variant: %s\n", tutorial::conv_variant_for(dev, dt).c_str());

    amp::LossScaler scaler(amp::ScalerConfig::parse(loss_scale));
    data::DataLoader::Options train_opts{.batch_size = batch, .shuffle = true, .seed = f.seed, .device = dev, .dtype = dt};
    if (!no_augment) train_opts.augment = data::Augment::cifar10();
    data::DataLoader train_loader(train, train_opts);
    data::DataLoader test_loader(test, {.batch_size = 500, .shuffle = false, .device = dev, .dtype = dt});

    tutorial::TrainOptions opts;
    opts.scaler = &scaler;
    opts.max_steps = max_steps;
    // After each step (applied or skipped), the rate of the next one; no host synchronization.
    const tutorial::LrSchedule lrs = tutorial::follow_schedule_flags(opts, sgd, f, train_loader, epochs);
    std::printf("learning rate: %s\n", lrs.str().c_str());

    std::ofstream csv;
    if (!f.csv.empty()) {
      csv.open(f.csv);
      HL_CHECK(csv.good(), "--csv: cannot write ", f.csv);
      csv << "epoch,lr,train_loss,train_acc,test_acc,seconds,images_per_second,skipped_steps,loss_scale,peak_mib\n";
    }
    double total_seconds = 0.0, test_acc = 0.0, best_acc = 0.0, total_images = 0.0;
    int64_t total_skipped = 0, total_steps = 0;
    size_t peak = baseline;  // the most held by the training steps so far
    for (int64_t e = 1; e <= epochs; ++e) {
      const double lr_start = sgd.lr();
      // The training steps' peak alone: reset before the epoch's training and read before the
      // evaluation, whose no-grad batches of 500 test images would otherwise set it.
      reset_peak_memory(dev);
      const tutorial::EpochResult r = tutorial::train_epoch(*model, sgd, train_loader, e, opts);
      peak = std::max(peak, memory_stats(dev).peak_bytes);
      const double peak_mib = static_cast<double>(peak - baseline) / (1 << 20);
      test_acc = tutorial::evaluate(*model, test_loader);
      best_acc = std::max(best_acc, test_acc);
      total_seconds += r.seconds;
      total_images += static_cast<double>(r.images);
      total_skipped += r.skipped_steps;
      total_steps += r.steps;
      std::printf("epoch %lld/%lld  lr %.4f  loss %.4f  train acc %.2f%%  test acc %.2f%%  %.1f s  (%.0f img/s)  "
                  "skipped %lld  scale %.15g  peak %.1f MiB\n",
                  static_cast<long long>(e), static_cast<long long>(epochs), lr_start, r.loss, 100 * r.accuracy,
                  100 * test_acc, r.seconds, r.images_per_second, static_cast<long long>(r.skipped_steps),
                  scaler.get_scale(), peak_mib);
      std::fflush(stdout);
      if (csv.is_open()) {
        csv << e << "," << tutorial::csv_number(lr_start) << "," << tutorial::csv_number(r.loss) << ","
            << tutorial::csv_number(r.accuracy) << "," << tutorial::csv_number(test_acc) << ","
            << tutorial::csv_number(r.seconds) << "," << tutorial::csv_number(r.images_per_second) << ","
            << r.skipped_steps << ","
            << tutorial::csv_number(scaler.get_scale()) << "," << tutorial::csv_number(peak_mib) << "\n";
      }
    }
    const double peak_mib = static_cast<double>(peak - baseline) / (1 << 20);
    std::printf("final test accuracy %.2f%% (best %.2f%%) after %lld epoch(s); %.0f img/s, %.1f s per epoch on %s; "
                "peak memory %.1f MiB; skipped steps %lld / %lld\n",
                100 * test_acc, 100 * best_acc, static_cast<long long>(epochs),
                total_seconds > 0 ? total_images / total_seconds : 0.0, total_seconds / static_cast<double>(epochs),
                device_name(dev), peak_mib, static_cast<long long>(total_skipped), static_cast<long long>(total_steps));
    std::printf("(peak memory: the most bytes held on %s above the loaded data sets during the training steps: "
                "weights, masters, gradients, momenta, activations; the test evaluation is not counted)\n",
                device_name(dev));
    if (!save_path.empty()) {
      const auto card = tutorial::ModelCard::describe("vgg_small", "cifar10", train, test_acc);
      tutorial::save_model_fp32(save_path, *model, sgd, card);
      std::printf("saved the model to %s (classify a photo with: 10_your_image --checkpoint %s --image IMAGE)\n",
                  save_path.c_str(), save_path.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "09_cifar10_vgg: %s\n", e.what());
    return 1;
  }
}
