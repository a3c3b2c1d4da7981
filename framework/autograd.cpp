#include "framework/autograd.h"

#include <unordered_map>
#include <unordered_set>

#include "framework/ops.h"
#include "framework/profiler.h"
#include "kernels/reduce.h"

namespace hl {

namespace {
thread_local bool g_grad_enabled = true;
bool g_detect_anomaly = false;
}

void set_detect_anomaly(bool on) { g_detect_anomaly = on; }
bool detect_anomaly() { return g_detect_anomaly; }
DetectAnomalyGuard::DetectAnomalyGuard() : prev_(g_detect_anomaly) { g_detect_anomaly = true; }
DetectAnomalyGuard::~DetectAnomalyGuard() { g_detect_anomaly = prev_; }

void check_finite(const Tensor& t, const std::string& what) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return;
  Tensor flag = Tensor::zeros({}, DType::i32, t.device());
  kernels::any_nonfinite(t.device(), t.numel(), t.data_ptr(), t.dtype(), flag.data<int32_t>());
  HL_CHECK(flag.item() == 0.0, "anomaly: ", what, " (", t.describe(), ") contains NaN or inf");
}

bool grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const auto& t : inputs)
    if (t.requires_grad()) return true;
  return false;
}

Tensor record(Tensor out, const std::string& op, std::vector<Tensor> inputs, const Saved& saved,
              std::function<std::vector<Tensor>(const Tensor&)> backward) {
  if (!needs_grad(inputs)) return out;
  if (g_detect_anomaly) {
    for (size_t i = 0; i < inputs.size(); ++i) check_finite(inputs[i], detail::concat("input ", i, " of '", op, "'"));
    check_finite(out, "the output of '" + op + "'");
  }
  auto node = std::make_shared<Node>();
  node->op = op;
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  for (const auto& [role, t] : saved) {
    if (!t.defined()) continue;
    HL_CHECK(t.impl() != out.impl(), "record: '", op, "' saves its own output ", out.describe(),
             " as its ", role, "; save out.detach() (a node holding its output would keep it alive: a cycle)");
    node->saved.push_back({role, t, t.impl_ptr()->storage, t.impl_ptr()->storage->version()});
  }
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
  return out;
}

namespace {
// Tensors reachable from root through grad_fn edges, each after all of its consumers (reverse
// topological order), by an iterative depth-first search. Strong references: releasing a node
// below may drop the last other reference to a tensor still in this list.
std::vector<std::shared_ptr<TensorImpl>> reverse_topological(const std::shared_ptr<TensorImpl>& root) {
  std::vector<std::shared_ptr<TensorImpl>> post;
  std::unordered_set<TensorImpl*> seen{root.get()};
  std::vector<std::pair<std::shared_ptr<TensorImpl>, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [t, next] = stack.back();
    const auto& node = t->grad_fn;
    if (node && next < node->inputs.size()) {
      const std::shared_ptr<TensorImpl>& in = node->inputs[next++].impl_ptr();
      if (in != nullptr && in->requires_grad && seen.insert(in.get()).second) stack.push_back({in, 0});
    } else {
      post.push_back(t);
      stack.pop_back();
    }
  }
  return {post.rbegin(), post.rend()};
}

// Refuses a node whose saved tensors changed since the forward pass: written in place (the storage's
// version moved) or given new storage (nn::Module::to; the old storage, which the node does not keep
// alive, may be gone).
void check_saved(const Node& node) {
  for (const SavedTensor& s : node.saved) {
    const std::shared_ptr<Storage>& now = s.tensor.impl_ptr()->storage;
    const std::shared_ptr<Storage> then = s.storage.lock();
    if (now == then && now->version() == s.version) continue;
    const std::string& name = s.tensor.name();  // a parameter's path in its model ("2.weight"), if it has one
    const std::string what = detail::concat("backward: '", node.op, "' needs its ", s.role, " (",
                                            name.empty() ? std::string() : "'" + name + "', ", s.tensor.describe(),
                                            ") as it was in the forward pass, but it ");
    if (now != then)
      throw Error(detail::concat(what, "has been given new storage since (nn::Module::to converts or moves ",
                                 "a parameter in place); convert the model before the forward pass, or after ",
                                 "backward()"));
    throw Error(detail::concat(what, "has been written in place since (copy_, fill_ or an optimizer's step: ",
                               "its storage's version was ", s.version, ", now ", now->version(), "), so its ",
                               "gradient would come from the new values; write it after backward(), or give ",
                               "the op a clone()"));
  }
}

// The whole graph, before backward computes or accumulates anything: an error then leaves every .grad
// and the graph as they were.
void check_saved_tensors(const std::vector<std::shared_ptr<TensorImpl>>& order) {
  for (const auto& t : order)
    if (t->grad_fn) check_saved(*t->grad_fn);
}
}  // namespace

size_t Tensor::register_hook(std::function<Tensor(const Tensor&)> fn) {
  require_defined("register_hook");
  HL_CHECK(fn != nullptr, "register_hook: the hook is empty (", describe(), ")");
  HL_CHECK(requires_grad(), "register_hook: ", describe(),
           " does not require grad, so no gradient will ever flow into it (set requires_grad_ on a leaf, "
           "or register the hook on the output of an op whose inputs require grad)");
  impl_->grad_hooks.push_back(std::move(fn));
  return impl_->grad_hooks.size() - 1;
}

void Tensor::remove_hooks() {
  if (defined()) impl_->grad_hooks.clear();
}

Tensor& Tensor::retain_grad() {
  require_defined("retain_grad");
  HL_CHECK(requires_grad(), "retain_grad: ", describe(), " does not require grad, so it will never have a gradient");
  if (!is_leaf()) impl_->retains_grad = true;
  return *this;
}

bool Tensor::retains_grad() const { return defined() && (impl_->retains_grad || (is_leaf() && requires_grad())); }

namespace {
// Run t's hooks on its whole gradient g (in registration order); each may replace it.
Tensor run_grad_hooks(TensorImpl* t, Tensor g) {
  for (size_t i = 0; i < t->grad_hooks.size(); ++i) {
    Tensor r = t->grad_hooks[i](g);
    if (!r.defined()) continue;
    HL_CHECK(r.shape() == g.shape(), "backward: hook ", i, " of a ", dtype_name(t->dtype), shape_str(t->shape),
             " tensor returned a gradient ", r.describe(), "; a hook must return the same shape or Tensor()");
    if (r.dtype() != g.dtype()) r = cast(r, g.dtype());
    if (r.device() != g.device()) r = r.to(g.device());
    g = r;
  }
  return g;
}

// Accumulate g into t->grad (leaves, and non-leaves that retain their gradient), in t's dtype. Every
// .grad owns its storage: the optimizer unscales and clips gradients in place, and several backward
// functions pass a gradient on unchanged (add of two same-shaped tensors gives both inputs the one g,
// reshape a view of it, a hook may return a tensor its caller keeps). So the first gradient is kept as
// it is only when nothing else holds it or its storage (g here is backward()'s own handle), else copied,
// as PyTorch's AccumulateGrad does; a sum or a cast is a new tensor anyway.
void accumulate_grad(TensorImpl* t, const Tensor& g) {
  Tensor acc;
  if (t->grad) {
    acc = add(Tensor(t->grad), g);
  } else if (g.dtype() != t->dtype) {
    acc = g;  // cast below
  } else {
    const bool shared = g.impl_ptr().use_count() > 1 || g.impl_ptr()->storage.use_count() > 1;
    acc = shared ? g.clone() : g;
  }
  if (acc.dtype() != t->dtype) acc = cast(acc, t->dtype);
  t->grad = acc.impl_ptr();
}
}  // namespace

void Tensor::backward(const Tensor& seed, bool retain_graph) const {
  require_defined("backward");
  HL_CHECK(requires_grad(), "backward: ", describe(),
           " does not require grad (no input of the computation had requires_grad set, or it ran under NoGradGuard)");
  Tensor grad0 = seed;
  if (!grad0.defined()) {
    HL_CHECK(numel() == 1, "backward: ", describe(),
             " is not a scalar; pass the gradient of the loss with respect to it as the seed");
    grad0 = Tensor::ones(shape(), dtype(), device());
  }
  HL_CHECK(grad0.shape() == shape(), "backward: seed ", grad0.describe(), " does not match ", describe());

  NoGradGuard no_grad;  // gradients of gradients are not recorded
  profiler::Scope backward_scope("backward");
  const std::vector<std::shared_ptr<TensorImpl>> order = reverse_topological(impl_ptr());
  check_saved_tensors(order);
  std::unordered_map<TensorImpl*, Tensor> grads{{impl(), grad0}};

  for (const auto& tp : order) {
    TensorImpl* t = tp.get();
    auto it = grads.find(t);
    if (it == grads.end()) continue;
    Tensor g = it->second;
    grads.erase(it);  // free each gradient as soon as it has been passed on
    // Complete here: every consumer of t comes before it in `order`, so all contributions are summed.
    if (!t->grad_hooks.empty()) g = run_grad_hooks(t, g);
    if (!t->grad_fn) {  // a leaf: accumulate into .grad
      accumulate_grad(t, g);
      continue;
    }
    if (t->retains_grad) accumulate_grad(t, g);
    Node& node = *t->grad_fn;
    HL_CHECK(!node.released, "backward: the graph through '", node.op,
             "' was already freed by an earlier backward(); pass retain_graph=true to the first call");
    // Again, just before its closure runs: a gradient hook earlier in this pass may have written one.
    check_saved(node);
    std::vector<Tensor> in_grads;
    {
      profiler::Scope node_scope(profiler::enabled() ? node.op + " " + shape_str(node.inputs.empty() ? Shape{} : node.inputs[0].shape())
                                                : std::string());
      in_grads = node.backward(g);
    }
    if (g_detect_anomaly) {
      for (size_t i = 0; i < in_grads.size(); ++i)
        check_finite(in_grads[i], detail::concat("the gradient of input ", i, " of '", node.op, "' (backward)"));
    }
    HL_CHECK(in_grads.size() == node.inputs.size(), "backward: '", node.op, "' returned ", in_grads.size(),
             " gradients for ", node.inputs.size(), " inputs");
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const Tensor& in = node.inputs[i];
      const Tensor& gi = in_grads[i];
      if (!in.requires_grad() || !gi.defined()) continue;
      HL_CHECK(gi.shape() == in.shape(), "backward: '", node.op, "' produced a gradient ", gi.describe(),
               " for input ", i, " of shape ", shape_str(in.shape()));
      auto [slot, inserted] = grads.try_emplace(in.impl(), gi);
      if (!inserted) slot->second = add(slot->second, gi);
    }
  }
  if (!retain_graph) {
    for (const auto& t : order) {
      if (t->grad_fn) {
        t->grad_fn->backward = nullptr;  // drops the tensors the closure saved
        t->grad_fn->inputs.clear();
        t->grad_fn->saved.clear();
        t->grad_fn->released = true;
      }
    }
  }
}

}  // namespace hl
