// Tutorial 07: convolutional networks in mixed precision. LeNet (DESIGN.md §4) on MNIST by default,
// or VGG-small on CIFAR-10 (random crop + flip) with --model vgg_small. Convolutions read FP16 and
// accumulate in FP32 like GEMM (paper §3.3); batch norm keeps its statistics and parameters in FP32.
// The chapter is tutorials/07_conv_lenet/README.md.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "datasets/cifar10.h"
#include "datasets/dataloader.h"
#include "datasets/mnist.h"
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

int main(int argc, char** argv) {
  CLI::App app{"halfling tutorial 07: LeNet on MNIST (or VGG-small on CIFAR-10) with convolutions in mixed precision"};
  tutorial::CommonFlags f;
  f.epochs = 5;
  f.precision = "mixed";
  tutorial::add_common_flags(app, f, {"fp32", "fp16", "mixed"});
  tutorial::add_schedule_flags(app, f);
  std::string model_name = "lenet";
  bool no_fuse = false;
  int64_t max_steps = -1;
  app.add_option("--model", model_name,
                 "lenet (MNIST) or vgg_small (CIFAR-10: the binary batches or the JPEG image folder)")
      ->check(CLI::IsMember({"lenet", "vgg_small"}))
      ->capture_default_str();
  app.add_flag("--no-fuse", no_fuse, "run each ReLU as its own op instead of in the conv/GEMM epilogue");
  app.add_option("--max-steps", max_steps,
                 "stop each epoch after this many steps, at least 1 (default: the whole epoch; 2 with --smoke "
                 "--model vgg_small)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  std::string save_path;
  app.add_option("--save", save_path, "save the trained model (FP32 master weights) with its card (model, data set, "
                                      "normalization, classes) to this checkpoint, for tutorial 10");
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
    const bool lenet = model_name == "lenet";
    data::Dataset train, test;
    if (lenet) {
      const std::string dir = f.data.empty() ? tutorial::default_data_dir("mnist") : f.data;
      train = data::load_mnist(dir, data::Split::train);
      test = data::load_mnist(dir, data::Split::test);
    } else {
      const std::string dir = f.data.empty() ? tutorial::default_data_dir("cifar10") : f.data;
      // Either form datasets/fetch.sh makes (the binary batches, or the JPEG image folder), as tutorial 09.
      train = data::load_cifar10(dir, data::Split::train);
      test = data::load_cifar10(dir, data::Split::test);
    }
    int64_t epochs = f.epochs;
    int64_t batch = f.batch;
    std::string smoke_note;  // printed under the header line
    if (f.smoke) {  // seconds on a CPU: what CI runs so that this chapter never rots
      if (lenet) {  // MNIST's files are in no class order: its first images hold every digit
        train = train.subset(0, 512);
        test = test.subset(0, 500);
      } else {  // the CIFAR-10 image folder is sorted by class: the first 64 were all airplanes
        train = tutorial::balanced_subset(train, 10);  // 100 images, as in 09
        test = tutorial::balanced_subset(test, 10);
        const auto classes = [](const data::Dataset& d) {
          const auto counts = tutorial::class_counts(d);
          return std::count_if(counts.begin(), counts.end(), [](int64_t n) { return n > 0; });
        };
        // Counted from the labels, so that a smoke run of one class shows (and a test can see it).
        smoke_note = "smoke subsets (the first 10 images of each class): " + std::to_string(train.size()) +
                     " train images in " + std::to_string(classes(train)) + " classes, " +
                     std::to_string(test.size()) + " test images in " + std::to_string(classes(test)) + " classes\n";
      }
      epochs = tutorial::smoke_epochs(f, 1);
      if (!lenet) batch = std::min<int64_t>(batch, 16);
    }
    // MNIST lives on a GPU whole: each batch is one gather kernel there, no copy from the host.
    // (CIFAR-10's augmentation runs on the host, so its images stay there.)
    if (lenet) tutorial::keep_on_device(train, test, dev);
    const amp::Precision precision = amp::parse_precision(f.precision);
    const DType dt = amp::compute_dtype(precision);
    // fp32 trains without loss scaling (DESIGN.md §3); an explicit --loss-scale with it gets a note.
    const std::string loss_scale = tutorial::loss_scale_for(precision, f.loss_scale, app.count("--loss-scale") > 0);
    std::printf("halfling 07_conv_lenet: %s on %s, %lld train / %lld test images, %lld epoch(s), batch %lld, device %s%s, "
                "precision %s, loss scale %s\n",
                model_name.c_str(), lenet ? "MNIST" : "CIFAR-10", static_cast<long long>(train.size()),
                static_cast<long long>(test.size()), static_cast<long long>(epochs), static_cast<long long>(batch),
                device_name(dev), dev == Device::cuda ? (" (" + runtime::cuda_device_description() + ")").c_str() : "",
                f.precision.c_str(), amp::ScalerConfig::parse(loss_scale).str().c_str());
    std::printf("%s", smoke_note.c_str());

    Generator gen(f.seed);
    std::shared_ptr<nn::Sequential> model = lenet ? nn::lenet(gen) : nn::vgg_small(gen);
    model->fuse_linear_relu(!no_fuse);
    model->to(dev);
    // The FP32 master copy is taken now, from the FP32 initialization (paper §3.1), before the
    // weights become FP16 working copies. BatchNorm2d stays FP32 through model->to(f16).
    optim::SGD sgd(model->parameters(),
                   {.lr = f.lr, .momentum = f.momentum, .master_weights = amp::uses_master_weights(precision)});
    model->to(dt);
    std::printf("%s", model->summary().c_str());
    std::printf("convolution variant: %s\n", tutorial::conv_variant_for(dev, dt).c_str());

    amp::LossScaler scaler(amp::ScalerConfig::parse(loss_scale));
    data::DataLoader::Options train_opts{.batch_size = batch, .shuffle = true, .seed = f.seed, .device = dev, .dtype = dt};
    if (!lenet) train_opts.augment = data::Augment::cifar10();
    data::DataLoader train_loader(train, train_opts);
    data::DataLoader test_loader(test, {.batch_size = 500, .shuffle = false, .device = dev, .dtype = dt});
    tutorial::TrainOptions opts;
    opts.scaler = &scaler;
    // VGG-small's smoke run makes 2 steps unless --max-steps says otherwise (an explicit value wins, as in 09).
    opts.max_steps = f.smoke && !lenet && max_steps < 0 ? 2 : max_steps;
    const tutorial::LrSchedule lrs = tutorial::follow_schedule_flags(opts, sgd, f, train_loader, epochs);
    std::printf("learning rate: %s\n", lrs.str().c_str());

    std::ofstream csv;
    if (!f.csv.empty()) {
      csv.open(f.csv);
      HL_CHECK(csv.good(), "--csv: cannot write ", f.csv);
      csv << "epoch,train_loss,train_acc,test_acc,seconds,images_per_second,skipped_steps,loss_scale\n";
    }
    double total_seconds = 0.0, test_acc = 0.0;
    for (int64_t e = 1; e <= epochs; ++e) {
      const tutorial::EpochResult r = tutorial::train_epoch(*model, sgd, train_loader, e, opts);
      test_acc = tutorial::evaluate(*model, test_loader);
      total_seconds += r.seconds;
      std::printf("epoch %lld/%lld  loss %.4f  train acc %.2f%%  test acc %.2f%%  %.1f s  (%.0f img/s)  skipped %lld  "
                  "scale %.15g\n",
                  static_cast<long long>(e), static_cast<long long>(epochs), r.loss, 100 * r.accuracy, 100 * test_acc,
                  r.seconds, r.images_per_second, static_cast<long long>(r.skipped_steps), scaler.get_scale());
      std::fflush(stdout);
      if (csv.is_open()) {
        csv << e << "," << tutorial::csv_number(r.loss) << "," << tutorial::csv_number(r.accuracy) << ","
            << tutorial::csv_number(test_acc) << "," << tutorial::csv_number(r.seconds) << ","
            << tutorial::csv_number(r.images_per_second) << "," << r.skipped_steps << ","
            << tutorial::csv_number(scaler.get_scale()) << "\n";
      }
    }
    std::printf("final test accuracy %.2f%% after %lld epoch(s), %.1f s per epoch on %s\n", 100 * test_acc,
                static_cast<long long>(epochs), total_seconds / static_cast<double>(epochs), device_name(dev));
    if (!save_path.empty()) {
      const auto card = tutorial::ModelCard::describe(model_name, lenet ? "mnist" : "cifar10", train, test_acc);
      tutorial::save_model_fp32(save_path, *model, sgd, card);
      std::printf("saved the model to %s (classify an image with: 10_your_image --checkpoint %s --image IMAGE)\n",
                  save_path.c_str(), save_path.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "07_conv_lenet: %s\n", e.what());
    return 1;
  }
}
