// bench/train: end-to-end training throughput of the canonical models (DESIGN.md §4), the halfling
// half of the side-by-side comparison with PyTorch (bench/pytorch/train.py, bench/compare_train.sh).
//
//   build/bench/train --model mlp512 --precision mixed --device cuda --epochs 3
//
// Prints, per epoch, the training seconds and images/s (the clock stops after the GPU has finished
// the epoch's work), then the test accuracy and the peak memory held on the device above the data
// sets: over the whole run (the evaluation at batch 1000 included, as bench/pytorch/train.py measures
// it) and over the training steps alone. --json adds one
// machine-readable line for the wrapper. --export DIR writes the exact inputs PyTorch must see: the
// normalized images and labels as .npy, and the shuffled order of every epoch, so both frameworks
// train on the same data in the same order, plus the model's initial weights (init_NNN.npy, in
// parameter order) so that PyTorch can start from them. --dump-weights DIR writes the weights after
// training (final_NNN.npy; the FP32 masters under mixed): with both, tests/python/pytorch_trajectory.py
// checks that the two frameworks compute the same training run.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/cifar10.h"
#include "datasets/dataloader.h"
#include "datasets/mnist.h"
#include "framework/amp.h"
#include "framework/autograd.h"
#include "framework/nn.h"
#include "framework/optim.h"
#include "framework/profiler.h"
#include "kernels/optim.h"
#include "kernels/runtime.h"
#include "tutorials/common/cli.h"
#include "tutorials/common/schedule.h"
#include "tutorials/common/trainer.h"

using namespace hl;

namespace {

struct ModelSpec {
  std::string dataset;  // "mnist" or "cifar10"
  double weight_decay;
  std::function<std::shared_ptr<nn::Module>(Generator&)> make;
};

// The canonical models and the data set each trains on. SGD momentum 0.9, lr 0.05 for all;
// VGG-small adds the usual 5e-4 weight decay (the PyTorch script uses the same values).
const std::map<std::string, ModelSpec>& models() {
  static const std::map<std::string, ModelSpec> m = {
      {"mlp512", {"mnist", 0.0, [](Generator& g) -> std::shared_ptr<nn::Module> { return nn::mlp512(g); }}},
      {"lenet", {"mnist", 0.0, [](Generator& g) -> std::shared_ptr<nn::Module> { return nn::lenet(g); }}},
      {"vgg_small", {"cifar10", 5e-4, [](Generator& g) -> std::shared_ptr<nn::Module> { return nn::vgg_small(g); }}},
  };
  return m;
}

std::string model_names() {
  std::string s;
  for (const auto& [name, spec] : models()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

// A .npy file (format version 1.0): a little-endian array in C order. numpy reads it directly.
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  std::ostringstream dict;
  dict << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  dict << "), }";
  std::string header = dict.str();
  // magic (6) + version (2) + header length (2) + header, padded with spaces and a newline to 64 bytes.
  const size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::ofstream f(path, std::ios::binary);
  HL_CHECK(f.good(), "train --export: cannot write ", path);
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  HL_CHECK(f.good(), "train --export: writing ", path, " failed");
}

void export_set(const std::string& dir, const std::string& prefix, const data::Dataset& ds) {
  const Tensor x = ds.images.to(Device::cpu);  // data sets are dense f32 [N, C, H, W]
  const Tensor y = ds.labels.to(Device::cpu);
  write_npy(dir + "/" + prefix + "_x.npy", "<f4", x.shape(), x.data_ptr(), static_cast<size_t>(x.numel()) * 4);
  write_npy(dir + "/" + prefix + "_y.npy", "<i4", y.shape(), y.data_ptr(), static_cast<size_t>(y.numel()) * 4);
}

// Each tensor as DIR/<prefix>_NNN.npy (f32, numbered in parameter order, as PyTorch's parameters()).
// Files of an earlier export of another model are removed first, so a directory never holds a mix.
void write_weights(const std::string& dir, const std::string& prefix, const std::vector<Tensor>& tensors) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix + "_", 0) == 0 && entry.path().extension() == ".npy") fs::remove(entry.path());
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    NoGradGuard no_grad;
    const Tensor t = tensors[i].to(DType::f32).to(Device::cpu);
    char name[32];
    std::snprintf(name, sizeof name, "%s_%03zu.npy", prefix.c_str(), i);
    write_npy(dir + "/" + name, "<f4", t.shape(), t.data_ptr(), static_cast<size_t>(t.numel()) * 4);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"halfling bench/train: seconds per epoch, images/s and peak memory of a canonical model"};
  tutorial::CommonFlags f;
  f.epochs = 3;
  tutorial::add_common_flags(app, f, {"fp32", "fp16", "mixed"});
  tutorial::add_schedule_flags(app, f);  // default constant: DESIGN.md §4 as it stands, as the PyTorch script
  std::string model_name = "mlp512", export_dir, dump_dir;
  bool json = false, fuse = true, multi_tensor = true, profile = false, sync_each_step = false, cuda_graph = false;
  int64_t max_steps = -1;
  app.add_option("--model", model_name, "the model: " + model_names());
  app.add_option("--max-steps", max_steps,
                 "stop each epoch after this many steps, at least 1 (default: the whole epoch; 4 with --smoke)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--export", export_dir, "write the data and the epochs' orders as .npy for bench/pytorch/train.py, then exit");
  app.add_option("--dump-weights", dump_dir, "after training, write the weights (FP32 masters under mixed) as .npy to this directory");
  app.add_flag("--json", json, "print a last line of JSON with the results");
  app.add_flag("--fuse,!--no-fuse", fuse, "fuse each Linear/Conv2d + ReLU into one epilogue (default on)");
  app.add_flag("--multi-tensor,!--no-multi-tensor", multi_tensor,
               "one launch of each optimizer pass (unscale, update) for many tensors (default on); off: one launch "
               "per tensor, to measure what batching saves (--device cuda only: the CPU passes loop over the tensors "
               "anyway)");
  app.add_flag("--profile", profile,
               "print where a step's time goes (framework/profiler.h): per layer, per backward op, optimizer; "
               "from epoch 2 on when there are several. Slows the run: take speed numbers from a run without it");
  app.add_flag("--sync-each-step", sync_each_step,
               "read back after every step whether the loss scaler applied it (one host synchronization per "
               "step, what PyTorch's GradScaler does): to measure what halfling's synchronization-free step saves "
               "(docs/performance.md)");
  app.add_flag("--cuda-graph", cuda_graph,
               "record a training step as a CUDA graph and replay it for the epoch's batches: one launch per step "
               "(framework/cuda_graph.h; --device cuda only; not with --profile)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (f.list_variants) {
      tutorial::print_variants();
      return 0;
    }
    const auto it = models().find(model_name);
    HL_CHECK(it != models().end(), "train: unknown --model '", model_name, "' (known: ", model_names(), ")");
    const ModelSpec& spec = it->second;
    HL_CHECK(f.csv.empty(), "train: --csv: this program writes no CSV (its results are the printed lines and "
             "--json's last line; --dump-weights writes the weights); the tutorials write one");
    const Device dev = tutorial::apply_common_flags(f);
    const amp::Precision precision = amp::parse_precision(f.precision);
    HL_CHECK(multi_tensor || dev == Device::cuda,
             "train: --no-multi-tensor changes only the CUDA optimizer's launches; with --device cpu it would "
             "measure nothing (the CPU passes loop over the tensors in any case)");
    kernels::set_multi_tensor(multi_tensor);
    HL_CHECK(!cuda_graph || dev == Device::cuda,
             "train: --cuda-graph records the CUDA launches of a step; with --device cpu there are none to record");
    HL_CHECK(!cuda_graph || !profile,
             "train: --cuda-graph with --profile: the profiler's timing events cannot be recorded into a graph, and a "
             "replayed step has no layers to time; profile without the graph");

    const std::string dir = f.data.empty() ? tutorial::default_data_dir(spec.dataset) : f.data;
    data::Dataset train, test;
    if (spec.dataset == "mnist") {
      train = data::load_mnist(dir, data::Split::train);
      test = data::load_mnist(dir, data::Split::test);
    } else {
      // Every layout tutorials 07 and 09 read (datasets/cifar10.h): the binary batches in DIR or in
      // DIR/cifar-10-batches-bin/, or the image folder in DIR or DIR/cifar10-jpg/ (CIFAR-10's class names
      // checked), so that a --data that works for tutorial 09 works here.
      train = data::load_cifar10(dir, data::Split::train);
      test = data::load_cifar10(dir, data::Split::test);
    }
    if (f.smoke) {
      train = train.subset(0, std::min<int64_t>(train.size(), 1024));
      test = test.subset(0, std::min<int64_t>(test.size(), 512));
    }
    const bool augment = spec.dataset == "cifar10";

    if (!export_dir.empty()) {
      std::filesystem::create_directories(export_dir);
      export_set(export_dir, "train", train);
      export_set(export_dir, "test", test);
      data::DataLoader order_loader(train, {.batch_size = f.batch, .shuffle = true, .seed = f.seed});
      std::vector<int64_t> orders;
      for (int64_t e = 0; e < f.epochs; ++e) {
        order_loader.start_epoch(e);
        orders.insert(orders.end(), order_loader.order().begin(), order_loader.order().end());
      }
      write_npy(export_dir + "/order.npy", "<i8", {f.epochs, train.size()}, orders.data(), orders.size() * 8);
      Generator init_gen(f.seed);  // the same draws as the training run below
      write_weights(export_dir, "init", spec.make(init_gen)->parameters());
      std::printf("exported %s (%lld train, %lld test images, %lld epoch orders) to %s\n", spec.dataset.c_str(),
                  static_cast<long long>(train.size()), static_cast<long long>(test.size()),
                  static_cast<long long>(f.epochs), export_dir.c_str());
      return 0;
    }

    // MNIST lives on the GPU whole (CIFAR-10's augmentation is host work, so it stays there).
    if (spec.dataset == "mnist") tutorial::keep_on_device(train, test, dev);
    reset_peak_memory(dev);
    const size_t baseline = memory_stats(dev).current_bytes;

    Generator gen(f.seed);
    std::shared_ptr<nn::Module> model = spec.make(gen);
    if (auto* seq = dynamic_cast<nn::Sequential*>(model.get())) seq->fuse_linear_relu(fuse);
    model->to(dev);
    optim::SGD sgd(model->parameters(), {.lr = f.lr,
                                         .momentum = f.momentum,
                                         .weight_decay = spec.weight_decay,
                                         .master_weights = amp::uses_master_weights(precision)});
    const DType dt = amp::compute_dtype(precision);
    model->to(dt);
    // fp32 trains without loss scaling (DESIGN.md §3), as PyTorch's GradScaler(enabled=False) in the script.
    amp::LossScaler scaler(amp::ScalerConfig::parse(
        tutorial::loss_scale_for(precision, f.loss_scale, app.count("--loss-scale") > 0)));

    data::DataLoader::Options lo{.batch_size = f.batch, .shuffle = true, .seed = f.seed, .device = dev, .dtype = dt};
    if (augment) lo.augment = data::Augment::cifar10();
    data::DataLoader train_loader(train, lo);
    data::DataLoader test_loader(test, {.batch_size = 1000, .shuffle = false, .device = dev, .dtype = dt});
    tutorial::TrainOptions opts;
    opts.scaler = &scaler;
    opts.max_steps = f.smoke && max_steps < 0 ? 4 : max_steps;
    opts.cuda_graph = cuda_graph;
    // An installed after_step callback makes the trainer read the step's outcome back to the host
    // (tutorials/common/trainer.h): the per-step wait halfling's step otherwise avoids.
    if (sync_each_step) opts.after_step = [](int64_t, bool) {};
    const tutorial::LrSchedule lrs = tutorial::follow_schedule_flags(opts, sgd, f, train_loader, f.epochs);

    std::printf("halfling bench/train: %s on %s, %s, batch %lld, device %s%s, OMP threads %d\n", model_name.c_str(),
                spec.dataset.c_str(), f.precision.c_str(), static_cast<long long>(f.batch), device_name(dev),
                dev == Device::cuda ? (" (" + runtime::cuda_device_description() + ")").c_str() : "",
                omp_get_max_threads());
    std::printf("learning rate: %s\n", lrs.str().c_str());
    // A rate that changes records the graph again at each change (tutorials/common/trainer.h): say so
    // before the epochs, so that slow --cuda-graph epochs are not read as the graph's own cost.
    if (cuda_graph) {
      const std::string notice = tutorial::cuda_graph_schedule_notice(lrs);
      if (!notice.empty()) std::printf("%s\n", notice.c_str());
    }
    std::printf("Linear/Conv2d + ReLU: %s; optimizer passes: %s; steps: %s\n",
                fuse ? "fused epilogues" : "unfused (--no-fuse)",
                multi_tensor ? "multi-tensor launches" : "one launch per tensor (--no-multi-tensor)",
                cuda_graph ? "replays of a recorded CUDA graph (--cuda-graph)" : "launched one kernel at a time");
    std::vector<double> seconds;
    int64_t images_per_epoch = 0;
    int64_t skipped = 0;
    int64_t profiled_steps = 0;
    int64_t steps = 0, host_reads = 0;  // reads back to the host during the training epochs
    int64_t captures = 0, replays = 0;  // --cuda-graph
    for (int64_t e = 0; e < f.epochs; ++e) {
      // The profile leaves out the first epoch's warm-up, as the summary does, when there are more.
      const bool profiled = profile && (e > 0 || f.epochs == 1);
      if (profiled && !profiler::enabled()) profiler::start(dev == Device::cuda);
      const int64_t reads_before = debug::host_reads();
      const tutorial::EpochResult r = tutorial::train_epoch(*model, sgd, train_loader, e, opts);
      host_reads += debug::host_reads() - reads_before;
      steps += r.steps;
      if (profiled) profiled_steps += r.steps;
      seconds.push_back(r.seconds);
      images_per_epoch = r.images;
      skipped += r.skipped_steps;
      captures += r.graph_captures;
      replays += r.graph_replays;
      std::printf("epoch %lld  %.3f s  %.0f img/s  loss %.4f  skipped %lld\n", static_cast<long long>(e + 1),
                  r.seconds, r.images_per_second, r.loss, static_cast<long long>(r.skipped_steps));
    }
    // Two peaks, both above the data sets. The training steps' own, read here, as the last epoch ends
    // (the epochs run back to back, with no evaluation between them). And the peak of the whole run,
    // evaluation at batch 1000 included (below), which is what bench/pytorch/train.py reports
    // (torch.cuda.max_memory_allocated after its evaluation at batch 1000): the one to compare with
    // PyTorch (bench/README.md).
    const double train_peak_mib = static_cast<double>(memory_stats(dev).peak_bytes - baseline) / (1 << 20);
    if (profile) {
      profiler::stop();
      std::printf("%s", profiler::report(profiled_steps).c_str());
    }
    if (!dump_dir.empty()) {
      std::vector<Tensor> weights = model->parameters();
      for (size_t i = 0; i < weights.size(); ++i)
        if (sgd.has_master_weights() && sgd.master_weights()[i].defined()) weights[i] = sgd.master_weights()[i];
      write_weights(dump_dir, "final", weights);
    }
    const double accuracy = tutorial::evaluate(*model, test_loader);
    const double peak_mib = static_cast<double>(memory_stats(dev).peak_bytes - baseline) / (1 << 20);
    // The first epoch pays for warm-up (allocator, caches, lazy initialization): with more than one
    // epoch it is left out of the summary, as the PyTorch script does.
    std::vector<double> timed(seconds.size() > 1 ? seconds.begin() + 1 : seconds.begin(), seconds.end());
    std::sort(timed.begin(), timed.end());
    const double median = timed[timed.size() / 2];
    const double ips = static_cast<double>(images_per_epoch) / median;
    std::printf("summary: %.3f s/epoch (median of %zu), %.0f img/s, test accuracy %.2f%%, peak memory %.1f MiB "
                "(training steps alone %.1f MiB), skipped steps %lld\n",
                median, timed.size(), ips, 100 * accuracy, peak_mib, train_peak_mib, static_cast<long long>(skipped));
    // Each is a wait for the device on CUDA: a few per epoch (its loss, accuracy and skipped count),
    // plus one per step with --sync-each-step.
    std::printf("host reads while training: %lld in %lld steps%s\n", static_cast<long long>(host_reads),
                static_cast<long long>(steps), sync_each_step ? " (--sync-each-step)" : "");
    if (cuda_graph)
      std::printf("CUDA graph: %lld steps replayed, %lld recordings (one per epoch, more if the step had to be "
                  "recorded again)\n",
                  static_cast<long long>(replays), static_cast<long long>(captures));
    if (json) {
      std::printf("{\"framework\": \"halfling\", \"model\": \"%s\", \"precision\": \"%s\", \"device\": \"%s\", "
                  "\"seconds_per_epoch\": %.4f, \"images_per_second\": %.1f, \"test_accuracy\": %.4f, "
                  "\"peak_mib\": %.1f, \"train_peak_mib\": %.1f, \"epochs\": %lld, \"steps\": %lld, "
                  "\"host_reads\": %lld, \"sync_each_step\": %s, \"fuse\": %s, \"multi_tensor\": %s, "
                  "\"cuda_graph\": %s, \"graph_replays\": %lld, \"schedule\": \"%s\", \"warmup_epochs\": %g}\n",
                  model_name.c_str(), f.precision.c_str(), device_name(dev), median, ips, accuracy, peak_mib,
                  train_peak_mib, static_cast<long long>(f.epochs), static_cast<long long>(steps),
                  static_cast<long long>(host_reads),
                  sync_each_step ? "true" : "false", fuse ? "true" : "false", multi_tensor ? "true" : "false",
                  cuda_graph ? "true" : "false", static_cast<long long>(replays), f.schedule.c_str(),
                  f.warmup_epochs);
    }
    return 0;
  } catch (const std::exception& e) {
    // The program's own checks name it already ("train: --csv: ..."); the library's errors do not.
    const std::string what = e.what();
    std::fprintf(stderr, "%s%s\n", what.starts_with("train: ") ? "" : "train: ", what.c_str());
    return 1;
  }
}
