// DataLoader (see dataloader.h): a reproducible shuffle, a host-side gather, then one conversion
// and one copy per batch to where the model runs.
#include "datasets/dataloader.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "kernels/error.h"

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

}  // namespace

DataLoader::DataLoader(Dataset ds, Options opt) : ds_(std::move(ds)), opt_(opt) {
  const auto fail = [&](const auto&... what) { throw Error(detail::concat("DataLoader(", ds_.name, "): ", what...)); };
  if (opt_.batch_size < 1) fail("batch_size must be >= 1 (got ", opt_.batch_size, ")");
  if (!ds_.images.defined() || !ds_.labels.defined()) fail("the data set has no images or no labels");
  if (ds_.images.dim() < 1 || ds_.size() == 0) fail("the data set is empty");
  if (ds_.labels.dtype() != DType::i32 || ds_.labels.dim() != 1 || ds_.labels.size(0) != ds_.size())
    fail("labels must be i32 [", ds_.size(), "] to match images ", ds_.images.describe(), ", got ",
         ds_.labels.describe());
  if (!is_floating(opt_.dtype)) fail("the batch dtype must be floating point (got ", dtype_name(opt_.dtype), ")");
  host_images_ = ds_.images.to(Device::cpu);
  host_labels_ = ds_.labels.to(Device::cpu);
  start_epoch(0);
}

int64_t DataLoader::num_batches() const {
  const int64_t n = ds_.size(), b = opt_.batch_size;
  return opt_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  order_.resize(static_cast<size_t>(ds_.size()));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!opt_.shuffle) return;
  // Fisher-Yates with hl::Generator (portable, unlike std:: distributions): swap each position,
  // from the last down, with a uniformly chosen one at or before it.
  Generator gen(mix64(mix64(opt_.seed) ^ static_cast<uint64_t>(epoch)));
  for (size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[gen.below(i + 1)]);
}

bool DataLoader::next(Batch& out) {
  const int64_t n = ds_.size();
  const int64_t size = std::min(opt_.batch_size, n - cursor_);
  if (size <= 0 || (opt_.drop_last && size < opt_.batch_size)) return false;
  out = deliver(gather(cursor_, cursor_ + size));
  cursor_ += size;
  return true;
}

Batch DataLoader::gather(int64_t begin, int64_t end) const {
  const int64_t rows = end - begin;
  Shape x_shape = host_images_.shape();
  x_shape[0] = rows;
  Batch b{Tensor::empty(x_shape, host_images_.dtype(), Device::cpu), Tensor::empty({rows}, DType::i32, Device::cpu)};

  const size_t row_bytes = host_images_.nbytes() / static_cast<size_t>(ds_.size());
  const auto* src = static_cast<const unsigned char*>(host_images_.data_ptr());
  auto* dst = static_cast<unsigned char*>(b.x.data_ptr());
  const int32_t* labels = host_labels_.data<int32_t>();
  int32_t* y = b.y.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = order_[static_cast<size_t>(begin + r)];
    std::memcpy(dst + static_cast<size_t>(r) * row_bytes, src + static_cast<size_t>(i) * row_bytes, row_bytes);
    y[r] = labels[i];
  }
  return b;
}

Batch DataLoader::deliver(Batch host) const {
  // Convert on the host first: an f16 batch is half the bytes to copy.
  if (host.x.dtype() != opt_.dtype) host.x = host.x.to(opt_.dtype);
  if (opt_.device != Device::cpu) {
    host.x = host.x.to(opt_.device);
    host.y = host.y.to(opt_.device);
  }
  return host;
}

}  // namespace hl::data
