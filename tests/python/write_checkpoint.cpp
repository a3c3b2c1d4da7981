// The halfling side of tests/python/safetensors_interop.py (numpy reads what halfling writes, and
// halfling reads what numpy writes). Not a tutorial: a small test helper with three commands.
//
//   write_checkpoint write <dir> <seed>
//       Train a small MLP (6-8-3) for two SGD steps, save_checkpoint() it with its optimizer state,
//       user metadata and an "extra" section holding one tensor of every dtype, to
//       <dir>/halfling.safetensors. Write what halfling holds to <dir>/halfling.json: every tensor's
//       dtype, shape and values (doubles, exact), the metadata, and one forward pass (x, logits), so
//       numpy can check the values and the layout of the weights.
//   write_checkpoint check <file> <expected.json>
//       Load a file numpy wrote; compare every tensor (name order, dtype, shape, exact values) and the
//       metadata with the JSON; load_checkpoint() it into the same MLP and compare the forward pass.
//   write_checkpoint load <file>
//       Just load it: exit 0, or print the error and exit 1 (for files that must be rejected).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "framework/autograd.h"
#include "framework/checkpoint.h"
#include "framework/nn.h"
#include "framework/optim.h"

using namespace hl;
using json = nlohmann::ordered_json;

namespace {

std::shared_ptr<nn::Sequential> mlp(Generator& g) {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 8, g), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3, g)});
}

const char* code(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::f64: return "F64";
  }
  return "?";
}

json describe(const Tensor& t) {
  return {{"dtype", code(t.dtype())}, {"shape", t.shape()}, {"values", t.to_double()}};
}

int write(const std::string& dir, uint64_t seed) {
  Generator g(seed);
  auto model = mlp(g);
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 2; ++step) {
    std::vector<int32_t> y(4);
    for (auto& v : y) v = static_cast<int32_t>(g.below(3));
    sgd.zero_grad();
    cross_entropy((*model)(Tensor::randn({4, 6}, g)), Tensor::from_vector(y, {4})).backward();
    sgd.step();
  }
  CheckpointSection extra;
  extra.tensors.emplace_back("half", Tensor::randn({2, 3}, g, DType::f16));
  extra.tensors.emplace_back("double", Tensor::randn({3}, g, DType::f64));
  std::vector<int32_t> ints(5);
  for (auto& v : ints) v = static_cast<int32_t>(g.below(1u << 31)) - (1 << 30);
  extra.tensors.emplace_back("ints", Tensor::from_vector(ints, {5}));
  extra.tensors.emplace_back("scalar", Tensor::scalar(g.normal()));
  extra.tensors.emplace_back("empty", Tensor::empty({0, 3}));
  extra.meta["kind"] = "interop";
  const std::string path = dir + "/halfling.safetensors";
  save_checkpoint(path, *model, &sgd, {{"seed", std::to_string(seed)}}, {{"extra", extra}});

  // What halfling itself reads back is what numpy must see.
  const SafeTensors back = load_safetensors(path);
  json out;
  out["tensors"] = json::object();
  for (const auto& [name, t] : back.tensors) out["tensors"][name] = describe(t);
  out["metadata"] = back.metadata;
  NoGradGuard no_grad;
  const Tensor x = Tensor::randn({4, 6}, g);
  out["x"] = describe(x);
  out["logits"] = describe((*model)(x));
  std::ofstream(dir + "/halfling.json") << out.dump(1) << "\n";
  std::printf("wrote %s (%zu tensors)\n", path.c_str(), back.tensors.size());
  return 0;
}

DType dtype_of(const std::string& s) {
  if (s == "F32") return DType::f32;
  if (s == "F16") return DType::f16;
  if (s == "F64") return DType::f64;
  if (s == "I32") return DType::i32;
  throw Error("check: unknown dtype " + s);
}

int check(const std::string& path, const std::string& expected_path) {
  std::ifstream in(expected_path);
  const json expected = json::parse(in);
  const SafeTensors file = load_safetensors(path);
  int errors = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "check: %s\n", what.c_str());
    ++errors;
  };
  const json& tensors = expected["tensors"];
  if (file.tensors.size() != tensors.size())
    fail("file has " + std::to_string(file.tensors.size()) + " tensors, numpy wrote " + std::to_string(tensors.size()));
  size_t i = 0;
  for (const auto& [name, e] : tensors.items()) {
    if (i >= file.tensors.size()) break;
    const auto& [got_name, t] = file.tensors[i++];
    if (got_name != name) fail("tensor " + std::to_string(i - 1) + " is '" + got_name + "', expected '" + name + "'");
    if (t.dtype() != dtype_of(e["dtype"])) fail(name + ": dtype " + dtype_name(t.dtype()));
    if (t.shape() != e["shape"].get<Shape>()) fail(name + ": shape " + shape_str(t.shape()));
    else if (t.to_double() != e["values"].get<std::vector<double>>()) fail(name + ": values differ");
  }
  if (file.metadata != expected["metadata"].get<StringMap>()) fail("metadata differs");

  // The weights numpy wrote, in PyTorch's layout (Linear weight [out, in]), give numpy's logits.
  Generator g(0);
  auto model = mlp(g);
  load_checkpoint(path, *model);
  NoGradGuard no_grad;
  const Tensor x = Tensor::from_vector(expected["x"]["values"].get<std::vector<double>>(), {4, 6}, DType::f32);
  const std::vector<double> logits = (*model)(x).to_double();
  const std::vector<double> ref = expected["logits"]["values"].get<std::vector<double>>();
  double num = 0, den = 0;
  for (size_t k = 0; k < ref.size() && k < logits.size(); ++k) {
    num += (logits[k] - ref[k]) * (logits[k] - ref[k]);
    den += ref[k] * ref[k];
  }
  // f32 arithmetic against numpy's float64 on values of order 1: ~1e-7; 1e-5 leaves room, and a
  // transposed or misplaced weight gives an error of order 1.
  const double rel = std::sqrt(num / den);
  if (logits.size() != ref.size() || !(rel < 1e-5)) fail("logits differ from numpy's: relative error " + std::to_string(rel));
  std::printf("check: %zu tensors, metadata and logits (relative error %.2e) %s\n", file.tensors.size(), rel,
              errors ? "MISMATCH" : "match");
  return errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "write" && argc == 4) return write(argv[2], std::stoull(argv[3]));
    if (cmd == "check" && argc == 4) return check(argv[2], argv[3]);
    if (cmd == "load" && argc == 3) {
      const SafeTensors f = load_safetensors(argv[2]);
      std::printf("loaded %zu tensors\n", f.tensors.size());
      return 0;
    }
    std::fprintf(stderr, "usage: %s write <dir> <seed> | check <file> <expected.json> | load <file>\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_checkpoint: %s\n", e.what());
    return 1;
  }
}
