// The canonical models by name (DESIGN.md §4), and what a saved model needs to say about itself so
// that a program can rebuild it from the checkpoint alone (tutorial 03 --save, tutorial 10).
//
// To add a model: one entry in model_names() and one branch in make_model()
// (tutorials/common/models.cpp). Checkpoints name their model, so tutorial 10 then loads it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "framework/checkpoint.h"
#include "framework/nn.h"
#include "framework/optim.h"

namespace hl::tutorial {

// The names make_model knows: {"mlp512", "lenet", "vgg_small"}.
std::vector<std::string> model_names();
// A freshly initialized model; throws hl::Error listing the known names for an unknown one.
std::shared_ptr<nn::Module> make_model(const std::string& name, Generator& gen);

// Stored as checkpoint metadata ("user.model", "user.dataset", ...; framework/checkpoint.h).
struct ModelCard {
  std::string model;    // a make_model name
  std::string dataset;  // "mnist", "fashion-mnist", ...
  int64_t channels = 1, height = 28, width = 28;  // the input one image must be resized to
  data::Normalization norm;                        // how pixels became inputs in training
  std::vector<std::string> class_names;            // index -> name
  double test_accuracy = -1;                       // < 0: unknown

  // The card of `model` trained on `train` (its image shape, normalization and class names).
  static ModelCard describe(const std::string& model, const std::string& dataset, const data::Dataset& train,
                            double test_accuracy);

  StringMap to_metadata() const;
  // Throws hl::Error naming `source` when a field is missing or malformed (e.g. a checkpoint saved
  // without a model card).
  static ModelCard from_metadata(const StringMap& metadata, const std::string& source);
};

// Save a trained model with its card (the model's weights and buffers only: an inference checkpoint).
void save_model(const std::string& path, const nn::Module& model, const ModelCard& card);
// The same for a model trained in mixed precision: the FP32 master weights the optimizer holds
// (paper §3.1) are what gets saved, not the FP16 working copies, so nothing is lost to rounding. The
// model is converted to FP32 in place and its weights replaced by the masters (call it after
// training), except those written since the last step (copy_, fill_, a load_checkpoint), whose own
// values are newer. Without masters (fp32 or pure fp16 training) it saves the model as it is, widened
// to FP32.
void save_model_fp32(const std::string& path, nn::Module& model, const optim::Optimizer& opt, const ModelCard& card);

// Read a checkpoint written by save_model: the card, and the model rebuilt by name with the saved
// weights, on the CPU in f32 (an f16 checkpoint widens to it; an f64 one is refused, since f64 does
// not fit in f32).
struct LoadedModel {
  ModelCard card;
  std::shared_ptr<nn::Module> model;
};
LoadedModel load_model(const std::string& path);

}  // namespace hl::tutorial
