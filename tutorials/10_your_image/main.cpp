// Tutorial 10: classify your own image with a saved model.
//
//   build/tutorials/03_mlp_mnist --save mlp.safetensors        # train, and save with a model card
//   build/tutorials/10_your_image --checkpoint mlp.safetensors --image my_digit.png
//
// The checkpoint carries everything needed besides the image (tutorials/common/models.h): which model
// to build, the input size, the normalization used in training, the class names and the data set. An
// image with an alpha channel is first flattened onto white. Then a gray model's input is made to look
// like its data set: gray, light on dark, cropped to the drawing, and for MNIST scaled into a 20x20 box
// and centered by its center of mass in 28x28 (how LeCun et al. prepared MNIST), for Fashion-MNIST
// scaled so its longest side fills 28 and centered (how Xiao et al. did). The chapter is README.md here.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "datasets/image.h"
#include "datasets/io.h"
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

// The two data sets' recipes (how their 28x28 images were made from larger pictures):
// - MNIST (LeCun et al.): the digit's bounding box scaled, aspect kept, into a 20x20 box, then placed
//   so that its center of mass is the center of the 28x28 image.
// - Fashion-MNIST (Xiao et al. 2017, arXiv 1708.07747): the product photo trimmed to the item, its
//   longest side scaled to 28, the shorter side padded to 28 with the item in the middle.
// A model is only right on inputs made like its training data. Of the first 100 test images, drawn dark
// on white and 4x larger, the chapter's Fashion model got 85 right with Fashion-MNIST's recipe and 42
// with MNIST's; its MNIST model got 98 with MNIST's and 41 with Fashion-MNIST's.
enum class Recipe { digit, item };

// The bounding box of the pixels at least `ink` bright: x0, y0, width, height (width 0 when none).
struct Box {
  int64_t x0 = 0, y0 = 0, w = 0, h = 0;
};
Box ink_box(const data::Image& g, uint8_t ink) {
  int64_t x0 = g.width, y0 = g.height, x1 = -1, y1 = -1;
  for (int64_t y = 0; y < g.height; ++y)
    for (int64_t x = 0; x < g.width; ++x)
      if (g.at(y, x, 0) >= ink) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  return x1 < 0 ? Box{} : Box{x0, y0, x1 - x0 + 1, y1 - y0 + 1};
}

// The box cut out of g and scaled, aspect kept, so that it just fits into box_w x box_h. The crop is
// resized as it is, not first padded to a square: a 65535x4 strip of ink padded to 65535x65535 took
// 4.2 GB; cropped, the work stays within the decoded image's own size.
data::Image fit_crop(const data::Image& g, const Box& b, int64_t box_w, int64_t box_h) {
  data::Image crop{b.w, b.h, 1, std::vector<uint8_t>(static_cast<size_t>(b.w * b.h))};
  for (int64_t y = 0; y < b.h; ++y)
    std::copy_n(g.pixels.begin() + (b.y0 + y) * g.width + b.x0, b.w, crop.pixels.begin() + y * b.w);
  const double s = std::min(static_cast<double>(box_w) / static_cast<double>(b.w),
                            static_cast<double>(box_h) / static_cast<double>(b.h));
  const int64_t w = std::clamp<int64_t>(std::lround(static_cast<double>(b.w) * s), 1, box_w);
  const int64_t h = std::clamp<int64_t>(std::lround(static_cast<double>(b.h) * s), 1, box_h);
  return data::resize_image(crop, w, h);
}

// A gray image of any size -> what the model's data set looks like: light on black, out_w x out_h,
// made with the data set's recipe (or only resized, with --no-center).
Prepared prepare_gray(data::Image g, int64_t out_w, int64_t out_h, const std::string& invert, bool center,
                      Recipe recipe) {
  Prepared p;
  const double bg = border_mean(g);
  const bool flip = invert == "yes" || (invert == "auto" && bg > 127.5);
  char buf[320];
  if (flip) {
    for (uint8_t& v : g.pixels) v = static_cast<uint8_t>(255 - v);
    std::snprintf(buf, sizeof buf, "inverted (%s; border mean %.0f): %s are light on a black background",
                  invert == "yes" ? "--invert yes" : "light background", bg,
                  recipe == Recipe::digit ? "MNIST digits" : "Fashion-MNIST items");
  } else {
    std::snprintf(buf, sizeof buf, "not inverted (%s; border mean %.0f)", invert == "no" ? "--invert no" : "dark background", bg);
  }
  p.steps.push_back(buf);

  const uint8_t peak = *std::max_element(g.pixels.begin(), g.pixels.end());
  // What counts as the drawing. A digit: brighter than a quarter of the peak (fainter is paper, not
  // ink). An item: brighter than the background by 5% of the range (13), as Fashion-MNIST trimmed its
  // photos. The background is the border's median, not its mean: a sleeve or a trouser leg may touch
  // the border, and a few bright border pixels must not raise the threshold above the item's own.
  int ink = std::max(1, peak / 4);
  if (recipe == Recipe::item) {
    std::vector<uint8_t> border;
    for (int64_t y = 0; y < g.height; ++y)
      for (int64_t x = 0; x < g.width; ++x)
        if (y == 0 || x == 0 || y == g.height - 1 || x == g.width - 1) border.push_back(g.at(y, x, 0));
    std::nth_element(border.begin(), border.begin() + static_cast<std::ptrdiff_t>(border.size() / 2), border.end());
    ink = border[border.size() / 2] + 13;
  }
  const Box b = ink <= 255 ? ink_box(g, static_cast<uint8_t>(ink)) : Box{};
  if (!center || b.w == 0 || peak == 0) {
    p.image = data::resize_image(g, out_w, out_h);
    std::snprintf(buf, sizeof buf, "resized %lldx%lld -> %lldx%lld%s", static_cast<long long>(g.width),
                  static_cast<long long>(g.height), static_cast<long long>(out_w), static_cast<long long>(out_h),
                  !center                   ? " (--no-center)"
                  : recipe == Recipe::digit ? " (no ink found to center)"
                                            : " (no item found)");
    p.steps.push_back(buf);
    return p;
  }
  // A digit goes into a box of 20/28 of the output; an item fills the whole output.
  const int64_t box = std::max<int64_t>(1, std::lround(static_cast<double>(std::min(out_w, out_h)) * 20.0 / 28.0));
  const data::Image fit = recipe == Recipe::digit ? fit_crop(g, b, box, box) : fit_crop(g, b, out_w, out_h);
  int64_t ox = (out_w - fit.width) / 2, oy = (out_h - fit.height) / 2;  // an item: its box in the middle
  if (recipe == Recipe::digit) {  // a digit: its center of mass at the image center
    double m = 0, mx = 0, my = 0;
    for (int64_t y = 0; y < fit.height; ++y)
      for (int64_t x = 0; x < fit.width; ++x) {
        const double v = fit.at(y, x, 0);
        m += v, mx += v * static_cast<double>(x), my += v * static_cast<double>(y);
      }
    const double cx = m > 0 ? mx / m : (static_cast<double>(fit.width) - 1) / 2.0;
    const double cy = m > 0 ? my / m : (static_cast<double>(fit.height) - 1) / 2.0;
    ox = std::lround(static_cast<double>(out_w) / 2.0 - 0.5 - cx);
    oy = std::lround(static_cast<double>(out_h) / 2.0 - 0.5 - cy);
  }
  p.image = data::Image{out_w, out_h, 1, std::vector<uint8_t>(static_cast<size_t>(out_w * out_h), 0)};
  for (int64_t y = 0; y < fit.height; ++y)
    for (int64_t x = 0; x < fit.width; ++x) {
      const int64_t tx = x + ox, ty = y + oy;
      if (tx >= 0 && ty >= 0 && tx < out_w && ty < out_h)
        p.image.pixels[static_cast<size_t>(ty * out_w + tx)] = fit.at(y, x, 0);
    }
  const auto ll = [](int64_t v) { return static_cast<long long>(v); };
  if (recipe == Recipe::digit)
    std::snprintf(buf, sizeof buf, "the ink's bounding box (%lldx%lld at x=%lld, y=%lld) scaled into %lldx%lld, "
                  "centered by its center of mass in %lldx%lld", ll(b.w), ll(b.h), ll(b.x0), ll(b.y0), ll(box), ll(box),
                  ll(out_w), ll(out_h));
  else
    std::snprintf(buf, sizeof buf, "the item's bounding box (%lldx%lld at x=%lld, y=%lld) scaled to %lldx%lld, "
                  "its longest side filling %lldx%lld, centered", ll(b.w), ll(b.h), ll(b.x0), ll(b.y0), ll(fit.width),
                  ll(fit.height), ll(out_w), ll(out_h));
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
  std::string checkpoint, image_path, invert = "auto", save_input, device = "cpu", data_dir, prepare = "auto";
  std::string exif = "apply";
  bool no_center = false, smoke = false;
  int64_t top = 3;
  // Checked after parsing rather than with CLI11's required(), so that a mistyped flag is reported as
  // itself and not as a missing --checkpoint.
  app.add_option("--checkpoint", checkpoint, "a model saved by tutorial 03 --save (required)");
  app.add_option("--image", image_path, "a PNG, JPEG or BMP file");
  app.add_option("--invert", invert, "make the digit light on dark: auto (when the border is light), yes or no")
      ->check(CLI::IsMember({"auto", "yes", "no"}))
      ->capture_default_str();
  app.add_flag("--no-center", no_center, "only resize: no cropping to the drawing and centering");
  app.add_option("--prepare", prepare, "a gray image is made to look like mnist (digits) or fashion-mnist (items); "
                                       "auto: the model card's data set")
      ->check(CLI::IsMember({"auto", "mnist", "fashion-mnist"}))
      ->capture_default_str();
  app.add_option("--exif", exif, "apply: turn a photo upright by its EXIF orientation, as a viewer does; ignore: "
                                 "use the pixels as stored")
      ->check(CLI::IsMember({"apply", "ignore"}))
      ->capture_default_str();
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
    // A misspelt HALFLING_GEMM (or _SOFTMAX, _CONV, _BN) is refused here, naming the variable: this
    // program has no --gemm flag to pin a variant with.
    tutorial::check_variant_environment();
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
    // Read once; decoded as stored (to report it), then in the channels the model needs.
    const std::vector<uint8_t> bytes = data::read_file_bytes(image_path, "read_image");
    const data::Image original = data::decode_image(bytes.data(), bytes.size(), image_path, 0);
    std::printf("image %s: %lldx%lld, %lld channel(s)\n", image_path.c_str(), static_cast<long long>(original.width),
                static_cast<long long>(original.height), static_cast<long long>(original.channels));
    // An alpha channel (2: gray + alpha, 4: RGBA) is composited onto white, as a viewer shows it.
    // Dropped instead, a digit drawn in black on a transparent canvas is black on black: no ink.
    const bool alpha = original.channels == 2 || original.channels == 4;
    const int channels = static_cast<int>(card.channels) + (alpha ? 1 : 0);
    // A phone held on its side stores the pixels unturned, with an EXIF orientation tag for viewers:
    // read as stored, a "7" reached the model on its side (README). Turned upright unless --exif ignore.
    const data::ExifOrientation orientation = data::exif_orientation(bytes.data(), bytes.size());
    data::Image input = data::decode_image(bytes.data(), bytes.size(), image_path, channels);
    std::vector<std::string> first;
    if (orientation.value != 1) {
      const std::string tag = "EXIF orientation " + std::to_string(orientation.value) + " (" +
                              data::exif_orientation_name(orientation.value) + ")";
      if (exif == "apply") {
        input = data::apply_exif_orientation(input, orientation.value);
        first.push_back("turned upright: " + tag);
      } else {
        first.push_back(tag + " ignored (--exif ignore): the pixels as stored");
      }
    }
    if (!orientation.problem.empty())
      first.push_back("EXIF orientation unreadable, so the pixels are used as stored (" + orientation.problem + ")");
    if (card.channels == 1) first.push_back(original.channels <= 2 ? "already gray" : "converted to gray");
    if (alpha) {
      input = data::flatten_alpha(input, 255);
      first.push_back("flattened the alpha channel onto white");
    }
    Prepared prep;
    if (card.channels == 1) {
      // Each data set's own recipe: the card names the data set; --prepare overrides it (a model of
      // another data set gets MNIST's, the recipe this program had before it knew Fashion-MNIST's).
      const std::string set = prepare != "auto" ? prepare : card.dataset;
      const Recipe recipe = set == "fashion-mnist" ? Recipe::item : Recipe::digit;
      prep = prepare_gray(std::move(input), card.width, card.height, invert, !no_center, recipe);
      first.push_back(std::string("using ") + (recipe == Recipe::item ? "Fashion-MNIST's" : "MNIST's") +
                      " preparation (" + (prepare != "auto" ? "--prepare " + prepare : "the model card's data set is " +
                      card.dataset) + ")");
    } else {  // color models (CIFAR-10 style): the whole picture, resized
      prep.image = data::resize_image(input, card.width, card.height);
      prep.steps.push_back("resized to " + std::to_string(card.width) + "x" + std::to_string(card.height));
    }
    prep.steps.insert(prep.steps.begin(), first.begin(), first.end());
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
