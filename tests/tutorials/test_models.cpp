// The canonical models by name and the model card a saved model carries (tutorials/common/models.h),
// in-process: every card field through the checkpoint metadata and back, each malformed field named,
// the names make_model knows, and a mixed-precision model saved from its FP32 master weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "framework/checkpoint.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/optim.h"
#include "tests/test_util.h"
#include "tutorials/common/models.h"

namespace {

namespace fs = std::filesystem;
using hl::tutorial::ModelCard;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

ModelCard cifar_card() {
  hl::data::Dataset train;
  train.images = hl::Tensor::zeros({2, 3, 32, 24}, hl::DType::f32, hl::Device::cpu);
  train.labels = hl::Tensor::zeros({2}, hl::DType::i32, hl::Device::cpu);
  train.norm = hl::data::cifar10_normalization();
  train.class_names = {"airplane", "automobile", "bird"};
  return ModelCard::describe("vgg_small", "cifar10", train, 0.8512345678901234);
}

// The message from_metadata throws for `m`, or "(accepted)".
std::string card_error(const hl::StringMap& m) {
  try {
    ModelCard::from_metadata(m, "ckpt.safetensors");
  } catch (const hl::Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ModelCard, DescribeAndTheMetadataRoundTrip) {
  const ModelCard card = cifar_card();
  EXPECT_EQ(card.model, "vgg_small");
  EXPECT_EQ(card.dataset, "cifar10");
  EXPECT_EQ(card.channels, 3);
  EXPECT_EQ(card.height, 32);
  EXPECT_EQ(card.width, 24);
  EXPECT_EQ(card.norm.mean, hl::data::cifar10_normalization().mean);
  EXPECT_EQ(card.norm.std, hl::data::cifar10_normalization().std);
  EXPECT_EQ(card.class_names, (std::vector<std::string>{"airplane", "automobile", "bird"}));

  const hl::StringMap m = card.to_metadata();
  EXPECT_EQ(m.size(), 7u);
  EXPECT_EQ(m.at("input_shape"), "[3,32,24]");
  EXPECT_EQ(m.at("class_names"), R"(["airplane","automobile","bird"])");
  const ModelCard back = ModelCard::from_metadata(m, "x");
  EXPECT_EQ(back.model, card.model);
  EXPECT_EQ(back.dataset, card.dataset);
  EXPECT_EQ(back.channels, 3);
  EXPECT_EQ(back.height, 32);
  EXPECT_EQ(back.width, 24);
  EXPECT_EQ(back.norm.mean, card.norm.mean) << "f32 values survive JSON exactly";
  EXPECT_EQ(back.norm.std, card.norm.std);
  EXPECT_EQ(back.class_names, card.class_names);
  EXPECT_EQ(back.test_accuracy, 0.8512345678901234) << "to the last bit";
  ModelCard unknown = card;
  unknown.test_accuracy = -1;
  EXPECT_EQ(ModelCard::from_metadata(unknown.to_metadata(), "x").test_accuracy, -1.0);
}

TEST(ModelCard, EveryMalformedFieldIsNamed) {
  const hl::StringMap good = cifar_card().to_metadata();
  ASSERT_EQ(card_error(good), "(accepted)");
  for (const auto& [key, value] : good) {
    hl::StringMap m = good;
    m.erase(key);
    const std::string e = card_error(m);
    EXPECT_TRUE(contains(e, "model card of ckpt.safetensors: no '" + key + "' entry")) << e;
    EXPECT_TRUE(contains(e, "03 --save")) << "says how to get a card: " << e;
  }
  auto with = [&](const std::string& key, const std::string& value) {
    hl::StringMap m = good;
    m[key] = value;
    return card_error(m);
  };
  for (const char* shape : {"[3,32]", "[1,3,32,24]", "[0,32,24]", "[3,0,24]", "[3,32,0]", "[-3,32,24]"}) {
    const std::string e = with("input_shape", shape);
    EXPECT_TRUE(contains(e, std::string("input_shape must be [C, H, W], got ").append(shape))) << e;
  }
  EXPECT_EQ(with("input_shape", "[3,1,1]"), "(accepted)") << "1 x 1 images are still images";
  for (const char* key : {"input_shape", "norm_mean", "norm_std", "class_names"}) {
    const std::string e = with(key, "{not json");
    EXPECT_TRUE(contains(e, "model card of ckpt.safetensors: malformed entry")) << key << ": " << e;
  }
  EXPECT_TRUE(contains(with("norm_mean", "[0.5,0.5]"), "normalization")) << "two means for three channels";
  EXPECT_EQ(with("norm_mean", "[0.5]"), "(accepted)") << "one mean serves every channel";
  EXPECT_TRUE(contains(with("norm_std", "[0.2,0,0.2]"), "normalization"));
  EXPECT_TRUE(contains(with("class_names", "[]"), "model card of ckpt.safetensors: no class names"));
  EXPECT_TRUE(contains(with("test_accuracy", "high"), "test_accuracy"));
}

TEST(Models, MakeModelKnowsTheCanonicalNames) {
  EXPECT_EQ(hl::tutorial::model_names(), (std::vector<std::string>{"mlp512", "lenet", "vgg_small"}));
  // Each name builds the model of DESIGN.md §4, initialized as nn:: does with the same generator.
  auto build = [](size_t i, hl::Generator& g) -> std::shared_ptr<hl::nn::Module> {
    if (i == 0) return hl::nn::mlp512(g);
    if (i == 1) return hl::nn::lenet(g);
    return hl::nn::vgg_small(g);
  };
  for (size_t i = 0; i < 3; ++i) {
    hl::Generator a(7), b(7);
    const auto made = hl::tutorial::make_model(hl::tutorial::model_names()[i], a);
    const auto want = build(i, b);
    EXPECT_EQ(made->summary(), want->summary()) << hl::tutorial::model_names()[i];
    EXPECT_EQ(made->parameters()[0].to_vector(), want->parameters()[0].to_vector());
  }
  hl::Generator gen(1);
  try {
    hl::tutorial::make_model("resnet50", gen);
    FAIL() << "an unknown model was built";
  } catch (const hl::Error& e) {
    EXPECT_EQ(std::string(e.what()), "make_model: unknown model 'resnet50' (known: mlp512, lenet, vgg_small)");
  }
}

// Trained in mixed precision, saved from the FP32 masters: the loaded weights are the masters bit
// for bit, not their FP16 working copies (which differ after an update too small for FP16).
class SavedModels : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("halfling_models_" + std::to_string(hl::test::fresh_seed()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // MLP-512 in f16 after one mixed-precision SGD step, at a rate small enough that FP16 cannot hold
  // every update: the masters differ from the working copies.
  struct MixedStep {
    std::shared_ptr<hl::nn::Module> model;
    std::unique_ptr<hl::optim::SGD> sgd;
  };
  static MixedStep one_mixed_step() {
    hl::Generator gen(3);
    MixedStep t;
    t.model = hl::tutorial::make_model("mlp512", gen);
    t.model->to(hl::DType::f16);
    t.sgd = std::make_unique<hl::optim::SGD>(t.model->parameters(),
                                             hl::optim::SGD::Options{.lr = 1e-5, .master_weights = true});
    const hl::Tensor x = hl::Tensor::randn({4, 1, 28, 28}, gen).to(hl::DType::f16);
    const hl::Tensor y = hl::Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4}).to(hl::DType::i32);
    hl::cross_entropy((*t.model)(x), y).backward();
    t.sgd->step();
    return t;
  }
  static ModelCard mnist_card() {
    ModelCard card;
    card.model = "mlp512";
    card.dataset = "mnist";
    card.norm = hl::data::mnist_normalization();
    for (int i = 0; i < 10; ++i) card.class_names.push_back(std::to_string(i));
    return card;
  }
  fs::path dir_;
};

TEST_F(SavedModels, MixedPrecisionModelsAreSavedFromTheirMasterWeights) {
  const MixedStep trained = one_mixed_step();
  hl::nn::Module& model = *trained.model;
  const hl::optim::SGD& sgd = *trained.sgd;
  std::vector<std::vector<float>> masters, working;
  for (size_t i = 0; i < sgd.params().size(); ++i) {
    masters.push_back(sgd.master_weights()[i].to_vector());
    working.push_back(sgd.params()[i].to(hl::DType::f32).to_vector());
  }
  ASSERT_NE(masters[0], working[0]) << "the test needs masters that FP16 cannot hold";

  const ModelCard card = mnist_card();
  hl::tutorial::save_model_fp32(path("m.safetensors"), model, sgd, card);
  EXPECT_EQ(model.parameters()[0].dtype(), hl::DType::f32) << "converted in place";
  const hl::tutorial::LoadedModel loaded = hl::tutorial::load_model(path("m.safetensors"));
  EXPECT_FALSE(loaded.model->training()) << "loaded for inference";
  ASSERT_EQ(loaded.model->parameters().size(), masters.size());
  for (size_t i = 0; i < masters.size(); ++i) {
    EXPECT_EQ(loaded.model->parameters()[i].dtype(), hl::DType::f32);
    EXPECT_EQ(loaded.model->parameters()[i].to_vector(), masters[i]) << "parameter " << i;
  }
  EXPECT_EQ(loaded.card.class_names, card.class_names);

  // Without masters (fp32 training) the model is saved as it is.
  hl::Generator gen2(4);
  auto plain = hl::tutorial::make_model("mlp512", gen2);
  hl::optim::SGD fp32(plain->parameters(), {.lr = 0.1});
  hl::tutorial::save_model_fp32(path("p.safetensors"), *plain, fp32, card);
  EXPECT_EQ(hl::tutorial::load_model(path("p.safetensors")).model->parameters()[0].to_vector(),
            plain->parameters()[0].to_vector());
}

// A parameter written after the last step (a best-weights restore, values set by hand) is newer than
// its master: it is saved as the model holds it, the others from their masters (found by review: the
// stale master was saved).
TEST_F(SavedModels, AParameterWrittenAfterTheLastStepIsSavedAsTheModelHoldsIt) {
  const MixedStep trained = one_mixed_step();
  hl::nn::Module& model = *trained.model;
  const hl::optim::SGD& sgd = *trained.sgd;
  const std::vector<float> master1 = sgd.master_weights()[1].to_vector();
  hl::Tensor p0 = model.parameters()[0];
  p0.detach().fill_(0.25);
  EXPECT_TRUE(sgd.param_written_since_master(0));
  EXPECT_FALSE(sgd.param_written_since_master(1));
  const ModelCard card = mnist_card();
  hl::tutorial::save_model_fp32(path("w.safetensors"), model, sgd, card);
  const auto loaded = hl::tutorial::load_model(path("w.safetensors")).model->parameters();
  for (float v : loaded[0].to_vector()) ASSERT_EQ(v, 0.25f);
  EXPECT_EQ(loaded[1].to_vector(), master1);
}

TEST_F(SavedModels, AFileThatIsNotACheckpointIsNamed) {
  auto load_error = [](const std::string& file) {
    try {
      hl::tutorial::load_model(file);
    } catch (const hl::Error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  const hl::NamedTensors w = {{"w", hl::Tensor::zeros({2}, hl::DType::f32, hl::Device::cpu)}};
  hl::save_safetensors(path("weights.safetensors"), w);
  EXPECT_TRUE(contains(load_error(path("weights.safetensors")),
                       "load_model(" + path("weights.safetensors") + "): not a halfling checkpoint"));
  // A halfling file of another kind (its format named, but not "checkpoint") is refused the same way.
  hl::save_safetensors(path("other.safetensors"), w, {{"halfling.format", "weights"}});
  EXPECT_TRUE(contains(load_error(path("other.safetensors")),
                       "load_model(" + path("other.safetensors") + "): not a halfling checkpoint"));
}

}  // namespace
