// The Tensor: a shape, a dtype, a device, and a view into shared contiguous storage, plus what
// autograd needs (requires_grad, grad, the node that made it).
//
// Tensors are always contiguous (reshape/flatten are free views; transposes are expressed through
// the GEMM layouts instead of strided views). Copying a Tensor copies a handle, like PyTorch.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "framework/device.h"
#include "kernels/dtype.h"
#include "kernels/error.h"

namespace hl {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[128, 784]"
// The number of elements of a shape. Throws hl::Error naming `op` and the shape on a negative dimension,
// or when the product of the non-zero dimensions does not fit in an int64 ("<op>: shape [...] has more
// elements than fit in 64 bits"). Zeros are left out of that product so that every partial product
// of a valid shape (a row's size, a flattened dimension) fits too.
int64_t shape_numel(const Shape& s, const char* op = "shape_numel");
// The same rule without throwing: false (and `numel` untouched) on a negative dimension or an overflow.
bool shape_numel_fits(const Shape& s, int64_t& numel);

class Tensor;
struct Node;

// Everything a tensor handle points at. Exposed so that ops and autograd can reach it; users go
// through Tensor's methods.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  DType dtype = DType::f32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf (same shape, device)
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor, if it is not a leaf
  // Called by backward() with this tensor's whole gradient (framework/autograd.cpp; Tensor::register_hook).
  std::vector<std::function<Tensor(const Tensor&)>> grad_hooks;
  bool retains_grad = false;         // a non-leaf that keeps its gradient in .grad (Tensor::retain_grad)
  std::string name;                  // optional, for error messages and parameter listings
};

// A random number generator with a documented, portable algorithm (splitmix64-seeded
// xoshiro256**, Box-Muller normals), so the same seed gives the same integers and uniforms on every
// machine. The normals call std::log and std::cos, which C++ does not require to be correctly
// rounded: another libm may give another last bit (only Tensor::randn uses them; initializers draw
// uniforms).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1)
  double normal();   // mean 0, std 1
  uint64_t below(uint64_t n);  // uniform integer in [0, n)
 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor; defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories ----
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device dev = Device::cpu);
  static Tensor scalar(double value, DType dtype = DType::f32, Device dev = Device::cpu);
  // Values are converted (rounded to nearest even for f16). Throws if values.size() != numel.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype = DType::f32,
                            Device dev = Device::cpu);
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f64,
                            Device dev = Device::cpu);
  static Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape, Device dev = Device::cpu);
  static Tensor from_half(const std::vector<half>& values, const Shape& shape, Device dev = Device::cpu);
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32, Device dev = Device::cpu,
                      double mean = 0.0, double std = 1.0);
  static Tensor uniform(const Shape& shape, Generator& gen, double low, double high, DType dtype = DType::f32,
                        Device dev = Device::cpu);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  std::string describe() const;  // "f16[128, 784] on cuda"

  // ---- data ----
  void* data_ptr() const;  // device or host pointer to the first element
  template <class T>
  T* data() const {
    return static_cast<T*>(data_ptr());
  }
  Tensor to(Device d) const;   // a copy on d (the same tensor if already there)
  // A converted copy, differentiable (see ops.h cast). Floating -> i32 truncates toward zero, saturates
  // to INT32_MIN / INT32_MAX and maps NaN to 0 on every backend (docs/precision.md); full/fill_ too.
  Tensor to(DType t) const;
  Tensor clone() const;        // a copy that does not share storage, not part of the graph
  std::vector<float> to_vector() const;    // values as float, from any device
  std::vector<double> to_double() const;   // values as double (exact for every dtype)
  std::vector<int32_t> to_int() const;     // i32 tensors only
  double item() const;                      // the value of a one-element tensor
  // Overwrite this tensor's values from src (same shape; dtype/device converted). Not recorded.
  void copy_(const Tensor& src);
  void fill_(double value);
  void zero_() { fill_(0.0); }

  // ---- views ----
  Tensor reshape(const Shape& shape) const;    // one -1 allowed; shares storage
  Tensor flatten(int64_t start_dim = 1) const;  // [N, a, b] -> [N, a*b] for start_dim 1
  Tensor slice_rows(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0; shares storage

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // leaves only
  bool is_leaf() const;
  Tensor grad() const;           // undefined until a backward pass reaches this leaf (or retain_grad() tensor)
  void zero_grad();              // drop the accumulated gradient
  // Backpropagate from this tensor. A scalar needs no seed; otherwise pass d(loss)/d(this).
  void backward(const Tensor& seed = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;         // same storage, cut from the graph
  // Observe (or replace) the gradient flowing into this tensor, like torch.Tensor.register_hook:
  // every backward() that reaches it calls fn(g) once with d(loss)/d(this), after the contributions
  // of all its consumers have been summed and before it is passed on to the op that made it (or, for
  // a leaf, accumulated into .grad). fn runs with grad mode off. If fn returns a defined tensor, that
  // tensor (same shape; converted to g's dtype) replaces g from there on; return Tensor() to only
  // look. Hooks run in the order they were registered and stay until remove_hooks(). The tensor must
  // require grad. fn must not hold this tensor itself (a reference cycle): capture what it records into.
  // Returns the hook's index.
  size_t register_hook(std::function<Tensor(const Tensor&)> fn);
  void remove_hooks();
  // Keep the gradient of a non-leaf tensor in .grad() after backward() (accumulated like a leaf's),
  // like torch.Tensor.retain_grad. A no-op on leaves, which always keep theirs.
  Tensor& retain_grad();
  bool retains_grad() const;
  const std::string& name() const;
  Tensor& set_name(const std::string& n);

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // PyTorch-like printing. Each value is the shortest decimal that reads back (correctly rounded) as
  // the same value of its dtype: 0.123456789 prints 0.1235 in f16 and 0.12345679 in f32; neighbours
  // always print differently (f16 needs at most 5 significant digits, f32 9, f64 17). A value whose
  // integer part has no more digits than that keeps them all (65504, not 6.55e+04, which reads as 65500).
  std::string str(int max_per_dim = 6) const;

 private:
  void require_defined(const char* op) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

namespace detail {
// Raw device state (the loss scaler's counters, an optimizer's step count): `bytes` bytes held in an
// f64 tensor on `dev` (so 8-byte aligned), written from / read back to host memory verbatim.
Tensor raw_tensor(const void* bytes, size_t n, Device dev);
// Reads back to the host: a synchronization on CUDA, counted by debug::host_reads().
void read_raw(const Tensor& t, void* out, size_t n);
}  // namespace detail

namespace debug {
// How many times values were read back to the host: Tensor::item / to_double / to_vector / to_int,
// detail::read_raw, and copies from a CUDA tensor to the CPU. Test-only in purpose: the no-sync
// tests assert that a training step leaves it unchanged (on the CPU, where it cannot be observed
// as a stall). A relaxed atomic increment: cheap, and safe with the DataLoader's threads.
int64_t host_reads();
void count_host_read();
}  // namespace debug

}  // namespace hl
