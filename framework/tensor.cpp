#include "framework/tensor.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <sstream>

#include "framework/autograd.h"
#include "framework/ops.h"
#include "kernels/elementwise.h"

namespace hl {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool shape_numel_fits(const Shape& s, int64_t& numel) {
  // Zeros are skipped, not multiplied in: a shape like [0, 2^40, 2^40] holds no element, but its rows
  // (2^80 elements each) would overflow whoever computes them, so it is refused like [2^40, 2^40, 1].
  int64_t nonzero = 1;
  bool empty = false;
  for (int64_t d : s) {
    if (d < 0) return false;
    if (d == 0) empty = true;
    else if (__builtin_mul_overflow(nonzero, d, &nonzero)) return false;
  }
  numel = empty ? 0 : nonzero;
  return true;
}

int64_t shape_numel(const Shape& s, const char* op) {
  int64_t n = 0;
  if (shape_numel_fits(s, n)) return n;
  for (int64_t d : s) HL_CHECK(d >= 0, op, ": negative dimension in shape ", shape_str(s));
  throw Error(detail::concat(op, ": shape ", shape_str(s), " has more elements than fit in 64 bits"));
}

// ---- Generator: xoshiro256** seeded by splitmix64 (both public-domain algorithms, written out) ----

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

void Generator::manual_seed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
  has_spare_ = false;
}

uint64_t Generator::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Generator::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  // Box-Muller; the second value of each pair is kept for the next call.
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * M_PI * u2);
  has_spare_ = true;
  return r * std::cos(2.0 * M_PI * u2);
}

uint64_t Generator::below(uint64_t n) {
  HL_CHECK(n > 0, "Generator::below: n must be positive");
  // Rejection sampling: unbiased, and the same sequence everywhere.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x = next_u64();
  while (x >= limit) x = next_u64();
  return x % n;
}

// ---- factories ----------------------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device dev) {
  // Every factory and loader allocates here (reshape checks its new shapes itself): an element or byte
  // count that wrapped around would allocate a small block and let the tensor's shape index far past it.
  const int64_t numel = shape_numel(shape, "Tensor::empty");
  int64_t bytes = 0;
  HL_CHECK(!__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(dtype)), &bytes), "Tensor::empty: shape ",
           shape_str(shape), " of ", dtype_name(dtype), " (", numel, " elements) has more bytes than fit in 64 bits");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(bytes), dev);
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device dev) {
  Tensor t = empty(shape, dtype, dev);
  kernels::fill(dev, t.numel(), t.data_ptr(), dtype, value);
  return t;
}
Tensor Tensor::zeros(const Shape& shape, DType dtype, Device dev) { return full(shape, 0.0, dtype, dev); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device dev) { return full(shape, 1.0, dtype, dev); }
Tensor Tensor::scalar(double value, DType dtype, Device dev) { return full({}, value, dtype, dev); }

namespace {
// Wrap host values of type `src` in a CPU tensor, convert to dtype, move to dev.
Tensor from_host(const void* data, size_t count, DType src, const Shape& shape, DType dtype, Device dev,
                 const char* op) {
  const int64_t numel = shape_numel(shape, op);
  HL_CHECK(static_cast<int64_t>(count) == numel, op, ": ", count, " values do not fill shape ", shape_str(shape), " (",
           numel, " elements)");
  Tensor host = Tensor::empty(shape, dtype, Device::cpu);
  // Same dtype: copy the bits (the cast kernels compute i32 through float, which rounds above 2^24).
  if (src == dtype) copy_bytes(host.data_ptr(), Device::cpu, data, Device::cpu, host.nbytes());
  else kernels::cast(DeviceType::cpu, static_cast<int64_t>(count), data, src, host.data_ptr(), dtype);
  return host.to(dev);
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& shape, DType dtype, Device dev) {
  return from_host(v.data(), v.size(), DType::f32, shape, dtype, dev, "Tensor::from_vector");
}
Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& shape, DType dtype, Device dev) {
  return from_host(v.data(), v.size(), DType::f64, shape, dtype, dev, "Tensor::from_vector");
}
Tensor Tensor::from_vector(const std::vector<int32_t>& v, const Shape& shape, Device dev) {
  return from_host(v.data(), v.size(), DType::i32, shape, DType::i32, dev, "Tensor::from_vector");
}
Tensor Tensor::from_half(const std::vector<half>& v, const Shape& shape, Device dev) {
  return from_host(v.data(), v.size(), DType::f16, shape, DType::f16, dev, "Tensor::from_half");
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype, Device dev, double mean, double std) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape, "Tensor::randn")));
  for (auto& x : v) x = mean + std * gen.normal();
  return from_vector(v, shape, dtype, dev);
}

Tensor Tensor::uniform(const Shape& shape, Generator& gen, double low, double high, DType dtype, Device dev) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape, "Tensor::uniform")));
  for (auto& x : v) x = low + (high - low) * gen.uniform();
  return from_vector(v, shape, dtype, dev);
}

// ---- metadata -----------------------------------------------------------------------------------------

void Tensor::require_defined(const char* op) const {
  HL_CHECK(impl_ != nullptr, op, ": the tensor is undefined (default-constructed, or a gradient that was never computed)");
}

const Shape& Tensor::shape() const {
  require_defined("Tensor::shape");
  return impl_->shape;
}
int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  HL_CHECK(d >= -n && d < n, "Tensor::size: dimension ", d, " out of range for shape ", shape_str(shape()));
  return shape()[static_cast<size_t>(d < 0 ? d + n : d)];
}
int64_t Tensor::numel() const { return shape_numel(shape(), "Tensor::numel"); }
DType Tensor::dtype() const {
  require_defined("Tensor::dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  require_defined("Tensor::device");
  return impl_->storage->device();
}
std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return detail::concat(dtype_name(dtype()), shape_str(shape()), " on ", device_name(device()));
}

void* Tensor::data_ptr() const {
  require_defined("Tensor::data_ptr");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<int64_t>(dtype_size(impl_->dtype));
}

// ---- data ---------------------------------------------------------------------------------------------

Tensor Tensor::to(Device d) const {
  require_defined("Tensor::to");
  if (device() == d) return *this;
  Tensor out = empty(shape(), dtype(), d);
  if (d == Device::cpu) debug::count_host_read();
  copy_bytes(out.data_ptr(), d, data_ptr(), device(), nbytes());
  const Device src = device();
  return record(out, "to_device", {*this}, {}, [src](const Tensor& g) { return std::vector<Tensor>{g.to(src)}; });
}

Tensor Tensor::to(DType t) const { return cast(*this, t); }

Tensor Tensor::clone() const {
  require_defined("Tensor::clone");
  Tensor out = empty(shape(), dtype(), device());
  copy_bytes(out.data_ptr(), device(), data_ptr(), device(), nbytes());
  return out;
}

std::vector<double> Tensor::to_double() const {
  require_defined("Tensor::to_double");
  if (dtype() == DType::i32) {  // exact: not through the cast kernel, which goes via float
    const std::vector<int32_t> v = to_int();  // counts the read
    return std::vector<double>(v.begin(), v.end());
  }
  debug::count_host_read();
  const Tensor host = detach().to(Device::cpu);
  std::vector<double> out(static_cast<size_t>(numel()));
  kernels::cast(DeviceType::cpu, numel(), host.data_ptr(), dtype(), out.data(), DType::f64);
  return out;
}

std::vector<float> Tensor::to_vector() const {
  require_defined("Tensor::to_vector");
  debug::count_host_read();
  const Tensor host = detach().to(Device::cpu);
  std::vector<float> out(static_cast<size_t>(numel()));
  kernels::cast(DeviceType::cpu, numel(), host.data_ptr(), dtype(), out.data(), DType::f32);
  return out;
}

std::vector<int32_t> Tensor::to_int() const {
  HL_CHECK(dtype() == DType::i32, "Tensor::to_int: needs an i32 tensor, got ", describe());
  debug::count_host_read();
  const Tensor host = detach().to(Device::cpu);
  const int32_t* p = host.data<int32_t>();
  return std::vector<int32_t>(p, p + numel());
}

double Tensor::item() const {
  require_defined("Tensor::item");
  HL_CHECK(numel() == 1, "Tensor::item: needs exactly one element, got ", describe());
  return to_double()[0];
}

void Tensor::copy_(const Tensor& src) {
  require_defined("Tensor::copy_");
  HL_CHECK(src.defined() && src.shape() == shape(), "Tensor::copy_: source ", src.describe(),
           " does not match destination ", describe());
  Tensor s = src.detach();
  if (s.dtype() != dtype()) {
    Tensor conv = empty(s.shape(), dtype(), s.device());
    kernels::cast(s.device(), s.numel(), s.data_ptr(), s.dtype(), conv.data_ptr(), dtype());
    s = conv;
  }
  // Overlapping views of one storage (t.slice_rows(1, n).copy_(t.slice_rows(0, n - 1))): a host copy is a
  // memmove (copy_bytes), but cudaMemcpy's ranges must not overlap, so a GPU source is copied out first.
  if (device() != Device::cpu && s.impl()->storage == impl_->storage &&
      bytes_overlap(data_ptr(), nbytes(), s.data_ptr(), nbytes()))
    s = s.clone();
  copy_bytes(data_ptr(), device(), s.data_ptr(), s.device(), nbytes());
  impl_->storage->bump_version();
}

void Tensor::fill_(double value) {
  require_defined("Tensor::fill_");
  kernels::fill(device(), numel(), data_ptr(), dtype(), value);
  impl_->storage->bump_version();
}

// ---- views --------------------------------------------------------------------------------------------

Tensor Tensor::reshape(const Shape& new_shape) const {
  require_defined("reshape");
  Shape s = new_shape;
  int64_t infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      HL_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(new_shape));
      infer = static_cast<int64_t>(i);
    } else {
      HL_CHECK(s[i] >= 0, "reshape: negative dimension in ", shape_str(new_shape));
    }
  }
  // The known dimensions' product, checked: a wrapped one could equal numel() and pass the test below.
  Shape known_dims = s;
  if (infer >= 0) known_dims[static_cast<size_t>(infer)] = 1;
  int64_t known = 0;
  HL_CHECK(shape_numel_fits(known_dims, known), "reshape: shape ", shape_str(new_shape),
           " has more elements than fit in 64 bits");
  if (infer >= 0) {
    HL_CHECK(known != 0 && numel() % known == 0, "reshape: cannot reshape ", describe(), " to ", shape_str(new_shape));
    s[static_cast<size_t>(infer)] = numel() / known;
  }
  const int64_t count = shape_numel(s, "reshape");
  HL_CHECK(count == numel(), "reshape: cannot reshape ", describe(), " (", numel(), " elements) to ",
           shape_str(new_shape), " (", count, " elements)");
  auto view = std::make_shared<TensorImpl>();
  view->storage = impl_->storage;
  view->offset = impl_->offset;
  view->shape = s;
  view->dtype = impl_->dtype;
  const Shape old = shape();
  return record(Tensor(view), "reshape", {*this}, {}, [old](const Tensor& g) { return std::vector<Tensor>{g.reshape(old)}; });
}

Tensor Tensor::flatten(int64_t start_dim) const {
  require_defined("flatten");
  const int64_t n = dim();
  if (start_dim < 0) start_dim += n;
  HL_CHECK(start_dim >= 0 && start_dim <= n, "flatten: start_dim out of range for ", describe());
  Shape s(shape().begin(), shape().begin() + start_dim);
  int64_t rest = 1;
  for (int64_t i = start_dim; i < n; ++i) rest *= shape()[static_cast<size_t>(i)];
  s.push_back(rest);
  return reshape(s);
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  require_defined("slice_rows");
  HL_CHECK(dim() >= 1, "slice_rows: needs at least one dimension, got ", describe());
  HL_CHECK(0 <= begin && begin <= end && end <= shape()[0], "slice_rows: rows [", begin, ", ", end,
           ") out of range for ", describe());
  auto view = std::make_shared<TensorImpl>();
  view->storage = impl_->storage;
  view->shape = shape();
  view->shape[0] = end - begin;
  view->dtype = impl_->dtype;
  const int64_t row_elems = shape_numel(Shape(shape().begin() + 1, shape().end()));
  view->offset = impl_->offset + begin * row_elems;
  const Shape full_shape = shape();
  return record(Tensor(view), "slice_rows", {*this}, {}, [full_shape, begin, end](const Tensor& g) {
    Tensor full = Tensor::zeros(full_shape, g.dtype(), g.device());
    full.slice_rows(begin, end).copy_(g);
    return std::vector<Tensor>{full};
  });
}

// ---- autograd accessors ---------------------------------------------------------------------------

bool Tensor::requires_grad() const { return defined() && impl_->requires_grad; }

Tensor& Tensor::requires_grad_(bool on) {
  require_defined("requires_grad_");
  HL_CHECK(impl_->grad_fn == nullptr, "requires_grad_: only leaf tensors can change requires_grad (",
           describe(), " was produced by ", impl_->grad_fn->op, ")");
  HL_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, got ", describe());
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return defined() && impl_->grad_fn == nullptr; }
Tensor Tensor::grad() const { return defined() && impl_->grad ? Tensor(impl_->grad) : Tensor(); }
void Tensor::zero_grad() {
  if (defined()) impl_->grad.reset();
}

Tensor Tensor::detach() const {
  require_defined("detach");
  auto view = std::make_shared<TensorImpl>();
  view->storage = impl_->storage;
  view->offset = impl_->offset;
  view->shape = impl_->shape;
  view->dtype = impl_->dtype;
  view->name = impl_->name;
  return Tensor(view);
}

const std::string& Tensor::name() const {
  require_defined("name");
  return impl_->name;
}
Tensor& Tensor::set_name(const std::string& n) {
  require_defined("set_name");
  impl_->name = n;
  return *this;
}

// ---- printing -----------------------------------------------------------------------------------------

namespace {
// The most significant digits a value of `t` can need to read back as itself (the "max_digits10" of
// binary16, binary32 and binary64): past it every decimal of that length reads back.
int max_digits_for(DType t) {
  switch (t) {
    case DType::f16: return 5;
    case DType::f32: return 9;
    default: return 17;
  }
}

// Does `text`, read as a decimal and rounded to nearest into `t` (as a reader or a parser would), give
// back v's value, bit for bit (so -0 needs its sign)? v holds an element of `t` exactly.
bool reads_back(const char* text, double v, DType t) {
  if (t == DType::f16) return double_to_half_bits(std::strtod(text, nullptr)) == double_to_half_bits(v);
  if (t == DType::f32) {  // strtof: one rounding; strtod then float could round twice
    const float a = std::strtof(text, nullptr), b = static_cast<float>(v);
    return std::memcmp(&a, &b, sizeof a) == 0;
  }
  const double a = std::strtod(text, nullptr);
  return std::memcmp(&a, &v, sizeof a) == 0;
}

// The shortest decimal that reads back as the value, so that two different values never print alike
// and no digit is shown that the dtype does not hold (f16's 0.123456789 is 0.1235). A whole part of at
// most max_digits_for(t) digits is kept in full: 65504 rather than 6.55e+04, which would read as 65500
// to a person even though it rounds back to 65504 in f16.
std::string format_value(double v, DType t) {
  if (t == DType::i32) return std::to_string(static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  const int max_digits = max_digits_for(t);
  char buf[64];
  int digits = 1;
  if (std::fabs(v) >= 1.0 && std::fabs(v) < 1e17) {
    const int whole = std::snprintf(buf, sizeof buf, "%.0f", std::floor(std::fabs(v)));
    if (whole <= max_digits) digits = whole;
  }
  for (; digits < 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (digits >= max_digits || reads_back(buf, v, t)) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void print_rec(std::ostringstream& os, const std::vector<double>& v, const Shape& s, size_t dim, int64_t offset,
               int max_per_dim, DType t, int indent) {
  if (dim == s.size()) {
    os << format_value(v[static_cast<size_t>(offset)], t);
    return;
  }
  int64_t stride = 1;
  for (size_t i = dim + 1; i < s.size(); ++i) stride *= s[i];
  const int64_t n = s[dim];
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (n > max_per_dim && i == max_per_dim / 2) {
      os << "...";
      i = n - max_per_dim / 2 - 1;
      os << (dim + 1 == s.size() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
      continue;
    }
    print_rec(os, v, s, dim + 1, offset + i * stride, max_per_dim, t, indent + 1);
    if (i + 1 < n) os << (dim + 1 == s.size() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
  }
  os << "]";
}
}  // namespace

std::string Tensor::str(int max_per_dim) const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  print_rec(os, to_double(), shape(), 0, 0, std::max(2, max_per_dim), dtype(), 7);
  os << ", " << dtype_name(dtype()) << shape_str(shape());
  if (device() != Device::cpu) os << ", " << device_name(device());
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

namespace detail {

Tensor raw_tensor(const void* bytes, size_t n, Device dev) {
  std::vector<double> words((n + sizeof(double) - 1) / sizeof(double), 0.0);
  std::memcpy(words.data(), bytes, n);
  // from_vector copies the words' bytes verbatim (same dtype: no conversion).
  return Tensor::from_vector(words, {static_cast<int64_t>(words.size())}, DType::f64, dev);
}

void read_raw(const Tensor& t, void* out, size_t n) {
  HL_CHECK(t.defined() && t.nbytes() >= n, "read_raw: ", t.defined() ? t.describe() : "an undefined tensor",
           " holds fewer than ", n, " bytes");
  debug::count_host_read();
  if (t.device() == Device::cpu) {
    std::memcpy(out, t.data_ptr(), n);
    return;
  }
  const Tensor host = t.detach().to(Device::cpu);
  std::memcpy(out, host.data_ptr(), n);
}

}  // namespace detail

namespace debug {
namespace {
std::atomic<int64_t> g_host_reads{0};
}
int64_t host_reads() { return g_host_reads.load(std::memory_order_relaxed); }
void count_host_read() { g_host_reads.fetch_add(1, std::memory_order_relaxed); }
}  // namespace debug

}  // namespace hl
