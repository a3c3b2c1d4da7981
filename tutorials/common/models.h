// The canonical models by name (DESIGN.md §4), and what a saved model needs to say about itself so
// that a program can rebuild it from the checkpoint alone (tutorial 03 --save, tutorial 10).
//
// To add a model (e.g. LeNet, once nn::lenet exists): one entry in model_names() and one branch in
// make_model() (tutorials/common/models.cpp). Checkpoints name their model, so tutorial 10 then loads it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "framework/checkpoint.h"
#include "framework/nn.h"

namespace hl::tutorial {

// The names make_model knows, e.g. {"mlp512"}.
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

  StringMap to_metadata() const;
  // Throws hl::Error naming `source` when a field is missing or malformed (e.g. a checkpoint saved
  // without a model card).
  static ModelCard from_metadata(const StringMap& metadata, const std::string& source);
};

// Save a trained model with its card (the model's weights only: an inference checkpoint).
void save_model(const std::string& path, const nn::Module& model, const ModelCard& card);

// Read a checkpoint written by save_model: the card, and the model rebuilt by name with the saved
// weights (on the CPU, in the saved dtype's widest form: f32 for an f32 checkpoint).
struct LoadedModel {
  ModelCard card;
  std::shared_ptr<nn::Module> model;
};
LoadedModel load_model(const std::string& path);

}  // namespace hl::tutorial
