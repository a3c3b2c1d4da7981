// Checkpoints in the safetensors format (https://huggingface.co/docs/safetensors), so that a PyTorch
// user can open halfling weights with `safetensors.torch.load_file` (or ten lines of numpy), and
// halfling can read weights written by PyTorch.
//
// A file is:
//   8 bytes     N, the header length, unsigned little-endian
//   N bytes     a JSON object, padded with spaces so that 8 + N is a multiple of 8:
//                 {"__metadata__": {"key": "value", ...},
//                  "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   the rest    the tensors' bytes, little-endian, row-major; each tensor's [begin, end) is relative
//               to the first byte after the header; together they cover the rest exactly, with no gap
//               and no overlap.
//
// Writes are atomic (temporary file in the same directory, fsync, rename): a crash or an error during
// a save leaves the previous file intact. Reads check every rule above and throw hl::Error naming the
// file and the problem. docs/checkpoints.md has the details and the PyTorch recipes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace hl {

namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using StringMap = std::map<std::string, std::string>;

// ---- plain safetensors files ------------------------------------------------------------------------

// The contents of a safetensors file: tensors (on the CPU) in file order, and the string metadata.
struct SafeTensors {
  NamedTensors tensors;
  StringMap metadata;
  bool contains(const std::string& name) const;
  // The tensor called `name`; throws hl::Error listing the names present when there is none.
  const Tensor& at(const std::string& name) const;
};

// Write `tensors` (any device; f32, f16, f64 or i32) and `metadata` atomically to `path`. Names must be
// unique, non-empty and not "__metadata__". Throws hl::Error naming the path on any failure.
void save_safetensors(const std::string& path, const NamedTensors& tensors, const StringMap& metadata = {});
// Read and validate a whole file.
SafeTensors load_safetensors(const std::string& path);

// The same, in memory: the bytes save_safetensors writes, and the parser load_safetensors uses.
// `source` names the buffer in error messages (load_safetensors passes the path).
std::vector<uint8_t> serialize_safetensors(const NamedTensors& tensors, const StringMap& metadata = {});
SafeTensors parse_safetensors(const uint8_t* data, size_t size, const std::string& source);

// ---- training checkpoints -------------------------------------------------------------------------------

// A named piece of training state beyond the model and the optimizer (e.g. the loss scaler's
// "scaler" section): tensors and strings. It has the same shape as optim::Optimizer::State.
struct CheckpointSection {
  NamedTensors tensors;
  StringMap meta;
};

// What load_checkpoint hands back besides the values it copied into the model and the optimizer.
struct Checkpoint {
  StringMap metadata;                                 // the user's metadata, as given to save_checkpoint
  std::map<std::string, CheckpointSection> sections;  // the extra sections, by name
};

// Save a model's parameters, optionally the optimizer's state, the user's metadata and extra
// sections. Layout inside the safetensors file (names a PyTorch user can read):
//   tensors   "model.<parameter>" (e.g. "model.0.weight"), "optim.<state tensor>", "<section>.<tensor>"
//   metadata  "halfling.format" = "checkpoint", "halfling.version" = "1",
//             "halfling.sections" = comma-separated extra section names,
//             "optim.<key>" (e.g. "optim.type" = "SGD"), "<section>.<key>", "user.<key>"
// Section names are lower-case identifiers ([a-z0-9_]+), other than "model", "optim", "user" and
// "halfling".
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer = nullptr,
                     const StringMap& metadata = {}, const std::map<std::string, CheckpointSection>& sections = {});

// Load a checkpoint into an existing model (values are copied into the same parameter tensors, so
// handles held by an optimizer stay valid) and, when `optimizer` is given, into the optimizer.
// Everything is checked before anything is changed: missing or unexpected parameters, shapes, dtypes,
// a missing optimizer state; a failure leaves the model and the optimizer as they were.
// dtypes: a stored tensor may be loaded into a parameter of the same dtype or of a wider floating dtype
// (f16 -> f32 -> f64: exact); narrowing (f32 -> f16) or integer <-> floating is an error, because
// it would change values silently. Convert the model first (Module::to(DType)) to load narrower.
// Optimizer state is present but ignored when `optimizer` is null (loading weights for inference); an
// optimizer with master weights built before such a load re-reads them at its next step (optim.h).
Checkpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* optimizer = nullptr);

// Copy the tensors named "<prefix><parameter>" into a model's parameters, with load_checkpoint's
// checks, ignoring tensors outside the prefix. With prefix "" this loads a PyTorch state_dict saved by
// `safetensors.torch.save_file(model.state_dict(), path)` for a model with the same parameter names.
void load_parameters(const SafeTensors& file, nn::Module& model, const std::string& prefix, const std::string& source);

// Checkpoints are written through hl::AtomicFile (framework/atomic_file.h): whole or not at all.

}  // namespace hl
