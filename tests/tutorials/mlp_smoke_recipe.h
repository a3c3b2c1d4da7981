// The MLP-512 smoke run that tutorials 03 and 05 share, built again through the library for the tests
// that compare a program's log with it: the first 2048 training and 1000 test images, MLP-512 from
// Generator(0), SGD (lr 0.05, momentum 0.9), batches of 128 in a shuffled order (seed 0), the test set
// in one batch of 1000. Each test adds what its chapter adds (03 nothing; 05 its schedule and scaler).
#pragma once

#include <memory>
#include <string>

#include "datasets/dataloader.h"
#include "datasets/mnist.h"
#include "framework/nn.h"
#include "framework/optim.h"

namespace hl::test {

struct MlpSmokeRecipe {
  explicit MlpSmokeRecipe(const std::string& mnist_dir)
      : model(nn::mlp512(gen)),
        sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9}),
        train_loader(data::load_mnist(mnist_dir, data::Split::train).subset(0, 2048),
                     {.batch_size = 128, .shuffle = true, .seed = 0}),
        test_loader(data::load_mnist(mnist_dir, data::Split::test).subset(0, 1000),
                    {.batch_size = 1000, .shuffle = false}) {}

  Generator gen{0};  // declared first: the model is drawn from it
  std::shared_ptr<nn::Sequential> model;
  optim::SGD sgd;
  data::DataLoader train_loader, test_loader;
};

}  // namespace hl::test
