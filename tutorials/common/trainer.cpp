#include "tutorials/common/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/cuda_graph.h"
#include "framework/ops.h"
#include "framework/profiler.h"
#include "kernels/runtime.h"

namespace hl::tutorial {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Redraws the bar in place, padded to the widest one drawn so far (`widest`, updated) so that a
// shorter line leaves nothing of a longer one behind.
void draw_progress(const std::string& line, size_t& widest) {
  widest = std::max(widest, line.size());
  std::fprintf(stderr, "\r%-*s", static_cast<int>(widest), line.c_str());
  std::fflush(stderr);
}

}  // namespace

std::string progress_line(int64_t epoch, int64_t step, int64_t steps, int64_t images, double elapsed, double loss) {
  const int width = 30;
  const int filled = steps > 0 ? static_cast<int>(width * std::clamp<int64_t>(step, 0, steps) / steps) : width;
  const double ips = elapsed > 0 ? static_cast<double>(images) / elapsed : 0.0;
  const double eta = step > 0 ? elapsed * static_cast<double>(steps - step) / static_cast<double>(step) : 0.0;
  std::string bar(static_cast<size_t>(width), ' ');
  bar.replace(0, static_cast<size_t>(filled), static_cast<size_t>(filled), '#');
  auto print = [&](char* buf, size_t size) {
    return std::snprintf(buf, size, "epoch %lld [%s] %lld/%lld  loss %.4f  %.0f img/s  ETA %s   ",
                         static_cast<long long>(epoch), bar.c_str(), static_cast<long long>(step),
                         static_cast<long long>(steps), loss, ips, format_seconds(eta).c_str());
  };
  std::string out(static_cast<size_t>(print(nullptr, 0)), '\0');  // a huge loss prints long: size it first
  print(out.data(), out.size() + 1);
  return out;
}

std::string format_seconds(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else {
    std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  }
  return buf;
}

void keep_on_device(data::Dataset& train, data::Dataset& test, Device dev) {
  if (dev == Device::cpu) return;
  train = train.to(dev);
  test = test.to(dev);
}

data::Dataset balanced_subset(const data::Dataset& ds, int64_t per_class) {
  if (ds.size() == 0) return ds;
  const std::vector<int32_t> labels = ds.labels.to_int();
  // Read in place (the loaded set is f32 on the host): a copy of all 50,000 images would be 600 MB.
  const Tensor host = ds.images.to(Device::cpu);
  const float* x = host.data<float>();
  const int64_t image = ds.images.numel() / ds.size();
  std::vector<float> xs;
  std::vector<int32_t> ys;
  for (int64_t c = 0; c < ds.num_classes; ++c) {
    int64_t taken = 0;
    for (size_t i = 0; i < labels.size() && taken < per_class; ++i) {
      if (labels[i] != c) continue;
      xs.insert(xs.end(), x + static_cast<int64_t>(i) * image, x + static_cast<int64_t>(i + 1) * image);
      ys.push_back(labels[i]);
      ++taken;
    }
  }
  data::Dataset out = ds;
  const int64_t n = static_cast<int64_t>(ys.size());
  out.images = Tensor::from_vector(xs, {n, ds.images.size(1), ds.images.size(2), ds.images.size(3)});
  out.labels = Tensor::from_vector(ys, {n});
  out.name = ds.name + "[balanced " + std::to_string(n) + "]";
  return out;
}

std::vector<int64_t> class_counts(const data::Dataset& ds) {
  std::vector<int64_t> counts(static_cast<size_t>(std::max<int64_t>(ds.num_classes, 0)), 0);
  if (ds.size() == 0) return counts;
  for (const int32_t y : ds.labels.to_int())
    if (y >= 0 && y < ds.num_classes) ++counts[static_cast<size_t>(y)];
  return counts;
}

int64_t steps_per_epoch(const data::DataLoader& loader, const TrainOptions& options) {
  return options.max_steps >= 0 ? std::min(options.max_steps, loader.num_batches()) : loader.num_batches();
}

namespace {
// Restores LossScaler recording state on every exit from a recording.
struct ScalerRecording {
  amp::LossScaler* scaler;
  ScalerRecording(amp::LossScaler* s, Device dev) : scaler(s) {
    if (scaler != nullptr) scaler->begin_recording(dev);
  }
  ~ScalerRecording() {
    if (scaler != nullptr) scaler->end_recording();
  }
  ScalerRecording(const ScalerRecording&) = delete;
  ScalerRecording& operator=(const ScalerRecording&) = delete;
};

bool same_layout(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device();
}
}  // namespace

EpochResult train_epoch(nn::Module& model, optim::Optimizer& opt, data::DataLoader& loader, int64_t epoch,
                        const TrainOptions& options) {
  const Device dev = loader.options().device;
  if (options.cuda_graph) {
    HL_CHECK(dev == Device::cuda, "train_epoch: cuda_graph records the CUDA launches of a step, and this loader's "
             "batches are on the ", device_name(dev), " (give the loader .device = cuda)");
    HL_CHECK(!options.after_backward, "train_epoch: cuda_graph cannot call after_backward: host code inside a step "
             "would run once, when the step is recorded, and not at its replays");
    HL_CHECK(!profiler::enabled(), "train_epoch: cuda_graph with the profiler on: its timing events cannot be "
             "recorded, and a replayed step has no layers to time (profile without the graph)");
  }
  model.train();
  loader.start_epoch(epoch);
  const bool show = options.progress && isatty(STDERR_FILENO);
  const int64_t steps = steps_per_epoch(loader, options);
  Tensor loss_sum = Tensor::zeros({}, DType::f32, dev);  // stays on the device
  Tensor correct = Tensor::zeros({}, DType::f32, dev);
  EpochResult r;
  const auto t0 = Clock::now();
  auto last_draw = t0;
  size_t drawn = 0;  // the widest bar drawn on the terminal
  int64_t step = 0;
  // Skipped steps are counted on the device by the scaler; read once at the end of the epoch (a step
  // itself never waits for the GPU).
  const int64_t skipped_before = options.scaler != nullptr ? options.scaler->skipped_steps() : 0;
  // The profiler's scopes (bench/train --profile, framework/profiler.h) cost nothing when it is off:
  // "data", then per step "forward", "loss", "backward" (opened by backward() itself), "optimizer".
  auto next_batch = [&](data::Batch& b) {
    profiler::Scope scope("data");
    return loader.next(b);
  };
  // One step on (x, y): forward, loss, backward, update, and the epoch's sums. With a graph the sums
  // are accumulated in place, so that a replay adds into the same two tensors.
  auto run_step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor logits, loss;
    {
      profiler::Scope scope("forward");
      logits = model(x);
    }
    {
      profiler::Scope scope("loss");
      loss = cross_entropy(logits, y);  // f32 whatever the logits (paper §3.3)
    }
    if (options.scaler != nullptr) {
      amp::LossScaler& s = *options.scaler;
      s.scale(loss).backward();  // every gradient is multiplied by S
      if (options.after_backward) options.after_backward(step);
      profiler::Scope scope("optimizer");
      if (options.clip_grad_norm > 0.0) {
        s.unscale(opt);  // clip the true gradients, not the scaled ones
        opt.clip_grad_norm(options.clip_grad_norm);
      }
      s.step(opt);  // skipped on the device if a gradient overflowed
      s.update();
    } else {
      loss.backward();
      if (options.after_backward) options.after_backward(step);
      profiler::Scope scope("optimizer");
      if (options.clip_grad_norm > 0.0) opt.clip_grad_norm(options.clip_grad_norm);
      opt.step();
    }
    NoGradGuard no_grad;
    const double n = static_cast<double>(y.numel());
    const Tensor batch_loss = add(loss_sum, mul(cast(loss.detach(), DType::f32), n));
    const Tensor batch_correct = add(correct, cast(correct_count(logits.detach(), y), DType::f32));
    if (options.cuda_graph) {
      loss_sum.copy_(batch_loss);
      correct.copy_(batch_correct);
    } else {
      loss_sum = batch_loss;
      correct = batch_correct;
    }
  };
  // TrainOptions::cuda_graph: the recorded step, the input tensors it reads, and the learning rate it
  // was recorded with (a kernel argument, so a new one needs a new recording).
  CudaGraph graph;
  Tensor graph_x, graph_y;
  double graph_lr = 0.0;
  for (data::Batch b; step < steps && next_batch(b); ++step) {
    profiler::Scope step_scope("step");
    if (!options.cuda_graph || step == 0) {
      run_step(b.x, b.y);  // without a graph; with one, the epoch's first step warms everything up
    } else {
      if (!graph_x.defined()) {
        graph_x = Tensor::empty(b.x.shape(), b.x.dtype(), dev);
        graph_y = Tensor::empty(b.y.shape(), b.y.dtype(), dev);
      }
      if (!same_layout(b.x, graph_x) || !same_layout(b.y, graph_y)) {
        run_step(b.x, b.y);  // a batch of another shape (the last, partial one) runs without the graph
      } else {
        graph_x.copy_(b.x);  // device to device, queued before the replay
        graph_y.copy_(b.y);
        if (!graph.captured() || graph.stale() || opt.lr() != graph_lr) {
          const ScalerRecording recording(options.scaler, dev);
          graph.capture([&] { run_step(graph_x, graph_y); });
          graph_lr = opt.lr();
        }
        graph.replay();
        if (options.scaler != nullptr) options.scaler->replayed_update();
      }
    }
    // Only an installed callback pays for knowing whether the step was applied: last_step_skipped()
    // reads the scaler's device state back (a host synchronization each step).
    if (options.on_step_end) options.on_step_end(step);
    if (options.after_step)
      options.after_step(step, options.scaler == nullptr || !options.scaler->last_step_skipped());
    ++r.steps;
    r.images += b.y.numel();
    if (show && std::chrono::duration<double>(Clock::now() - last_draw).count() > 0.25) {
      last_draw = Clock::now();
      const double mean_loss = loss_sum.item() / static_cast<double>(r.images);
      draw_progress(progress_line(epoch, step + 1, steps, r.images, since(t0), mean_loss), drawn);
    }
  }
  // Kernels are queued asynchronously: wait for the GPU to finish the epoch's work before reading
  // the clock, or the time would only measure how fast the host can queue launches.
  if (dev == Device::cuda) runtime::cuda_synchronize();
  r.seconds = since(t0);
  r.graph_captures = graph.captures();
  r.graph_replays = graph.replays();
  if (options.scaler != nullptr) r.skipped_steps = options.scaler->skipped_steps() - skipped_before;
  if (r.images > 0) {
    r.loss = loss_sum.item() / static_cast<double>(r.images);
    r.accuracy = correct.item() / static_cast<double>(r.images);
    r.images_per_second = r.seconds > 0 ? r.images / r.seconds : 0.0;
  }
  if (drawn > 0) std::fprintf(stderr, "\r%*s\r", static_cast<int>(drawn), "");  // blank the bar
  return r;
}

double evaluate(nn::Module& model, data::DataLoader& loader) {
  // Puts the mode back on every way out: a caller that evaluates a model loaded for inference (eval
  // mode) must not get it back in training mode, where batch norm would update its statistics.
  struct RestoreMode {
    nn::Module& model;
    bool training;
    ~RestoreMode() { model.train(training); }
  } restore{model, model.training()};
  NoGradGuard no_grad;
  model.eval();
  loader.start_epoch(0);
  Tensor correct = Tensor::zeros({}, DType::f32, loader.options().device);
  int64_t n = 0;
  for (data::Batch b; loader.next(b);) {
    correct = add(correct, cast(correct_count(model(b.x), b.y), DType::f32));
    n += b.y.numel();
  }
  HL_CHECK(n > 0, "evaluate: the loader produced no batches");
  return correct.item() / static_cast<double>(n);
}

std::string loss_scale_for(amp::Precision precision, const std::string& spec, bool given) {
  if (precision != amp::Precision::fp32) return spec;
  if (given && spec != "none")
    std::printf("note: --loss-scale %s is not used: fp32 trains without loss scaling (DESIGN.md §3)\n",
                spec.c_str());
  return "none";
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';  // a quote inside a quoted field is written twice
    out += c;
  }
  return out + "\"";
}

std::string csv_number(double x) {
  char buf[32];  // the longest shortest form, "-2.2250738585072014e-308", has 24 characters
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, x);
  HL_CHECK(r.ec == std::errc(), "csv_number: cannot format ", x);
  return std::string(buf, r.ptr);
}

}  // namespace hl::tutorial
