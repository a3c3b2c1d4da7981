#include "tutorials/common/models.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "framework/autograd.h"

namespace hl::tutorial {

std::vector<std::string> model_names() { return {"mlp512", "lenet", "vgg_small"}; }

std::shared_ptr<nn::Module> make_model(const std::string& name, Generator& gen) {
  if (name == "mlp512") return nn::mlp512(gen);
  if (name == "lenet") return nn::lenet(gen);
  if (name == "vgg_small") return nn::vgg_small(gen);
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("make_model: unknown model '" + name + "' (known: " + known + ")");
}

namespace {
std::string floats_json(const std::vector<float>& v) { return nlohmann::json(v).dump(); }
}  // namespace

ModelCard ModelCard::describe(const std::string& model, const std::string& dataset, const data::Dataset& train,
                              double test_accuracy) {
  ModelCard card;
  card.model = model;
  card.dataset = dataset;
  card.channels = train.images.size(1);
  card.height = train.images.size(2);
  card.width = train.images.size(3);
  card.norm = train.norm;
  card.class_names = train.class_names;
  card.test_accuracy = test_accuracy;
  return card;
}

StringMap ModelCard::to_metadata() const {
  return {{"model", model},
          {"dataset", dataset},
          {"input_shape", nlohmann::json({channels, height, width}).dump()},
          {"norm_mean", floats_json(norm.mean)},
          {"norm_std", floats_json(norm.std)},
          {"class_names", nlohmann::json(class_names).dump()},
          {"test_accuracy", detail::exact(test_accuracy)}};
}

ModelCard ModelCard::from_metadata(const StringMap& m, const std::string& source) {
  const std::string where = "model card of " + source + ": ";
  auto get = [&](const std::string& key) -> const std::string& {
    auto it = m.find(key);
    HL_CHECK(it != m.end(), where, "no '", key,
             "' entry. This checkpoint was not saved with a model card (tutorial 03 --save writes one; so do 07 and 09)");
    return it->second;
  };
  ModelCard c;
  try {
    c.model = get("model");
    c.dataset = get("dataset");
    const auto shape = nlohmann::json::parse(get("input_shape")).get<std::vector<int64_t>>();
    HL_CHECK(shape.size() == 3 && shape[0] >= 1 && shape[1] >= 1 && shape[2] >= 1, where,
             "input_shape must be [C, H, W], got ", get("input_shape"));
    c.channels = shape[0];
    c.height = shape[1];
    c.width = shape[2];
    c.norm = data::Normalization(nlohmann::json::parse(get("norm_mean")).get<std::vector<float>>(),
                                 nlohmann::json::parse(get("norm_std")).get<std::vector<float>>());
    c.class_names = nlohmann::json::parse(get("class_names")).get<std::vector<std::string>>();
    c.test_accuracy = detail::parse_double(get("test_accuracy"), where + "test_accuracy");
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "malformed entry: " + e.what());
  }
  c.norm.check(where + "normalization", c.channels);
  HL_CHECK(!c.class_names.empty(), where, "no class names");
  return c;
}

void save_model(const std::string& path, const nn::Module& model, const ModelCard& card) {
  save_checkpoint(path, model, nullptr, card.to_metadata());
}

void save_model_fp32(const std::string& path, nn::Module& model, const optim::Optimizer& opt, const ModelCard& card) {
  model.to(DType::f32);  // in place: the optimizer's parameter handles now see f32 tensors
  if (opt.has_master_weights()) {
    const std::vector<Tensor>& params = opt.params();
    const std::vector<Tensor>& masters = opt.master_weights();
    HL_CHECK(params.size() == masters.size(), "save_model_fp32(", path, "): the optimizer holds ", params.size(),
             " parameters but ", masters.size(), " master weights");
    for (size_t i = 0; i < params.size(); ++i)
      // A parameter written since the last step (a best-weights restore, values set by hand) is newer
      // than its master: the model as the caller holds it is what gets saved.
      if (masters[i].defined() && !opt.param_written_since_master(i)) {
        Tensor p = params[i];  // a handle to the model's own tensor (copy_ writes through it)
        p.copy_(masters[i]);
      }
  }
  save_model(path, model, card);
}

LoadedModel load_model(const std::string& path) {
  const SafeTensors file = load_safetensors(path);
  auto fmt = file.metadata.find("halfling.format");
  HL_CHECK(fmt != file.metadata.end() && fmt->second == "checkpoint", "load_model(", path,
           "): not a halfling checkpoint (no halfling.format = checkpoint in its metadata)");
  StringMap user;
  for (const auto& [k, v] : file.metadata)
    if (k.rfind("user.", 0) == 0) user[k.substr(5)] = v;
  LoadedModel out;
  out.card = ModelCard::from_metadata(user, path);
  const auto names = model_names();
  if (std::find(names.begin(), names.end(), out.card.model) == names.end()) {
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    throw Error("load_model(" + path + "): the checkpoint holds a '" + out.card.model +
                "' model, which this program cannot build (known: " + known + ")");
  }
  Generator gen(0);  // the initial values are overwritten by the checkpoint's
  out.model = make_model(out.card.model, gen);
  // Shapes and names are checked here: a checkpoint whose weights do not fit the named model fails
  // with the parameter, the expected and the stored shape.
  load_parameters(file, *out.model, "model.", path);
  out.model->eval();
  int64_t logits_classes = 0;
  {
    NoGradGuard no_grad;  // one blank image through the model: the width of its output
    const Tensor probe = Tensor::zeros({1, out.card.channels, out.card.height, out.card.width});
    const Tensor logits = out.model->forward(probe);
    HL_CHECK(logits.dim() == 2 && logits.size(0) == 1, "load_model(", path, "): the model maps a ",
             shape_str(probe.shape()), " input to ", logits.describe(), ", not to [1, classes]");
    logits_classes = logits.size(1);
  }
  HL_CHECK(logits_classes == static_cast<int64_t>(out.card.class_names.size()), "load_model(", path, "): the model has ",
           logits_classes, " outputs but the card names ", out.card.class_names.size(), " classes");
  return out;
}

}  // namespace hl::tutorial
