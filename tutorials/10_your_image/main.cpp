// Tutorial 10: classify your own image with a saved model.
//
//   build/tutorials/03_mlp_mnist --save mlp.safetensors        # train, and save with a model card
//   build/tutorials/10_your_image --checkpoint mlp.safetensors --image my_digit.png
//
// The checkpoint carries everything needed besides the image (tutorials/common/models.h): which model
// to build, the input size, the normalization used in training and the class names. A digit is made to
// look like an MNIST digit first: gray, light on dark, cropped, scaled into a 20x20 box and centered
// by its center of mass in 28x28 (how LeCun et al. prepared MNIST). The chapter is README.md here.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "datasets/image.h"
#include "datasets/mnist.h"
#include "framework/autograd.h"
#include "framework/ops.h"
#include "tutorials/common/cli.h"
#include "tutorials/common/models.h"

using namespace hl;

namespace {

struct Prepared {
  data::Image image;  // what the model sees, card.width x card.height
  std::vector<std::string> steps;
};

double border_mean(const data::Image& g) {
  double s = 0;
  int64_t n = 0;
  for (int64_t y = 0; y < g.height; ++y)
    for (int64_t x = 0; x < g.width; ++x)
      if (y == 0 || x == 0 || y == g.height - 1 || x == g.width - 1) {
        s += g.at(y, x, 0);
        ++n;
      }
  return n > 0 ? s / static_cast<double>(n) : 0.0;
}

// A gray image of any size -> an MNIST-like digit: light strokes on black, the digit's bounding box
// scaled (aspect kept) into a box of 20/28 of the output, placed so its center of mass is the center.
Prepared prepare_digit(data::Image g, int64_t out_w, int64_t out_h, const std::string& invert, bool center) {
  Prepared p;
  const double bg = border_mean(g);
  const bool flip = invert == "yes" || (invert == "auto" && bg > 127.5);
  char buf[320];
  if (flip) {
    for (uint8_t& v : g.pixels) v = static_cast<uint8_t>(255 - v);
    std::snprintf(buf, sizeof buf, "inverted (%s; border mean %.0f): MNIST digits are light on a black background",
                  invert == "yes" ? "--invert yes" : "light background", bg);
  } else {
    std::snprintf(buf, sizeof buf, "not inverted (%s; border mean %.0f)", invert == "no" ? "--invert no" : "dark background", bg);
  }
  p.steps.push_back(buf);

  const uint8_t peak = *std::max_element(g.pixels.begin(), g.pixels.end());
  int64_t x0 = g.width, y0 = g.height, x1 = -1, y1 = -1;
  const auto ink = static_cast<uint8_t>(std::max(1, peak / 4));  // fainter than a quarter of the peak: paper, not ink
  for (int64_t y = 0; y < g.height; ++y)
    for (int64_t x = 0; x < g.width; ++x)
      if (g.at(y, x, 0) >= ink) {
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
  if (!center || x1 < 0 || peak == 0) {
    p.image = data::resize_image(g, out_w, out_h);
    std::snprintf(buf, sizeof buf, "resized %lldx%lld -> %lldx%lld%s", static_cast<long long>(g.width),
                  static_cast<long long>(g.height), static_cast<long long>(out_w), static_cast<long long>(out_h),
                  center ? " (no ink found to center)" : " (--no-center)");
    p.steps.push_back(buf);
    return p;
  }
  // Crop to the ink, pad to a square (so the aspect ratio survives the resize), scale into the box.
  const int64_t bw = x1 - x0 + 1, bh = y1 - y0 + 1, side = std::max(bw, bh);
  data::Image sq{side, side, 1, std::vector<uint8_t>(static_cast<size_t>(side * side), 0)};
  for (int64_t y = 0; y < bh; ++y)
    for (int64_t x = 0; x < bw; ++x)
      sq.pixels[static_cast<size_t>((y + (side - bh) / 2) * side + x + (side - bw) / 2)] = g.at(y0 + y, x0 + x, 0);
  const int64_t box = std::max<int64_t>(1, std::lround(static_cast<double>(std::min(out_w, out_h)) * 20.0 / 28.0));
  const data::Image digit = data::resize_image(sq, box, box);
  // Center of mass of the scaled digit, then paste it so that lands on the image center.
  double m = 0, mx = 0, my = 0;
  for (int64_t y = 0; y < box; ++y)
    for (int64_t x = 0; x < box; ++x) {
      const double v = digit.at(y, x, 0);
      m += v, mx += v * static_cast<double>(x), my += v * static_cast<double>(y);
    }
  const int64_t ox = std::lround(static_cast<double>(out_w) / 2.0 - 0.5 - (m > 0 ? mx / m : (box - 1) / 2.0));
  const int64_t oy = std::lround(static_cast<double>(out_h) / 2.0 - 0.5 - (m > 0 ? my / m : (box - 1) / 2.0));
  p.image = data::Image{out_w, out_h, 1, std::vector<uint8_t>(static_cast<size_t>(out_w * out_h), 0)};
  for (int64_t y = 0; y < box; ++y)
    for (int64_t x = 0; x < box; ++x) {
      const int64_t tx = x + ox, ty = y + oy;
      if (tx >= 0 && ty >= 0 && tx < out_w && ty < out_h) p.image.pixels[static_cast<size_t>(ty * out_w + tx)] = digit.at(y, x, 0);
    }
  std::snprintf(buf, sizeof buf, "the ink's bounding box (%lldx%lld at x=%lld, y=%lld) scaled into %lldx%lld, "
                "centered by its center of mass in %lldx%lld", static_cast<long long>(bw), static_cast<long long>(bh),
                static_cast<long long>(x0), static_cast<long long>(y0), static_cast<long long>(box), static_cast<long long>(box),
                static_cast<long long>(out_w), static_cast<long long>(out_h));
  p.steps.push_back(buf);
  return p;
}

// --smoke: the first test image of the checkpoint's data set, written the way a person would draw it
// (dark on white, 4x larger), so that every preparation step runs.
std::string write_smoke_image(const tutorial::ModelCard& card, const std::string& data_dir, int* label) {
  const std::string dir = data_dir.empty() ? tutorial::default_data_dir(card.dataset) : data_dir;
  HL_CHECK(card.dataset == "mnist" || card.dataset == "fashion-mnist", "--smoke: no test images for data set '",
           card.dataset, "' (give --image)");
  data::Dataset test = card.dataset == "mnist" ? data::load_mnist(dir, data::Split::test, card.norm)
                                               : data::load_fashion_mnist(dir, data::Split::test, card.norm);
  data::Image img = data::tensor_to_image(test.images.slice_rows(0, 1).reshape({card.channels, card.height, card.width}), card.norm);
  for (uint8_t& v : img.pixels) v = static_cast<uint8_t>(255 - v);
  const std::string path = (std::filesystem::temp_directory_path() / "halfling_10_smoke_digit.png").string();
  data::write_png(path, data::scale_nearest(img, 4));
  *label = test.labels.to_int()[0];
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"halfling tutorial 10: classify your own image with a saved model"};
  std::string checkpoint, image_path, invert = "auto", save_input, device = "cpu", data_dir;
  bool no_center = false, smoke = false;
  int64_t top = 3;
  // Checked after parsing rather than with CLI11's required(), so that a mistyped flag is reported as
  // itself and not as a missing --checkpoint.
  app.add_option("--checkpoint", checkpoint, "a model saved by tutorial 03 --save (required)");
  app.add_option("--image", image_path, "a PNG, JPEG or BMP file");
  app.add_option("--invert", invert, "make the digit light on dark: auto (when the border is light), yes or no")
      ->check(CLI::IsMember({"auto", "yes", "no"}))
      ->capture_default_str();
  app.add_flag("--no-center", no_center, "only resize: no cropping to the digit and centering");
  app.add_option("--save-input", save_input, "write what the model sees (after preparation) as a PNG");
  app.add_option("--top", top, "how many classes to list")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--device", device, "cpu, cuda or auto")->check(CLI::IsMember({"cpu", "cuda", "gpu", "auto"}))->capture_default_str();
  app.add_option("--data", data_dir, "data directory for --smoke");
  app.add_flag("--smoke", smoke, "without --image: classify the first test image of the checkpoint's data set, "
                                 "drawn dark on white and 4x larger");
  CLI11_PARSE(app, argc, argv);

  try {
    HL_CHECK(!checkpoint.empty(), "--checkpoint is required: a model saved by tutorial 03 --save PATH");
    const Device dev = parse_device(device);
    tutorial::LoadedModel lm = tutorial::load_model(checkpoint);
    const tutorial::ModelCard& card = lm.card;
    std::printf("halfling 10_your_image: %s trained on %s (test accuracy %.2f%%), from %s\n", card.model.c_str(),
                card.dataset.c_str(), 100 * card.test_accuracy, checkpoint.c_str());
    int smoke_label = -1;
    if (image_path.empty()) {
      HL_CHECK(smoke, "no --image given (a PNG, JPEG or BMP file to classify)");
      image_path = write_smoke_image(card, data_dir, &smoke_label);
      std::printf("--smoke: wrote test image 0 of %s (label %s), dark on white and 4x larger, to %s\n",
                  card.dataset.c_str(), card.class_names.at(static_cast<size_t>(smoke_label)).c_str(), image_path.c_str());
    }
    HL_CHECK(card.channels == 1 || card.channels == 3, "the model expects ", card.channels, " channels (1 or 3 supported)");
    const data::Image original = data::read_image(image_path, 0);
    std::printf("image %s: %lldx%lld, %lld channel(s)\n", image_path.c_str(), static_cast<long long>(original.width),
                static_cast<long long>(original.height), static_cast<long long>(original.channels));
    Prepared prep;
    if (card.channels == 1) {
      prep = prepare_digit(data::read_image(image_path, 1), card.width, card.height, invert, !no_center);
      prep.steps.insert(prep.steps.begin(), original.channels == 1 ? "already gray" : "converted to gray");
    } else {  // color models (CIFAR-10 style): the whole picture, resized
      prep.image = data::resize_image(data::read_image(image_path, 3), card.width, card.height);
      prep.steps.push_back("resized to " + std::to_string(card.width) + "x" + std::to_string(card.height));
    }
    for (const std::string& s : prep.steps) std::printf("  - %s\n", s.c_str());
    if (!save_input.empty()) {
      data::write_png(save_input, data::scale_nearest(prep.image, 8));
      std::printf("  (what the model sees, 8x larger: %s)\n", save_input.c_str());
    }

    Tensor x = data::image_to_tensor(prep.image, card.norm).reshape({1, card.channels, card.height, card.width}).to(dev);
    lm.model->to(dev);
    NoGradGuard no_grad;
    const std::vector<float> probs = exp(log_softmax(lm.model->forward(x))).to_vector();
    std::vector<size_t> order(probs.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] > probs[b]; });
    const auto k = static_cast<size_t>(std::min<int64_t>(top, static_cast<int64_t>(probs.size())));
    std::printf("top %zu:\n", k);
    for (size_t i = 0; i < k; ++i)
      std::printf("  %zu. %-14s %7.2f%%\n", i + 1, card.class_names.at(order[i]).c_str(), 100.0 * probs[order[i]]);
    if (smoke_label >= 0)
      std::printf("the true label is %s: %s\n", card.class_names.at(static_cast<size_t>(smoke_label)).c_str(),
                  static_cast<int>(order[0]) == smoke_label ? "correct" : "wrong");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "10_your_image: %s\n", e.what());
    return 1;
  }
}
