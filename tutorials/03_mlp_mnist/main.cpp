// Tutorial 03: MLP-512 (784-512-512-10, ReLU) trained in FP32 on MNIST or Fashion-MNIST.
// The chapter is tutorials/03_mlp_mnist/README.md.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "datasets/dataloader.h"
#include "datasets/mnist.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "kernels/runtime.h"
#include "tutorials/common/cli.h"
#include "tutorials/common/models.h"
#include "tutorials/common/schedule.h"
#include "tutorials/common/trainer.h"

using namespace hl;

int main(int argc, char** argv) {
  CLI::App app{"halfling tutorial 03: MLP-512 on MNIST in FP32"};
  tutorial::CommonFlags f;
  tutorial::add_common_flags(app, f, {"fp32"});  // fp16 and mixed arrive in tutorial 05
  tutorial::add_schedule_flags(app, f);
  std::string dataset = "mnist";
  int64_t train_subset = 0;
  app.add_option("--dataset", dataset, "mnist or fashion-mnist")
      ->check(CLI::IsMember({"mnist", "fashion-mnist"}))
      ->capture_default_str();
  app.add_option("--train-subset", train_subset, "train on the first N images only (0: all)")->check(CLI::Range(0, 60000));
  std::string save_path;
  app.add_option("--save", save_path, "save the trained model with its card (model, data set, normalization, classes) "
                                      "to this checkpoint, for tutorial 10");
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
    const std::string dir = f.data.empty() ? tutorial::default_data_dir(dataset) : f.data;
    // A function pointer carries no default arguments: pass each set's own normalization explicitly.
    const bool mnist = dataset == "mnist";
    auto load = mnist ? data::load_mnist : data::load_fashion_mnist;
    const data::Normalization norm = mnist ? data::mnist_normalization() : data::fashion_mnist_normalization();
    data::Dataset train = load(dir, data::Split::train, norm);
    data::Dataset test = load(dir, data::Split::test, norm);
    int64_t epochs = f.epochs;
    if (f.smoke) {  // seconds, not minutes: what CI runs so that this chapter never rots
      train = train.subset(0, 2048);
      test = test.subset(0, 1000);
      epochs = tutorial::smoke_epochs(f, 1);
    } else if (train_subset > 0) {
      train = train.subset(0, train_subset);
    }
    tutorial::keep_on_device(train, test, dev);  // on a GPU: each batch is one gather there

    std::printf("halfling 03_mlp_mnist: %s, %lld train / %lld test images, device %s%s, precision %s\n",
                dataset.c_str(), static_cast<long long>(train.size()), static_cast<long long>(test.size()),
                device_name(dev), dev == Device::cuda ? (" (" + runtime::cuda_device_description() + ")").c_str() : "",
                f.precision.c_str());

    Generator gen(f.seed);
    auto model = nn::mlp512(gen);
    model->to(dev);
    optim::SGD sgd(model->parameters(), {.lr = f.lr, .momentum = f.momentum});
    std::printf("%s", model->summary().c_str());

    data::DataLoader train_loader(train, {.batch_size = f.batch, .shuffle = true, .seed = f.seed, .device = dev});
    data::DataLoader test_loader(test, {.batch_size = 1000, .shuffle = false, .device = dev});

    std::ofstream csv;
    if (!f.csv.empty()) {
      csv.open(f.csv);
      HL_CHECK(csv.good(), "--csv: cannot write ", f.csv);
      csv << "epoch,train_loss,train_acc,test_acc,seconds,images_per_second\n";
    }
    tutorial::TrainOptions opts;
    const tutorial::LrSchedule lrs = tutorial::follow_schedule_flags(opts, sgd, f, train_loader, epochs);
    std::printf("learning rate: %s\n", lrs.str().c_str());
    double total_seconds = 0.0, test_acc = 0.0;
    for (int64_t e = 1; e <= epochs; ++e) {
      const tutorial::EpochResult r = tutorial::train_epoch(*model, sgd, train_loader, e, opts);
      test_acc = tutorial::evaluate(*model, test_loader);
      total_seconds += r.seconds;
      std::printf("epoch %lld/%lld  loss %.4f  train acc %.2f%%  test acc %.2f%%  %.1f s  (%.0f img/s)\n",
                  static_cast<long long>(e), static_cast<long long>(epochs), r.loss, 100 * r.accuracy, 100 * test_acc,
                  r.seconds, r.images_per_second);
      if (csv.is_open()) {
        csv << e << "," << tutorial::csv_number(r.loss) << "," << tutorial::csv_number(r.accuracy) << ","
            << tutorial::csv_number(test_acc) << "," << tutorial::csv_number(r.seconds) << ","
            << tutorial::csv_number(r.images_per_second) << "\n";
      }
    }
    std::printf("final test accuracy %.2f%% after %lld epoch(s), %.1f s per epoch on %s\n", 100 * test_acc,
                static_cast<long long>(epochs), total_seconds / static_cast<double>(epochs), device_name(dev));
    if (!save_path.empty()) {
      tutorial::save_model(save_path, *model, tutorial::ModelCard::describe("mlp512", dataset, train, test_acc));
      std::printf("saved the model to %s (classify an image with: 10_your_image --checkpoint %s --image IMAGE)\n",
                  save_path.c_str(), save_path.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "03_mlp_mnist: %s\n", e.what());
    return 1;
  }
}
