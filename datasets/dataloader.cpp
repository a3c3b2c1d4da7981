// DataLoader (see dataloader.h): a reproducible shuffle, reproducible augmentation, and three ways
// to put a batch where the model runs.
#include "datasets/dataloader.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <future>
#include <numeric>
#include <utility>

#include "kernels/error.h"
#include "kernels/gather.h"
#include "kernels/half.h"
#include "kernels/runtime.h"

namespace hl::data {
namespace {

// splitmix64's finalizer: spreads (seed, epoch) over all 64 bits, so nearby seeds and epochs give
// unrelated generator states.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Separates the augmentation's random stream from the shuffle's, which is seeded by mix64(mix64(seed) ^ epoch).
constexpr uint64_t kAugmentStream = 0xA5A5F00DCAFE1234ull;

// Pinned host memory for one batch, and the event that marks the end of its last copy to the GPU.
struct PinnedSlot {
  void* x = nullptr;
  void* y = nullptr;
  void* copied = nullptr;
};

}  // namespace

AugmentDraw draw_augment(const Augment& a, uint64_t seed, int64_t epoch, int64_t index) {
  Generator gen(mix64(mix64(mix64(seed ^ kAugmentStream) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index)));
  AugmentDraw d;
  const uint64_t positions = 2 * static_cast<uint64_t>(a.crop_padding) + 1;
  d.dx = a.crop_padding > 0 ? static_cast<int64_t>(gen.below(positions)) : a.crop_padding;
  d.dy = a.crop_padding > 0 ? static_cast<int64_t>(gen.below(positions)) : a.crop_padding;
  d.flip = a.horizontal_flip && gen.below(2) == 1;
  return d;
}

void augment_image(const float* in, float* out, int64_t channels, int64_t height, int64_t width, const Augment& a,
                   const AugmentDraw& d, const float* pad) {
  // Output pixel (y, x) is pixel (y + dy - p, xs + dx - p) of the original, where xs mirrors x when
  // flipping (crop first, then flip, as torchvision composes them); outside the original it is pad.
  // Per output row, the columns whose source is inside the image form one range [x0, x1); the
  // rest is padding. Copying that range in one go (forwards, or backwards when flipped) instead of
  // testing every pixel makes augmentation cost about what a plain copy costs.
  const int64_t p = a.crop_padding;
  const int64_t shift = d.dx - p;  // sx = cx + shift, where cx is x, or width - 1 - x when flipped
  const int64_t cx0 = std::max<int64_t>(0, -shift), cx1 = std::min<int64_t>(width, width - shift);
  for (int64_t c = 0; c < channels; ++c) {
    const float* src = in + c * height * width;
    float* dst = out + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      float* row = dst + y * width;
      const int64_t sy = y + d.dy - p;
      if (sy < 0 || sy >= height || cx0 >= cx1) {
        std::fill(row, row + width, pad[c]);
        continue;
      }
      const float* srow = src + sy * width;
      std::fill(row, row + width, pad[c]);
      if (!d.flip) {
        std::copy(srow + cx0 + shift, srow + cx1 + shift, row + cx0);
      } else {  // x = width - 1 - cx
        for (int64_t cx = cx0; cx < cx1; ++cx) row[width - 1 - cx] = srow[cx + shift];
      }
    }
  }
}

struct DataLoader::Impl {
  enum class Path { device_gather, pinned_prefetch, host };

  Options opt;
  Path path = Path::host;
  int64_t n = 0;
  Shape sample_shape;  // [C, H, W] (or whatever follows N)
  int64_t row_elems = 0;
  Tensor host_images, host_labels;  // the host path's source (f32 when augmenting)
  Tensor dev_images, dev_labels;    // the device-gather path's source
  std::vector<float> pad;           // per channel: the normalized value of a black pixel

  std::vector<int64_t> order;
  std::vector<int32_t> order32;  // the same, for gather_rows
  Tensor dev_order;              // order32 on the GPU (device gather), uploaded once per epoch
  int64_t cursor = 0;            // position in order of the next batch
  int64_t epoch = 0;

  // pinned prefetch
  std::array<PinnedSlot, 2> slots;
  std::future<void> ahead;  // the worker filling slots[ahead_slot] with the batch at ahead_begin
  int64_t ahead_begin = -1;
  int ahead_slot = 0;

  // Nothing here may throw. After a kernel fault every CUDA call returns the same (sticky) error, and a
  // loader is typically destroyed while that error's exception unwinds the stack: a second exception
  // from a destructor would end the process (std::terminate) and lose the first one's message. The
  // error is already being reported; what cannot be freed then is left to the process's exit.
  ~Impl() {
    drain();
    for (PinnedSlot& s : slots) {
      if (s.copied) {
        try {
          runtime::cuda_event_synchronize(s.copied);  // the GPU may still be reading the buffer
          runtime::cuda_event_destroy(s.copied);
        } catch (...) {
        }
      }
      for (void* buffer : {s.x, s.y}) {
        try {
          runtime::cuda_host_free(buffer);
        } catch (...) {
        }
      }
    }
  }

  // Wait for the worker, dropping its batch (and any error: the batch is no longer wanted).
  void drain() {
    if (ahead.valid()) {
      try {
        ahead.get();
      } catch (...) {
      }
    }
    ahead_begin = -1;
  }

  int64_t batch_rows_at(int64_t begin) const {
    const int64_t rows = std::min(opt.batch_size, n - begin);
    return rows <= 0 || (opt.drop_last && rows < opt.batch_size) ? 0 : rows;
  }

  Shape batch_shape(int64_t rows) const {
    Shape s = sample_shape;
    s.insert(s.begin(), rows);
    return s;
  }

  // Rows order[begin, begin + rows) of the host data set into x (opt.dtype) and y (i32), augmented
  // when asked. Runs on the caller's thread or on the prefetch worker; reads only what no other
  // thread writes while it runs.
  void fill(int64_t begin, int64_t rows, void* x, int32_t* y) const {
    const int32_t* idx = order32.data() + begin;
    kernels::gather_rows(DeviceType::cpu, {host_labels.data_ptr(), DType::i32, n, 1, idx, rows, y, DType::i32});
    if (!opt.augment.enabled()) {
      kernels::gather_rows(DeviceType::cpu, {host_images.data_ptr(), host_images.dtype(), n, row_elems, idx, rows, x,
                                             opt.dtype});
      return;
    }
    const float* src = host_images.data<float>();
    const int64_t c = sample_shape[0], h = sample_shape[1], w = sample_shape[2];
    // One thread, on purpose: a batch is ~1 MB of copying, and an OpenMP team here was many times
    // slower than one thread on a busy 2-core machine (threads spin at the barrier while another
    // process holds the core; docs/data.md); the GPU path runs this on its own worker thread anyway.
    std::vector<float> scratch(opt.dtype == DType::f32 ? 0 : static_cast<size_t>(row_elems));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = idx[r];
      const AugmentDraw d = draw_augment(opt.augment, opt.seed, epoch, i);
      if (opt.dtype == DType::f32) {
        augment_image(src + i * row_elems, static_cast<float*>(x) + r * row_elems, c, h, w, opt.augment, d, pad.data());
      } else {
        augment_image(src + i * row_elems, scratch.data(), c, h, w, opt.augment, d, pad.data());
        const int32_t zero = 0;
        kernels::cpu::gather_rows({scratch.data(), DType::f32, 1, row_elems, &zero, 1,
                                   static_cast<unsigned char*>(x) + r * row_elems * dtype_size(opt.dtype), opt.dtype});
      }
    }
  }

  // The worker is started before anything records it: std::async throws (std::system_error) when no
  // thread can be had, and the loader must then still say that nothing is prepared ahead.
  void launch(int64_t begin, int slot) {
    const int64_t rows = batch_rows_at(begin);
    ahead = std::async(std::launch::async, [this, begin, rows, slot] {
      runtime::cuda_event_synchronize(slots[static_cast<size_t>(slot)].copied);  // its previous copy is done
      fill(begin, rows, slots[static_cast<size_t>(slot)].x, static_cast<int32_t*>(slots[static_cast<size_t>(slot)].y));
    });
    ahead_begin = begin;
    ahead_slot = slot;
  }

  Batch next_prefetched(int64_t rows) {
    if (ahead_begin != cursor) {  // the first batch of an epoch: nothing was prepared ahead
      drain();
      launch(cursor, ahead_slot ^ 1);
    }
    const int slot = ahead_slot;
    ahead_begin = -1;
    ahead.get();  // rethrows the worker's error, if any
    PinnedSlot& s = slots[static_cast<size_t>(slot)];
    Batch b{Tensor::empty(batch_shape(rows), opt.dtype, Device::cuda), Tensor::empty({rows}, DType::i32, Device::cuda)};
    runtime::cuda_memcpy_async(b.x.data_ptr(), s.x, b.x.nbytes(), runtime::CopyKind::host_to_device);
    runtime::cuda_memcpy_async(b.y.data_ptr(), s.y, b.y.nbytes(), runtime::CopyKind::host_to_device);
    runtime::cuda_event_record(s.copied);
    cursor += rows;
    // Start on the following batch now: it is gathered while the caller queues this one's work. Only a
    // head start: if it cannot start, the next call starts it itself (and reports what stops it), and
    // this batch, already taken from the epoch, is not lost.
    if (batch_rows_at(cursor) > 0) {
      try {
        launch(cursor, slot ^ 1);
      } catch (...) {
      }
    }
    return b;
  }

  Batch next_device_gather(int64_t rows) {
    Batch b{Tensor::empty(batch_shape(rows), opt.dtype, Device::cuda), Tensor::empty({rows}, DType::i32, Device::cuda)};
    const int32_t* idx = dev_order.data<int32_t>() + cursor;
    kernels::gather_rows(DeviceType::cuda, {dev_images.data_ptr(), dev_images.dtype(), n, row_elems, idx, rows,
                                            b.x.data_ptr(), opt.dtype});
    kernels::gather_rows(DeviceType::cuda, {dev_labels.data_ptr(), DType::i32, n, 1, idx, rows, b.y.data_ptr(), DType::i32});
    cursor += rows;
    return b;
  }

  Batch next_host(int64_t rows) {
    Batch b{Tensor::empty(batch_shape(rows), opt.dtype, Device::cpu), Tensor::empty({rows}, DType::i32, Device::cpu)};
    fill(cursor, rows, b.x.data_ptr(), b.y.data<int32_t>());
    cursor += rows;
    if (opt.device != Device::cpu) {
      b.x = b.x.to(opt.device);
      b.y = b.y.to(opt.device);
    }
    return b;
  }
};

DataLoader::DataLoader(Dataset ds, Options opt) : ds_(std::move(ds)), opt_(opt), impl_(std::make_unique<Impl>()) {
  const auto fail = [&](const auto&... what) { throw Error(detail::concat("DataLoader(", ds_.name, "): ", what...)); };
  if (opt_.batch_size < 1) fail("batch_size must be >= 1 (got ", opt_.batch_size, ")");
  if (!ds_.images.defined() || !ds_.labels.defined()) fail("the data set has no images or no labels");
  if (ds_.images.dim() < 1 || ds_.size() == 0) fail("the data set is empty");
  if (ds_.labels.dtype() != DType::i32 || ds_.labels.dim() != 1 || ds_.labels.size(0) != ds_.size())
    fail("labels must be i32 [", ds_.size(), "] to match images ", ds_.images.describe(), ", got ",
         ds_.labels.describe());
  if (!is_floating(opt_.dtype)) fail("the batch dtype must be floating point (got ", dtype_name(opt_.dtype), ")");
  if (!is_floating(ds_.images.dtype())) fail("the images must be floating point, got ", ds_.images.describe());
  if (ds_.size() > INT32_MAX) fail("at most 2^31 - 1 samples (gather_rows takes i32 indices), got ", ds_.size());
  if (opt_.augment.crop_padding < 0) fail("augment.crop_padding must be >= 0 (got ", opt_.augment.crop_padding, ")");
  if (opt_.augment.enabled() && ds_.images.dim() != 4)
    fail("augmentation needs images [N, C, H, W], got ", ds_.images.describe());

  Impl& m = *impl_;
  m.opt = opt_;
  m.n = ds_.size();
  m.sample_shape.assign(ds_.images.shape().begin() + 1, ds_.images.shape().end());
  m.row_elems = shape_numel(m.sample_shape);
  if (opt_.augment.enabled()) {
    const int64_t channels = m.sample_shape[0];
    ds_.norm.check(detail::concat("DataLoader(", ds_.name, ")"), channels);
    for (int64_t c = 0; c < channels; ++c) m.pad.push_back(-ds_.norm.mean_of(c) / ds_.norm.std_of(c));
  }

  const bool on_gpu = opt_.device == Device::cuda;
  if (on_gpu && ds_.images.device() == Device::cuda && !opt_.augment.enabled()) {
    m.path = Impl::Path::device_gather;
    m.dev_images = ds_.images;
    m.dev_labels = ds_.labels.to(Device::cuda);
  } else {
    m.path = on_gpu && opt_.prefetch ? Impl::Path::pinned_prefetch : Impl::Path::host;
    m.host_images = ds_.images.to(Device::cpu);
    if (opt_.augment.enabled() && m.host_images.dtype() != DType::f32) m.host_images = m.host_images.to(DType::f32);
    m.host_labels = ds_.labels.to(Device::cpu);
  }
  if (m.path == Impl::Path::pinned_prefetch) {
    const size_t x_bytes = static_cast<size_t>(std::min(opt_.batch_size, m.n) * m.row_elems) * dtype_size(opt_.dtype);
    const size_t y_bytes = static_cast<size_t>(std::min(opt_.batch_size, m.n)) * sizeof(int32_t);
    for (PinnedSlot& s : m.slots) {
      s.x = runtime::cuda_host_alloc(x_bytes);
      s.y = runtime::cuda_host_alloc(y_bytes);
      s.copied = runtime::cuda_event_create();
    }
  }
  start_epoch(0);
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

int64_t DataLoader::num_batches() const {
  const int64_t n = ds_.size(), b = opt_.batch_size;
  return opt_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t DataLoader::epoch() const { return impl_->epoch; }
const std::vector<int64_t>& DataLoader::order() const { return impl_->order; }

const char* DataLoader::path() const {
  switch (impl_->path) {
    case Impl::Path::device_gather: return "device gather";
    case Impl::Path::pinned_prefetch: return "pinned prefetch";
    case Impl::Path::host: return "host";
  }
  return "?";
}

void DataLoader::start_epoch(int64_t epoch) {
  Impl& m = *impl_;
  m.drain();  // the worker reads the order and the epoch
  m.epoch = epoch;
  m.cursor = 0;
  m.order.resize(static_cast<size_t>(m.n));
  std::iota(m.order.begin(), m.order.end(), int64_t{0});
  if (opt_.shuffle) {
    // Fisher-Yates with hl::Generator (portable, unlike std:: distributions): swap each position,
    // from the last down, with a uniformly chosen one at or before it.
    Generator gen(mix64(mix64(opt_.seed) ^ static_cast<uint64_t>(epoch)));
    for (size_t i = m.order.size() - 1; i > 0; --i) std::swap(m.order[i], m.order[gen.below(i + 1)]);
  }
  m.order32.assign(m.order.begin(), m.order.end());
  if (m.path == Impl::Path::device_gather) m.dev_order = Tensor::from_vector(m.order32, {m.n}, Device::cuda);
}

bool DataLoader::next(Batch& out) {
  Impl& m = *impl_;
  const int64_t rows = m.batch_rows_at(m.cursor);
  if (rows == 0) return false;
  switch (m.path) {
    case Impl::Path::device_gather: out = m.next_device_gather(rows); break;
    case Impl::Path::pinned_prefetch: out = m.next_prefetched(rows); break;
    case Impl::Path::host: out = m.next_host(rows); break;
  }
  return true;
}

}  // namespace hl::data
