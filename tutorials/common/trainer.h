// The training and evaluation loops shared by the tutorial programs, the tests and the benchmarks:
// one place that says what an epoch is.
//
// No host synchronization inside a step: the running loss and the correct-prediction count stay
// on the device and are read once per progress update and at the end of the epoch.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "datasets/dataloader.h"
#include "framework/amp.h"
#include "framework/nn.h"
#include "framework/optim.h"

namespace hl::tutorial {

struct EpochResult {
  double loss = 0.0;      // mean training loss over the epoch
  double accuracy = 0.0;  // training accuracy (of the batches as they were seen)
  double seconds = 0.0;
  double images_per_second = 0.0;
  int64_t images = 0;
  int64_t skipped_steps = 0;  // steps the loss scaler skipped on overflow
  int64_t steps = 0;
  int64_t graph_captures = 0;  // TrainOptions::cuda_graph: steps recorded (each also replayed once)
  int64_t graph_replays = 0;   // steps run as a replay, the recorded ones included
};

struct TrainOptions {
  bool progress = true;   // a progress bar with images/s and ETA on stderr (only when it is a terminal)
  int64_t max_steps = -1; // stop the epoch after this many steps (smoke runs); < 0: the whole epoch, 0: no step
  amp::LossScaler* scaler = nullptr;  // loss scaling (paper §3.2); null: plain backward + step
  double clip_grad_norm = 0.0;        // > 0: clip the (unscaled) gradients to this global norm
  // Called after backward(), before unscaling and the optimizer step, with the step's index in the
  // epoch (0-based): the place to look at or change the gradients (tutorial 06 injects an inf here).
  std::function<void(int64_t step)> after_backward;
  // Called after each step (and the scaler's update()), with whether the update was applied (false:
  // the loss scaler skipped it on an overflow). Knowing that costs a host synchronization per step
  // (the decision is made on the device), paid only when a callback is installed.
  std::function<void(int64_t step, bool applied)> after_step;
  // Called after each step with its index only: costs no synchronization (e.g. a learning-rate
  // schedule). Runs before after_step when both are set.
  std::function<void(int64_t step)> on_step_end;
  // Record a training step as a CUDA graph and replay it for the epoch's batches: one launch per step
  // instead of hundreds (framework/cuda_graph.h). CUDA only. The epoch's first step runs as usual
  // (it sizes every cache and scratch buffer the recording will address); the second is recorded
  // and replayed; every later batch of the same shape is copied into the recorded input tensors and
  // replayed. A batch of another shape (a last, partial one) runs as usual; a changed learning rate,
  // or device memory given back to the driver (CudaGraph::stale), records the step again.
  // The learning rate costs a recording per change: it reaches the update kernel as a by-value
  // argument (kernels/optim.h, SgdParams::lr), so a recording holds the rate it saw. Under
  // follow_schedule (schedule.h) that is every step of a cosine and of a warm-up, and the two
  // milestones of the step schedule: each a capture plus an instantiation, which costs more than the
  // launches a replay saves (docs/performance.md). LrSchedule::rate_changes counts them beforehand,
  // and bench/train --cuda-graph prints a notice when there are any.
  // The results are those of the usual loop, bit for bit: the same kernels with the same arguments,
  // for a step that draws no host randomness. A training-mode Dropout draws its mask's seed on the
  // host every step, so a replay would reuse one mask; its recording is refused (dropout() checks
  // runtime::cuda_capturing()) and the epoch stops with that error. No canonical model has Dropout.
  // Refused with after_backward (host code inside a step would run once, when it is recorded) and
  // while the profiler is on (its timing events cannot be recorded).
  bool cuda_graph = false;
};

// Put an MNIST-sized training and test set on `dev` whole (MNIST: 47 MB as bytes, ~220 MB as
// normalized f32 for both splits), so that on the GPU each batch is one gather kernel with no host
// work and no host-to-device copy per batch (docs/performance.md). Nothing moves on the CPU. Give the
// loaders .device = dev as well.
void keep_on_device(data::Dataset& train, data::Dataset& test, Device dev);

// The first `per_class` images of every class (fewer where a class has fewer), in class order, on the
// host; an image whose label is outside [0, num_classes) is not taken. The CIFAR-10 image folder stores
// the classes one after the other, so a plain subset(0, n) of it is all airplanes: the smoke runs of 07
// (--model vgg_small) and 09 take this one instead.
data::Dataset balanced_subset(const data::Dataset& ds, int64_t per_class);

// How many images of each class `ds` holds (num_classes entries): to say what a subset covers. A label
// outside [0, num_classes) is counted nowhere.
std::vector<int64_t> class_counts(const data::Dataset& ds);

// The optimizer steps train_epoch runs per epoch on `loader`: its batches, or options.max_steps when fewer.
int64_t steps_per_epoch(const data::DataLoader& loader, const TrainOptions& options);

// One pass over the loader: forward, cross-entropy, backward, optimizer step.
EpochResult train_epoch(nn::Module& model, optim::Optimizer& opt, data::DataLoader& loader, int64_t epoch,
                        const TrainOptions& options = {});

// Accuracy of the model over every batch of the loader (eval mode, no graph recorded). The model is
// left in the mode it was found in (a model loaded for inference stays in eval mode), also when this
// throws. train(on) sets every submodule, so a model whose submodules were in different modes comes
// back with all of them in its own mode.
double evaluate(nn::Module& model, data::DataLoader& loader);

// The loss scaling a run in `precision` trains with (DESIGN.md §3): "none" for fp32, whose gradients
// are never FP16 and so never underflow it (a scaler there would only skip a step with an inf or NaN
// silently, and label the run as a scaled one); `spec` for fp16 and mixed. When the user gave
// --loss-scale explicitly (`given`) with fp32, a one-line note on stdout says it is not used, so that
// the flag is not dropped silently. Every training program (05, 07, 09, bench/train) goes through it.
std::string loss_scale_for(amp::Precision precision, const std::string& spec, bool given = false);

// One CSV field as RFC 4180 writes it: as it is when it holds no comma, double quote, CR or LF;
// otherwise in double quotes, each double quote inside doubled. Run labels such as
// "mixed, no scaling" or "mixed dynamic:init=1e9,hysteresis=2" would otherwise shift the columns
// after them (Python's csv module, which scripts/plot.py uses, reads the quoted form).
std::string csv_field(const std::string& text);

// A number as a CSV field: the shortest decimal that reads back as the same double (std::to_chars).
// An ostream's default six significant digits wrote a loss scale of 2^21 as 2.09715e+06, which reads
// back as 2097150; every tutorial's CSV numbers go through this instead. inf, -inf and nan are
// written so, as Python's float() reads them.
std::string csv_number(double x);

// The progress bar's text after `step` of `steps` steps (`images` images in `elapsed` seconds, a mean
// loss of `loss` so far): "epoch 2 [#########                     ] 3/10  loss 0.1250  256 img/s  ETA 3.5 s   ".
// train_epoch redraws it in place on a terminal, at most four times a second.
std::string progress_line(int64_t epoch, int64_t step, int64_t steps, int64_t images, double elapsed, double loss);

// "12.3 s" / "2 min 05 s"
std::string format_seconds(double s);

}  // namespace hl::tutorial
