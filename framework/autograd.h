// Define-by-run autograd, small enough to read in one sitting (micrograd style).
//
// Every differentiable op, when any input requires grad and grad mode is on, gives its output a
// Node: the inputs it needs gradients for and a closure that maps d(loss)/d(output) to
// d(loss)/d(input) for each of them. Tensor::backward() sorts the nodes topologically, walks them in
// reverse, sums gradients that meet at a tensor, stores the gradients of leaves in .grad(), and frees
// the graph (the closures and the tensors they saved) unless asked to retain it.
//
// Saved tensors are checked, as in PyTorch: each op names the tensors whose values its backward reads
// (record's `saved`), and backward() refuses, before it computes anything, when one of them was
// written in place since the forward pass (copy_, fill_, an optimizer's update: Storage::version) or
// given new storage (nn::Module::to); its gradient would otherwise come silently from the new values.
// A write made during the pass (by a gradient hook) is caught when the node that saved the tensor is
// reached. An op whose gradients read saved values fixes, when it runs, which gradients it will
// compute (as PyTorch fixes the graph's edges), so that an input whose requires_grad is set afterwards
// cannot make its closure read a tensor it did not save. Writes through a raw data pointer
// (data<T>(), a kernel) are not counted. Each gradient a leaf
// receives is its own: the first one is copied unless nothing else holds it (autograd.cpp,
// accumulate_grad).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace hl {

// A tensor whose values a backward closure reads, as the op found it: its role (for the error
// message), its storage then and that storage's write count then (Storage::version).
struct SavedTensor {
  const char* role;  // "input", "weight", "output", ...
  Tensor tensor;
  // Weak: a parameter converted by nn::Module::to gets new storage, and the node must not keep the old
  // one alive; expired or another one, either way the tensor is not what the op read.
  std::weak_ptr<Storage> storage;
  uint64_t version = 0;
};

struct Node {
  std::string op;              // "matmul", "relu", ... (for error messages)
  std::vector<Tensor> inputs;  // the inputs, in the order backward returns their gradients
  std::vector<SavedTensor> saved;  // what backward reads, checked before the pass (autograd.cpp)
  // grads[i] is d(loss)/d(inputs[i]) or an undefined Tensor when inputs[i] needs none.
  std::function<std::vector<Tensor>(const Tensor& grad_output)> backward;
  bool released = false;
};

// Is gradient recording on (thread-local; on by default)?
bool grad_enabled();

// RAII: no graph is recorded while a NoGradGuard lives (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Anomaly detection (opt-in, off by default; a debugging aid, it reads a flag back per op): every
// recorded op checks its inputs and its output, and backward() checks every gradient it computes.
// The first non-finite tensor stops the run with an hl::Error naming the op, which tensor and what
// was found, e.g. "anomaly: the output of 'linear' (f32[128, 10] on cpu) contains NaN or inf".
void set_detect_anomaly(bool on);
bool detect_anomaly();
// RAII form of set_detect_anomaly(true).
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard();
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};
// Throws the anomaly error if t (floating, defined) holds an inf or NaN. `what` names it.
void check_finite(const Tensor& t, const std::string& what);

// Should an op with these inputs record a node?
bool needs_grad(const std::vector<Tensor>& inputs);
// The tensors an op's backward reads, each with its role: {{"input", x}, {"weight", w}}. List exactly
// what the closure reads values of; a tensor it needs only the shape or dtype of is not saved (add's
// operands), and an undefined entry is skipped. The output goes in detached ({"output",
// out.detach()}): a node that held its own output would keep it alive forever (a cycle).
using Saved = std::vector<std::pair<const char*, Tensor>>;

// Attach a node to `out` (no-op when needs_grad(inputs) is false). Returns out.
Tensor record(Tensor out, const std::string& op, std::vector<Tensor> inputs, const Saved& saved,
              std::function<std::vector<Tensor>(const Tensor&)> backward);

}  // namespace hl
