// Tutorial 10 (classify your own image): a checkpoint with a model card goes in with a PNG the test
// writes itself; the printed top-3 must be what the same model computes in this process on the image
// the program says it prepared; the MNIST-style preparation (inversion, cropping, centering) is
// checked on that image, Fashion-MNIST's on a Fashion model's, and so are the flattening of a
// transparent canvas onto white and the bounded memory of a 65535x4 image; tutorial 03 --save and
// tutorial 07 --save (LeNet, trained in mixed precision, saved from its FP32 master weights) hand
// their models over; --smoke draws its own test set's first image; --top; bad inputs give clear errors.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/image.h"
#include "datasets/mnist.h"
#include "framework/autograd.h"
#include "framework/checkpoint.h"
#include "framework/ops.h"
#include "tests/datasets/data_files.h"
#include "tests/test_util.h"
#include "tutorials/common/models.h"

namespace {

namespace fs = std::filesystem;
using namespace hl;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::pair<int, std::string> run10(const std::string& args) {
  return test::run_command(test::tutorial_program("10_your_image") + " " + args);
}

// (name, percent) of each "  k. name  p%" line after "top".
std::vector<std::pair<std::string, double>> top_lines(const std::string& out) {
  std::vector<std::pair<std::string, double>> r;
  std::istringstream in(out.substr(std::min(out.size(), out.find("\ntop "))));
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    std::string k, name, pct;
    if (!(l >> k >> name >> pct) || k.empty() || k.back() != '.' || pct.back() != '%') continue;
    r.push_back({name, std::stod(pct)});
  }
  return r;
}

// Top-3 (class index, percent) of the model on one prepared 8-bit image.
std::vector<std::pair<size_t, double>> expected_top3(nn::Module& model, const data::Image& img, const data::Normalization& norm) {
  NoGradGuard ng;
  model.eval();
  const Tensor x = data::image_to_tensor(img, norm).reshape({1, 1, 28, 28});
  const std::vector<double> p = exp(log_softmax(model.forward(x))).to_double();
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  return {{order[0], 100 * p[order[0]]}, {order[1], 100 * p[order[1]]}, {order[2], 100 * p[order[2]]}};
}

// A "7" drawn with thick strokes, light on dark, size x size (no data set needed).
data::Image drawn_seven(int64_t size) {
  data::Image img{size, size, 1, std::vector<uint8_t>(static_cast<size_t>(size * size), 0)};
  auto ink = [&](int64_t x, int64_t y) {
    for (int64_t dy = -1; dy <= 1; ++dy)
      for (int64_t dx = -1; dx <= 1; ++dx) {
        const int64_t xx = x + dx, yy = y + dy;
        if (xx >= 0 && yy >= 0 && xx < size && yy < size) img.pixels[static_cast<size_t>(yy * size + xx)] = 255;
      }
  };
  for (int64_t x = size / 4; x < 3 * size / 4; ++x) ink(x, size / 5);                   // the bar
  for (int64_t t = 0; t < 3 * size / 5; ++t) ink(3 * size / 4 - t / 3, size / 5 + t);  // the stem
  return img;
}

// The prepared input saved by --save-input (8x larger): every 8th pixel, back at the model's size.
data::Image saved_input(const std::string& path, int channels, int64_t size) {
  const data::Image big = data::read_image(path, channels);
  EXPECT_EQ(big.width, 8 * size);
  data::Image small{size, size, channels, std::vector<uint8_t>(static_cast<size_t>(size * size * channels))};
  for (int64_t y = 0; y < size; ++y)
    for (int64_t x = 0; x < size; ++x)
      for (int64_t c = 0; c < channels; ++c)
        small.pixels[static_cast<size_t>((y * size + x) * channels + c)] = big.at(8 * y, 8 * x, c);
  return small;
}

// Runs a program (no shell between) with its output in `log`; returns its exit status (-1 when it did
// not exit) and its peak resident memory in KiB, as GNU time (/usr/bin/time, the Debian package `time`)
// measures it for its own child. Not wait4's figure for a child of this process: Linux keeps a process's
// peak across exec, and a child forked from a test process starts with that process's resident pages.
// With all of test_tutorials in one process (1.2 GB by then), a program that used far less reported 1.2 GB;
// time's child is forked from time, a few MiB.
std::pair<int, long> run_measured(const std::vector<std::string>& args, const std::string& log) {
  const std::string time = "/usr/bin/time", peak_file = log + ".peak";
  if (!fs::exists(time)) {
    ADD_FAILURE() << time << " is missing: install the Debian package time (scripts/setup.sh does)";
    return {-1, 0};
  }
  std::vector<std::string> full = {time, "-f", "%M", "-o", peak_file};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (const std::string& a : full) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return {-1, 0};
  // time writes "Command exited with non-zero status N" or "Command terminated by signal N" before the
  // figure when there is one: the figure is the last line.
  std::ifstream in(peak_file);
  long peak_kib = 0;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) peak_kib = std::strtol(line.c_str(), nullptr, 10);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, peak_kib};
}

class Tutorial10 : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("halfling_t10_" + std::to_string(test::fresh_seed()));
    fs::create_directories(dir_);
    // A model card and random weights (seeded): the test is about the program, not the accuracy.
    Generator gen(test::fresh_seed());
    model_ = tutorial::make_model("mlp512", gen);
    card_.model = "mlp512";
    card_.dataset = "mnist";
    card_.norm = data::mnist_normalization();
    for (int i = 0; i < 10; ++i) card_.class_names.push_back("digit" + std::to_string(i));
    card_.test_accuracy = 0.5;
    ckpt_ = (dir_ / "model.safetensors").string();
    tutorial::save_model(ckpt_, *model_, card_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Writes `img` as the PNG `name` in the test's folder and classifies it with `ckpt` (the MNIST model's
  // when empty), followed by `flags`.
  std::pair<int, std::string> classify(const data::Image& img, const std::string& name, const std::string& flags = "",
                                       const std::string& ckpt = "") const {
    const std::string png = (dir_ / name).string();
    data::write_png(png, img);
    return run10("--checkpoint " + (ckpt.empty() ? ckpt_ : ckpt) + " --image " + png + " " + flags);
  }
  // The same weights under a card that names Fashion-MNIST (whose recipe the program then follows).
  std::string save_fashion_checkpoint() {
    tutorial::ModelCard fashion = card_;
    fashion.dataset = "fashion-mnist";
    const std::string ckpt = (dir_ / "fashion.safetensors").string();
    tutorial::save_model(ckpt, *model_, fashion);
    return ckpt;
  }
  fs::path dir_;
  std::shared_ptr<nn::Module> model_;
  tutorial::ModelCard card_;
  std::string ckpt_;
};

TEST_F(Tutorial10, RawDigitGivesTheModelsOwnTop3) {
  const data::Image seven = drawn_seven(28);
  const std::string png = (dir_ / "seven.png").string();
  data::write_png(png, seven);
  const auto [status, out] = run10("--checkpoint " + ckpt_ + " --image " + png + " --no-center");
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "mlp512 trained on mnist (test accuracy 50.00%)")) << out;
  EXPECT_TRUE(contains(out, "not inverted (dark background")) << out;
  const auto got = top_lines(out);
  const auto want = expected_top3(*model_, seven, card_.norm);
  ASSERT_EQ(got.size(), 3u) << out;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].first, card_.class_names[want[i].first]) << out;
    EXPECT_NEAR(got[i].second, want[i].second, 0.006) << out;  // printed with 2 decimals
  }
}

// The chapter: an image is inverted when the mean of its border pixels is above 127.5 (the middle of
// 0..255); a mean of exactly 127.5 is not (a threshold of 127 would invert it). 28x28 has 108 border
// pixels: 54 of 127 and 54 of 128 make 127.5; 53 and 55 make 127.51.
TEST_F(Tutorial10, InvertsWhenTheBorderMeanIsAbove127Point5) {
  for (const int brighter : {54, 55}) {
    data::Image img = drawn_seven(28);
    int border = 0;
    for (int64_t y = 0; y < 28; ++y)
      for (int64_t x = 0; x < 28; ++x)
        if (y == 0 || x == 0 || y == 27 || x == 27)
          img.pixels[static_cast<size_t>(y * 28 + x)] = border++ < brighter ? 128 : 127;
    ASSERT_EQ(border, 108);
    const std::string png = (dir_ / ("border" + std::to_string(brighter) + ".png")).string();
    data::write_png(png, img);
    const auto [status, out] = run10("--checkpoint " + ckpt_ + " --image " + png + " --no-center");
    ASSERT_EQ(status, 0) << out;
    if (brighter == 54) {
      EXPECT_TRUE(contains(out, "not inverted (dark background; border mean 128)")) << "mean 127.5\n" << out;
    } else {
      EXPECT_TRUE(contains(out, "inverted (light background; border mean 128)")) << "mean 127.51\n" << out;
      EXPECT_FALSE(contains(out, "not inverted")) << out;
    }
  }
}

TEST_F(Tutorial10, DarkOnLightDigitIsInvertedCroppedAndCentered) {
  // Dark ink on white paper, 100x100, the digit off-center: what a phone photo or a paint program gives.
  data::Image paper{100, 100, 3, std::vector<uint8_t>(100 * 100 * 3, 255)};
  const data::Image seven = drawn_seven(40);
  for (int64_t y = 0; y < 40; ++y)
    for (int64_t x = 0; x < 40; ++x)
      for (int64_t c = 0; c < 3; ++c)
        paper.pixels[static_cast<size_t>(((y + 5) * 100 + x + 50) * 3 + c)] = static_cast<uint8_t>(255 - seven.at(y, x, 0));
  const std::string png = (dir_ / "paper.png").string(), seen = (dir_ / "seen.png").string();
  data::write_png(png, paper);
  const auto [status, out] = run10("--checkpoint " + ckpt_ + " --image " + png + " --save-input " + seen);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "converted to gray")) << out;
  EXPECT_TRUE(contains(out, "inverted (light background; border mean 255)")) << out;
  EXPECT_TRUE(contains(out, "scaled into 20x20, centered by its center of mass in 28x28")) << out;

  // The saved input is the prepared 28x28 image, 8x larger: take every 8th pixel back.
  const data::Image big = data::read_image(seen, 1);
  ASSERT_EQ(big.width, 224);
  data::Image small{28, 28, 1, std::vector<uint8_t>(28 * 28)};
  for (int64_t y = 0; y < 28; ++y)
    for (int64_t x = 0; x < 28; ++x) small.pixels[static_cast<size_t>(y * 28 + x)] = big.at(8 * y, 8 * x, 0);
  // MNIST-like: black background (the border is empty), the ink within a 20x20 box, centered.
  double m = 0, mx = 0, my = 0;
  int64_t x0 = 28, x1 = -1, y0 = 28, y1 = -1;
  for (int64_t y = 0; y < 28; ++y)
    for (int64_t x = 0; x < 28; ++x) {
      const double v = small.at(y, x, 0);
      if (y == 0 || x == 0 || y == 27 || x == 27) {
        EXPECT_EQ(v, 0) << "border pixel " << x << "," << y;
      }
      m += v, mx += v * static_cast<double>(x), my += v * static_cast<double>(y);
      if (v > 0) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  ASSERT_GT(m, 0);
  EXPECT_LE(std::max(x1 - x0 + 1, y1 - y0 + 1), 21);  // 20 plus the resampling filter's fringe
  EXPECT_GE(std::max(x1 - x0 + 1, y1 - y0 + 1), 18);
  EXPECT_NEAR(mx / m, 13.5, 1.0);
  EXPECT_NEAR(my / m, 13.5, 1.0);

  const auto got = top_lines(out);
  const auto want = expected_top3(*model_, small, card_.norm);
  ASSERT_EQ(got.size(), 3u) << out;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].first, card_.class_names[want[i].first]) << out;
    EXPECT_NEAR(got[i].second, want[i].second, 0.006) << out;
  }
}

// Drawing programs and HTML canvases export black strokes (0,0,0,255) on a transparent canvas
// (0,0,0,0). With the alpha channel dropped, that is black on black: the reviewer's MNIST "7" came out
// as "no ink found" and a confident "5". Flattened onto white, it is the same as the drawing on paper.
TEST_F(Tutorial10, TransparentCanvasIsFlattenedOntoWhite) {
  const data::Image seven = drawn_seven(40);
  data::Image canvas{60, 50, 4, std::vector<uint8_t>(60 * 50 * 4, 0)};
  data::Image paper{60, 50, 1, std::vector<uint8_t>(60 * 50, 255)};
  for (int64_t y = 0; y < 40; ++y)
    for (int64_t x = 0; x < 40; ++x) {
      const uint8_t v = seven.at(y, x, 0);  // 255 on a stroke: opaque black there, white paper elsewhere
      canvas.pixels[static_cast<size_t>(((y + 4) * 60 + x + 15) * 4 + 3)] = v;
      paper.pixels[static_cast<size_t>((y + 4) * 60 + x + 15)] = static_cast<uint8_t>(255 - v);
    }
  const std::string rgba = (dir_ / "canvas.png").string(), gray = (dir_ / "paper.png").string();
  data::write_png(rgba, canvas);
  data::write_png(gray, paper);
  const std::string seen_rgba = (dir_ / "seen_rgba.png").string(), seen_gray = (dir_ / "seen_gray.png").string();
  const auto [status, out] = run10("--checkpoint " + ckpt_ + " --image " + rgba + " --save-input " + seen_rgba);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "4 channel(s)")) << out;
  EXPECT_TRUE(contains(out, "  - flattened the alpha channel onto white\n")) << out;
  EXPECT_TRUE(contains(out, "inverted (light background; border mean 255)")) << out;
  EXPECT_TRUE(contains(out, "scaled into 20x20, centered by its center of mass")) << out;
  const auto [gstatus, gout] = run10("--checkpoint " + ckpt_ + " --image " + gray + " --save-input " + seen_gray);
  ASSERT_EQ(gstatus, 0) << gout;
  EXPECT_FALSE(contains(gout, "alpha")) << gout;
  // The model sees exactly what it sees for the same drawing on white paper, and answers the same.
  const data::Image small = saved_input(seen_rgba, 1, 28);
  EXPECT_EQ(small.pixels, saved_input(seen_gray, 1, 28).pixels);
  EXPECT_GT(*std::max_element(small.pixels.begin(), small.pixels.end()), 200);
  EXPECT_EQ(top_lines(out), top_lines(gout));
  const auto want = expected_top3(*model_, small, card_.norm);
  const auto got = top_lines(out);
  ASSERT_EQ(got.size(), 3u) << out;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i].first, card_.class_names[want[i].first]) << out;

  // A color model (3 channels) gets the canvas on white too: an RGBA square of red on transparency.
  Generator gen(test::fresh_seed());
  const std::shared_ptr<nn::Module> vgg = tutorial::make_model("vgg_small", gen);
  tutorial::ModelCard color = card_;
  color.model = "vgg_small";
  color.dataset = "cifar10";
  color.channels = 3;
  color.height = color.width = 32;
  color.norm = data::cifar10_normalization();
  const std::string vgg_ckpt = (dir_ / "vgg.safetensors").string();
  tutorial::save_model(vgg_ckpt, *vgg, color);
  data::Image red{32, 32, 4, std::vector<uint8_t>(32 * 32 * 4, 0)};
  for (int64_t y = 8; y < 24; ++y)
    for (int64_t x = 8; x < 24; ++x) {
      red.pixels[static_cast<size_t>((y * 32 + x) * 4)] = 200;
      red.pixels[static_cast<size_t>((y * 32 + x) * 4 + 3)] = 255;
    }
  const std::string red_png = (dir_ / "red.png").string(), red_seen = (dir_ / "red_seen.png").string();
  data::write_png(red_png, red);
  const auto [cstatus, cout] = run10("--checkpoint " + vgg_ckpt + " --image " + red_png + " --save-input " + red_seen);
  ASSERT_EQ(cstatus, 0) << cout;
  EXPECT_TRUE(contains(cout, "  - flattened the alpha channel onto white\n  - resized to 32x32\n")) << cout;
  const data::Image rgb = saved_input(red_seen, 3, 32);
  for (int64_t y = 0; y < 32; ++y)
    for (int64_t x = 0; x < 32; ++x) {
      const bool inside = x >= 8 && x < 24 && y >= 8 && y < 24;
      ASSERT_EQ(rgb.at(y, x, 0), inside ? 200 : 255) << x << "," << y;
      ASSERT_EQ(rgb.at(y, x, 1), inside ? 0 : 255) << x << "," << y;
    }
}

// A phone held on its side stores the pixels unturned and writes an EXIF orientation tag (6: turn 90
// degrees clockwise to view). Read as stored, the digit reached the model on its side (a "7" fell from
// 100.00% to 44.79% with a trained model); turned upright, the model sees what it sees for the upright
// file. The PNG carries the tag in an eXIf chunk, so that the comparison is exact (no JPEG loss).
TEST_F(Tutorial10, PhotoStoredOnItsSideIsTurnedUpright) {
  data::Image paper{100, 80, 3, std::vector<uint8_t>(100 * 80 * 3, 255)};  // wider than high
  const data::Image seven = drawn_seven(40);
  for (int64_t y = 0; y < 40; ++y)
    for (int64_t x = 0; x < 40; ++x)
      for (int64_t c = 0; c < 3; ++c)
        paper.pixels[static_cast<size_t>(((y + 20) * 100 + x + 30) * 3 + c)] =
            static_cast<uint8_t>(255 - seven.at(y, x, 0));
  const data::Image stored = data::apply_exif_orientation(paper, 8);  // what orientation 6 turns back
  ASSERT_EQ(data::apply_exif_orientation(stored, 6).pixels, paper.pixels);
  const std::string upright = (dir_ / "upright.png").string(), side = (dir_ / "side.png").string();
  const std::string damaged = (dir_ / "damaged.png").string();
  data::write_png(upright, paper);
  data::write_png(side, stored);
  const test::Bytes stored_png = test::read_file(side);
  test::write_file(side, test::with_exif_chunk(stored_png, test::tiff_orientation(false, 6)));
  test::write_file(damaged, test::with_exif_chunk(stored_png, test::Bytes{'M', 'M', 0}));
  const std::string seen_up = (dir_ / "seen_up.png").string(), seen_side = (dir_ / "seen_side.png").string();
  const std::string seen_ignored = (dir_ / "seen_ignored.png").string();

  const auto [ustatus, uout] = run10("--checkpoint " + ckpt_ + " --image " + upright + " --save-input " + seen_up);
  ASSERT_EQ(ustatus, 0) << uout;
  EXPECT_FALSE(contains(uout, "EXIF")) << uout;
  const auto [status, out] = run10("--checkpoint " + ckpt_ + " --image " + side + " --save-input " + seen_side);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "image " + side + ": 80x100, 3 channel(s)\n")) << out;
  EXPECT_TRUE(contains(out, "  - turned upright: EXIF orientation 6 (turned 90 degrees clockwise)\n")) << out;
  EXPECT_EQ(saved_input(seen_side, 1, 28).pixels, saved_input(seen_up, 1, 28).pixels);
  EXPECT_EQ(top_lines(out), top_lines(uout));

  const auto [istatus, iout] =
      run10("--checkpoint " + ckpt_ + " --image " + side + " --exif ignore --save-input " + seen_ignored);
  ASSERT_EQ(istatus, 0) << iout;
  EXPECT_TRUE(contains(iout, "EXIF orientation 6 (turned 90 degrees clockwise) ignored (--exif ignore)")) << iout;
  EXPECT_NE(saved_input(seen_ignored, 1, 28).pixels, saved_input(seen_up, 1, 28).pixels) << "not used as stored";

  const auto [dstatus, dout] = run10("--checkpoint " + ckpt_ + " --image " + damaged);
  ASSERT_EQ(dstatus, 0) << dout;
  EXPECT_TRUE(contains(dout, "EXIF orientation unreadable, so the pixels are used as stored (the eXIf chunk at byte "))
      << dout;
  const auto [bstatus, bout] = run10("--checkpoint " + ckpt_ + " --image " + side + " --exif sideways");
  EXPECT_NE(bstatus, 0);
  EXPECT_TRUE(contains(bout, "--exif")) << bout;
}

// A Fashion-MNIST model gets Fashion-MNIST's recipe, which the model card's data set names: the item
// trimmed to its bounding box, its longest side scaled to 28, centered. MNIST's 20x20 box and
// center of mass (what every 1-channel model got before) halved a Fashion model's accuracy on its own
// test images (the chapter: 42 of the first 100, against 85 with Fashion-MNIST's recipe). --prepare
// overrides.
TEST_F(Tutorial10, FashionModelGetsFashionMnistsPreparation) {
  const std::string ckpt = save_fashion_checkpoint();
  // A dark item, 100 wide and 60 tall, on white paper, off-center.
  data::Image paper{200, 160, 1, std::vector<uint8_t>(200 * 160, 250)};
  for (int64_t y = 80; y < 140; ++y)
    for (int64_t x = 20; x < 120; ++x) paper.pixels[static_cast<size_t>(y * 200 + x)] = 20;
  const std::string png = (dir_ / "item.png").string(), seen = (dir_ / "seen.png").string();
  data::write_png(png, paper);
  const auto [status, out] = run10("--checkpoint " + ckpt + " --image " + png + " --save-input " + seen);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "using Fashion-MNIST's preparation (the model card's data set is fashion-mnist)")) << out;
  EXPECT_TRUE(contains(out, "inverted (light background; border mean 250): Fashion-MNIST items are light on a black "
                            "background\n"))
      << out;
  EXPECT_TRUE(contains(out, "the item's bounding box (100x60 at x=20, y=80) scaled to 28x17")) << out;
  EXPECT_FALSE(contains(out, "20x20")) << out;
  // The item (255 - 20 = 235 once inverted) fills the width, 17 rows tall (60 * 28 / 100 = 16.8), in
  // the middle: rows 5 to 21. To within 1: stb_image_resize's weights sum to 1 only to float precision.
  const data::Image small = saved_input(seen, 1, 28);
  for (int64_t y = 0; y < 28; ++y)
    for (int64_t x = 0; x < 28; ++x) ASSERT_NEAR(small.at(y, x, 0), y >= 5 && y < 22 ? 235 : 0, 1) << x << "," << y;
  const auto got = top_lines(out);
  const auto want = expected_top3(*model_, small, card_.norm);
  ASSERT_EQ(got.size(), 3u) << out;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i].first, card_.class_names[want[i].first]) << out;
  // The digit recipe on request, and for an MNIST model.
  for (const std::string& args : {"--checkpoint " + ckpt + " --prepare mnist", "--checkpoint " + ckpt_}) {
    const auto [s, o] = run10(args + " --image " + png);
    ASSERT_EQ(s, 0) << o;
    EXPECT_TRUE(contains(o, "using MNIST's preparation")) << o;
    EXPECT_TRUE(contains(o, "scaled into 20x20, centered by its center of mass in 28x28")) << o;
  }
  const auto [s, o] = run10("--checkpoint " + ckpt_ + " --prepare fashion-mnist --image " + png);
  ASSERT_EQ(s, 0) << o;
  EXPECT_TRUE(contains(o, "using Fashion-MNIST's preparation (--prepare fashion-mnist)")) << o;
}

// A long, thin drawing: a line across a 65535x4 image (a 262,144-pixel PNG). Padded to a square
// before scaling, its bounding box became 65535 x 65535 pixels: 4.2 GB and 35 s. Cropped and scaled
// as it is, it is a 20x1 line at the center, and the program stays far below that.
TEST_F(Tutorial10, ElongatedImageIsScaledWithoutPaddingToASquare) {
  data::Image strip{65535, 4, 1, std::vector<uint8_t>(65535 * 4, 255)};
  std::fill_n(strip.pixels.begin() + 65535, 2 * 65535, uint8_t{0});  // rows 1 and 2: the line
  const std::string png = (dir_ / "strip.png").string(), seen = (dir_ / "seen.png").string(),
                    log = (dir_ / "log.txt").string();
  data::write_png(png, strip);
  const auto [status, peak_kib] = run_measured({test::tutorial_program("10_your_image"), "--checkpoint", ckpt_,
                                                "--image", png, "--save-input", seen}, log);
  std::ifstream in(log);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "the ink's bounding box (65535x2 at x=0, y=1) scaled into 20x20")) << out;
  // The decoded image is 256 KiB; the program itself (code, libraries, the model) some tens of MiB.
  EXPECT_GT(peak_kib, 0) << "no figure from /usr/bin/time";
  EXPECT_LT(peak_kib, 512 * 1024) << "peak resident memory " << peak_kib << " KiB";
  const data::Image small = saved_input(seen, 1, 28);
  for (int64_t y = 0; y < 28; ++y)
    for (int64_t x = 0; x < 28; ++x)
      ASSERT_NEAR(small.at(y, x, 0), y == 14 && x >= 4 && x < 24 ? 255 : 0, 1) << x << "," << y;  // float weights
}

// A stroke 2 pixels wide and 400 tall is 0.1 pixel wide at the 20-pixel scale: it stays 1 pixel wide
// (a scaled side is at least 1), not 2, and keeps its 20 rows.
TEST_F(Tutorial10, ThinVerticalStrokeStaysOnePixelWide) {
  data::Image paper{4, 400, 1, std::vector<uint8_t>(4 * 400, 255)};
  for (size_t y = 0; y < 400; ++y) paper.pixels[y * 4 + 1] = paper.pixels[y * 4 + 2] = 0;  // columns 1 and 2
  const std::string png = (dir_ / "stroke.png").string(), seen = (dir_ / "seen.png").string();
  data::write_png(png, paper);
  const auto [status, out] = run10("--checkpoint " + ckpt_ + " --image " + png + " --save-input " + seen);
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "the ink's bounding box (2x400 at x=1, y=0) scaled into 20x20")) << out;
  const data::Image small = saved_input(seen, 1, 28);
  std::set<int64_t> columns, rows;
  for (int64_t y = 0; y < 28; ++y)
    for (int64_t x = 0; x < 28; ++x)
      if (small.at(y, x, 0) > 1) columns.insert(x), rows.insert(y);
  EXPECT_EQ(columns.size(), 1u) << out;
  EXPECT_EQ(rows.size(), 20u) << out;
}

// Fashion-MNIST's recipe takes the background from the border's median: an item that fills most of
// the photo (180x140 of 200x160, 79%) is still found, though the median of all pixels is the item's.
TEST_F(Tutorial10, ItemFillingMostOfThePhotoIsFound) {
  const std::string ckpt = save_fashion_checkpoint();
  data::Image paper{200, 160, 1, std::vector<uint8_t>(200 * 160, 250)};
  for (int64_t y = 10; y < 150; ++y)
    for (int64_t x = 10; x < 190; ++x) paper.pixels[static_cast<size_t>(y * 200 + x)] = 20;
  const std::string png = (dir_ / "big_item.png").string();
  data::write_png(png, paper);
  const auto [status, out] = run10("--checkpoint " + ckpt + " --image " + png);
  ASSERT_EQ(status, 0) << out;
  // 140 * 28 / 180 = 21.8 rows.
  EXPECT_TRUE(contains(out, "the item's bounding box (180x140 at x=10, y=10) scaled to 28x22")) << out;
}

// Fashion-MNIST's background is the median of the border's 108 pixels (28x28), all four sides of it. Each
// image here paints two sides (54 pixels, the corners going with the top and bottom rows) 100 and the other
// two 140: the median, the 55th smallest, is 140, so the item is what is brighter than 153, the 8x8 block of
// 255 at x, y = 10, and not the 18x18 halo of 125 around it. Leave out a side of 140, or count an inner row
// or column (0) as border, and the median is 100: the halo would count as the item. The three pairings
// between them reach every side.
TEST_F(Tutorial10, ItemBackgroundIsTheMedianOfTheWholeBorder) {
  const std::string ckpt = save_fashion_checkpoint();
  struct Sides {
    uint8_t top, left, bottom, right;
  };
  for (const Sides& sides : {Sides{100, 100, 140, 140}, Sides{140, 140, 100, 100}, Sides{100, 140, 140, 100}}) {
    data::Image img{28, 28, 1, std::vector<uint8_t>(28 * 28, 0)};
    for (int64_t y = 0; y < 28; ++y)
      for (int64_t x = 0; x < 28; ++x) {
        uint8_t& v = img.pixels[static_cast<size_t>(y * 28 + x)];
        if (y == 0) v = sides.top;
        else if (y == 27) v = sides.bottom;
        else if (x == 0) v = sides.left;
        else if (x == 27) v = sides.right;
        else if (x >= 10 && x < 18 && y >= 10 && y < 18) v = 255;
        else if (x >= 5 && x < 23 && y >= 5 && y < 23) v = 125;
      }
    const std::string name = std::to_string(sides.top) + "_" + std::to_string(sides.left) + "_" +
                             std::to_string(sides.bottom) + "_" + std::to_string(sides.right);
    const auto [status, out] = classify(img, name + ".png", "--invert no", ckpt);
    ASSERT_EQ(status, 0) << out;
    EXPECT_TRUE(contains(out, "the item's bounding box (8x8 at x=10, y=10) scaled to 28x28")) << name << "\n" << out;
  }
}

// Nothing to center: an all-black image for a digit model, and an all-white one for a Fashion model
// with --invert no (the border's median, 255, plus 13 is above any pixel). Each is only resized, says
// why, and is still classified.
TEST_F(Tutorial10, BlankImagesAreOnlyResized) {
  const std::string black = (dir_ / "black.png").string(), white = (dir_ / "white.png").string();
  data::write_png(black, data::Image{28, 28, 1, std::vector<uint8_t>(28 * 28, 0)});
  data::write_png(white, data::Image{100, 100, 1, std::vector<uint8_t>(100 * 100, 255)});
  const auto [s1, o1] = run10("--checkpoint " + ckpt_ + " --image " + black);
  ASSERT_EQ(s1, 0) << o1;
  EXPECT_TRUE(contains(o1, "resized 28x28 -> 28x28 (no ink found to center)")) << o1;
  EXPECT_EQ(top_lines(o1).size(), 3u) << o1;

  const std::string ckpt = save_fashion_checkpoint();
  const auto [s2, o2] = run10("--checkpoint " + ckpt + " --invert no --image " + white);
  ASSERT_EQ(s2, 0) << o2;
  EXPECT_TRUE(contains(o2, "not inverted (--invert no; border mean 255)")) << o2;
  EXPECT_TRUE(contains(o2, "resized 100x100 -> 28x28 (no item found)")) << o2;
  EXPECT_EQ(top_lines(o2).size(), 3u) << o2;
}

// The border is all four sides: for each side in turn, its 26 pixels between the corners at 255 and the other
// 82 border pixels at 100 make a mean of 137.3, above 127.5, where any side left out would give 100.
// A 1x1 image is all border: white, its mean is 255, and inverted it has no ink left to center.
TEST_F(Tutorial10, BorderMeanTakesEverySide) {
  for (const std::string side : {"top", "bottom", "left", "right"}) {
    data::Image img = drawn_seven(28);
    for (int64_t y = 0; y < 28; ++y)
      for (int64_t x = 0; x < 28; ++x) {
        const bool corner = (y == 0 || y == 27) && (x == 0 || x == 27);
        const bool on_side = !corner && ((side == "top" && y == 0) || (side == "bottom" && y == 27) ||
                                         (side == "left" && x == 0) || (side == "right" && x == 27));
        if (y == 0 || x == 0 || y == 27 || x == 27) img.pixels[static_cast<size_t>(y * 28 + x)] = on_side ? 255 : 100;
      }
    const auto [status, out] = classify(img, side + ".png", "--no-center");
    ASSERT_EQ(status, 0) << out;
    EXPECT_TRUE(contains(out, "inverted (light background; border mean 137): MNIST digits are light on a black "
                              "background\n"))
        << side << "\n" << out;
  }
  const auto [status, out] = classify(data::Image{1, 1, 1, {255}}, "dot.png");
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "inverted (light background; border mean 255)")) << out;
  EXPECT_TRUE(contains(out, "resized 1x1 -> 28x28 (no ink found to center)")) << out;
}

// What counts as a digit's ink: every pixel at least a quarter of the brightest (255 / 4 = 63 in integers),
// and at least 1. A block of 255 (x and y 10 to 17) with one pixel of 63 at x = 2, y = 25 has a box of
// 16x16 from x = 2, y = 10; a pixel of 62 at x = 25, y = 2 is not ink. A faint drawing (a block of 3, so a
// quarter is 0, or of 1, the faintest there is) with a pixel of 1 at the same place: every pixel above 0 is
// ink, and the black background is not. Ink in the first column alone (x = 0, y 5 to 20) is found, in a box
// 1 pixel wide.
TEST_F(Tutorial10, InkIsAQuarterOfThePeakOrMore) {
  for (const int peak : {255, 3, 1}) {
    data::Image img{28, 28, 1, std::vector<uint8_t>(28 * 28, 0)};
    for (int64_t y = 10; y < 18; ++y)
      for (int64_t x = 10; x < 18; ++x) img.pixels[static_cast<size_t>(y * 28 + x)] = static_cast<uint8_t>(peak);
    img.pixels[25 * 28 + 2] = peak == 255 ? 63 : 1;
    if (peak == 255) img.pixels[2 * 28 + 25] = 62;
    const auto [status, out] = classify(img, "peak" + std::to_string(peak) + ".png");
    ASSERT_EQ(status, 0) << out;
    EXPECT_TRUE(contains(out, "not inverted (dark background; border mean 0)")) << peak << "\n" << out;
    EXPECT_TRUE(contains(out, "the ink's bounding box (16x16 at x=2, y=10) scaled into 20x20")) << peak << "\n" << out;
  }
  data::Image edge{28, 28, 1, std::vector<uint8_t>(28 * 28, 0)};
  for (int64_t y = 5; y <= 20; ++y) edge.pixels[static_cast<size_t>(y * 28)] = 255;
  const auto [status, out] = classify(edge, "edge.png");
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "the ink's bounding box (1x16 at x=0, y=5) scaled into 20x20")) << out;
}

// An item is what is at least 13 brighter than the background (the border's median), for a Fashion model
// with --invert no. A block of 105 on a gray photo (100) is no item, though the image is not blank: it is
// only resized. A block of 255 on 242 is one: the threshold is 255 itself, which a pixel can reach.
TEST_F(Tutorial10, ItemIsTheBackgroundPlus13) {
  const std::string ckpt = save_fashion_checkpoint();
  for (const uint8_t background : {100, 242}) {
    const uint8_t item = background == 100 ? 105 : 255;
    data::Image photo{100, 100, 1, std::vector<uint8_t>(100 * 100, background)};
    for (int64_t y = 30; y < 70; ++y)
      for (int64_t x = 30; x < 60; ++x) photo.pixels[static_cast<size_t>(y * 100 + x)] = item;
    const std::string seen = (dir_ / "seen.png").string();
    const auto [status, out] =
        classify(photo, "item_on_" + std::to_string(background) + ".png", "--invert no --save-input " + seen, ckpt);
    ASSERT_EQ(status, 0) << out;
    EXPECT_TRUE(contains(out, background == 100 ? "resized 100x100 -> 28x28 (no item found)"
                                                : "the item's bounding box (30x40 at x=30, y=30) scaled to 21x28"))
        << out;
    EXPECT_EQ(top_lines(out).size(), 3u) << out;
    if (background == 242) {  // the 21 columns in the middle: from (28 - 21) / 2 = 3, on black
      const data::Image small = saved_input(seen, 1, 28);
      for (int64_t y = 0; y < 28; ++y)
        for (int64_t x = 0; x < 28; ++x) ASSERT_NEAR(small.at(y, x, 0), x >= 3 && x < 24 ? 255 : 0, 1) << x << "," << y;
    }
  }
}

// MNIST's recipe puts the digit's center of mass at the center of the 28x28 image, (13.5, 13.5), to within
// the half pixel of a whole-pixel shift, and drops what then falls outside. Two drawings with a 20x20 box
// (so not scaled), each with its mass far from its box's middle, on black:
// - an "L", a bar 4 wide and 20 tall and a foot 16 long and 4 tall: its center of mass (5.94, 13.06) in the
//   box moves it 8 right and 0 down, so the bar's top lands on row 0;
// - a "flag", the same bar and a staff 1 pixel tall along its top: (3.17, 7.92) moves it 10 right and 6
//   down, so the staff's last 2 pixels fall past the right edge and are dropped.
TEST_F(Tutorial10, DigitIsCenteredByItsCenterOfMass) {
  struct Drawing {
    std::string name;
    bool (*ink)(int64_t x, int64_t y);  // in the 20x20 box
    int64_t dx, dy;                     // where the box goes in the 28x28 input
  };
  const Drawing drawings[] = {{"ell", [](int64_t x, int64_t y) { return x < 4 || y >= 16; }, 8, 0},
                              {"flag", [](int64_t x, int64_t y) { return x < 4 || y == 0; }, 10, 6}};
  for (const Drawing& d : drawings) {
    data::Image img{28, 28, 1, std::vector<uint8_t>(28 * 28, 0)};
    for (int64_t y = 0; y < 20; ++y)
      for (int64_t x = 0; x < 20; ++x)
        if (d.ink(x, y)) img.pixels[static_cast<size_t>((y + 4) * 28 + x + 4)] = 255;
    const std::string seen = (dir_ / "seen.png").string();
    const auto [status, out] = classify(img, d.name + ".png", "--save-input " + seen);
    ASSERT_EQ(status, 0) << out;
    EXPECT_TRUE(contains(out, "the ink's bounding box (20x20 at x=4, y=4) scaled into 20x20")) << d.name << "\n" << out;
    const data::Image small = saved_input(seen, 1, 28);
    double m = 0, mx = 0, my = 0;
    for (int64_t y = 0; y < 28; ++y)
      for (int64_t x = 0; x < 28; ++x) {
        const int64_t bx = x - d.dx, by = y - d.dy;
        const bool ink = bx >= 0 && by >= 0 && bx < 20 && by < 20 && d.ink(bx, by);
        ASSERT_NEAR(small.at(y, x, 0), ink ? 255 : 0, 1) << d.name << " at " << x << "," << y;
        const double v = small.at(y, x, 0);
        m += v, mx += v * static_cast<double>(x), my += v * static_cast<double>(y);
      }
    if (d.name == "ell") {  // nothing dropped
      EXPECT_LE(std::fabs(mx / m - 13.5), 0.5) << "center of mass x " << mx / m;
      EXPECT_LE(std::fabs(my / m - 13.5), 0.5) << "center of mass y " << my / m;
    }
  }
}

// --smoke draws test image 0 of the card's data set the way a person would: dark on white (255 - v), each
// pixel a 4x4 block, and names its true label. The test set is the test's own, two images of noise with
// the labels 0 and 5 (label 0 is the one a "was there a smoke label" check of > 0 would miss). The PNG goes
// into the temporary folder: $TMPDIR, here the test's own, so that runs in parallel do not share it.
TEST_F(Tutorial10, SmokeDrawsTestImage0DarkOnWhiteAt4x) {
  const fs::path data = dir_ / "mnist";
  fs::create_directories(data);
  std::mt19937 rng(static_cast<uint32_t>(test::fresh_seed()));
  test::Bytes pixels(2 * 28 * 28);
  for (uint8_t& v : pixels) v = static_cast<uint8_t>(rng() % 256);
  pixels[0] = 0;  // both ends of the range
  pixels[1] = 255;
  test::write_idx((data / "t10k-images-idx3-ubyte").string(), test::idx_bytes({2, 28, 28}, pixels), false);
  test::write_idx((data / "t10k-labels-idx1-ubyte").string(), test::idx_bytes({2}, {0, 5}), false);
  const auto [status, out] = test::run_command("TMPDIR=" + dir_.string() + " " +
                                               test::tutorial_program("10_your_image") + " --checkpoint " + ckpt_ +
                                               " --smoke --data " + data.string());
  ASSERT_EQ(status, 0) << out;
  const std::string png = (dir_ / "halfling_10_smoke_digit.png").string();
  EXPECT_TRUE(contains(out, "--smoke: wrote test image 0 of mnist (label digit0), dark on white and 4x larger, to " +
                                png))
      << out;
  EXPECT_TRUE(contains(out, "the true label is digit0: ")) << out;
  const data::Image drawn = data::read_image(png, 0);
  ASSERT_EQ(drawn.width, 112);
  ASSERT_EQ(drawn.height, 112);
  ASSERT_EQ(drawn.channels, 1);
  int mismatches = 0;
  for (int64_t y = 0; y < 112; ++y)
    for (int64_t x = 0; x < 112; ++x) {
      const int v = pixels[static_cast<size_t>((y / 4) * 28 + x / 4)];
      if (drawn.at(y, x, 0) != 255 - v && mismatches++ < 5)
        ADD_FAILURE() << "pixel (" << x << ", " << y << "): " << int{drawn.at(y, x, 0)} << ", want 255 - " << v;
    }
  EXPECT_EQ(mismatches, 0);
}

// --smoke needs the card's own test set: each data set's loader is asked, so that a missing one is named
// with the fetch.sh command for it; a data set without test images here (CIFAR-10's card) is refused.
TEST_F(Tutorial10, SmokeNamesTheDataSetItNeeds) {
  const std::string empty = (dir_ / "no_data").string();
  fs::create_directories(empty);
  const auto [s1, o1] = run10("--checkpoint " + ckpt_ + " --smoke --data " + empty);
  EXPECT_EQ(s1, 1) << o1;
  EXPECT_TRUE(contains(o1, "10_your_image: load_mnist(" + empty + "): neither ")) << o1;
  EXPECT_TRUE(contains(o1, "run datasets/fetch.sh mnist to download")) << o1;
  const auto [s2, o2] = run10("--checkpoint " + save_fashion_checkpoint() + " --smoke --data " + empty);
  EXPECT_EQ(s2, 1) << o2;
  EXPECT_TRUE(contains(o2, "10_your_image: load_fashion_mnist(" + empty + "): neither ")) << o2;
  EXPECT_TRUE(contains(o2, "run datasets/fetch.sh fashion-mnist to download")) << o2;
  tutorial::ModelCard cifar = card_;
  cifar.dataset = "cifar10";
  const std::string ckpt = (dir_ / "cifar.safetensors").string();
  tutorial::save_model(ckpt, *model_, cifar);
  const auto [s3, o3] = run10("--checkpoint " + ckpt + " --smoke --data " + empty);
  EXPECT_EQ(s3, 1) << o3;
  EXPECT_TRUE(contains(o3, "10_your_image: --smoke: no test images for data set 'cifar10' (give --image)")) << o3;
}

// --top k lists the k likeliest classes, at most as many as the model has, at least 1; without --smoke
// there is no true label to name.
TEST_F(Tutorial10, TopListsThatManyClasses) {
  const data::Image seven = drawn_seven(28);
  for (const auto& [k, listed] : std::vector<std::pair<int, size_t>>{{1, 1}, {3, 3}, {12, 10}}) {
    const auto [status, out] = classify(seven, "seven.png", "--top " + std::to_string(k));
    ASSERT_EQ(status, 0) << out;
    EXPECT_TRUE(contains(out, "\ntop " + std::to_string(listed) + ":\n")) << out;
    EXPECT_EQ(top_lines(out).size(), listed) << out;
    EXPECT_FALSE(contains(out, "true label")) << out;
  }
  const auto [status, out] = classify(seven, "seven.png", "--top 0");
  EXPECT_NE(status, 0) << out;
  EXPECT_TRUE(contains(out, "--top")) << out;
  EXPECT_FALSE(contains(out, "\ntop ")) << out;
}

// For a gray model, a color photo without alpha is converted to gray, with nothing to flatten (only 2 and 4
// channels carry alpha); a gray image with alpha is already gray, and its alpha is flattened.
TEST_F(Tutorial10, ColorAndAlphaAreNamedForWhatTheImageHas) {
  data::Image rgb{28, 28, 3, std::vector<uint8_t>(28 * 28 * 3)};
  const data::Image seven = drawn_seven(28);
  for (size_t i = 0; i < seven.pixels.size(); ++i)
    for (size_t c = 0; c < 3; ++c) rgb.pixels[3 * i + c] = seven.pixels[i];
  const auto [status, out] = classify(rgb, "seven_rgb.png");
  ASSERT_EQ(status, 0) << out;
  EXPECT_TRUE(contains(out, "28x28, 3 channel(s)")) << out;
  EXPECT_TRUE(contains(out, "  - converted to gray\n")) << out;
  EXPECT_FALSE(contains(out, "alpha")) << out;
  // Gray with alpha (2 channels): already gray, and the alpha channel is flattened.
  data::Image gray_alpha{28, 28, 2, std::vector<uint8_t>(28 * 28 * 2, 255)};
  for (size_t i = 0; i < seven.pixels.size(); ++i) gray_alpha.pixels[2 * i] = seven.pixels[i];
  const auto [s2, o2] = classify(gray_alpha, "seven_gray_alpha.png");
  ASSERT_EQ(s2, 0) << o2;
  EXPECT_TRUE(contains(o2, "28x28, 2 channel(s)")) << o2;
  EXPECT_TRUE(contains(o2, "  - already gray\n")) << o2;
  EXPECT_TRUE(contains(o2, "  - flattened the alpha channel onto white\n")) << o2;
}

TEST_F(Tutorial10, ClearErrors) {
  const std::string png = (dir_ / "seven.png").string();
  data::write_png(png, drawn_seven(28));
  auto expect_error = [](const std::pair<int, std::string>& r, const std::vector<std::string>& parts) {
    EXPECT_EQ(r.first, 1) << r.second;
    EXPECT_TRUE(contains(r.second, "10_your_image: ")) << r.second;
    for (const auto& p : parts) EXPECT_TRUE(contains(r.second, p)) << "'" << p << "' in: " << r.second;
  };
  // The image: missing, not an image, no image given.
  expect_error(run10("--checkpoint " + ckpt_ + " --image " + (dir_ / "nope.png").string()), {"nope.png", "no such file"});
  const std::string junk = (dir_ / "junk.png").string();
  std::ofstream(junk) << "this is not a PNG";
  expect_error(run10("--checkpoint " + ckpt_ + " --image " + junk), {"decode_image", "junk.png"});
  expect_error(run10("--checkpoint " + ckpt_), {"no --image given"});
  expect_error(run10("--image " + png), {"--checkpoint is required"});

  // The checkpoint: missing, without a model card, of a model this program cannot build, of weights
  // that do not fit the model it names.
  expect_error(run10("--checkpoint " + (dir_ / "none.safetensors").string() + " --image " + png), {"none.safetensors"});
  const std::string bare = (dir_ / "bare.safetensors").string();
  save_checkpoint(bare, *model_);
  expect_error(run10("--checkpoint " + bare + " --image " + png), {"bare.safetensors", "model card", "03 --save"});
  tutorial::ModelCard unknown = card_;
  unknown.model = "resnet50";
  const std::string other = (dir_ / "resnet.safetensors").string();
  tutorial::save_model(other, *model_, unknown);
  expect_error(run10("--checkpoint " + other + " --image " + png), {"'resnet50' model", "known: mlp512, lenet, vgg_small"});
  Generator gen(1);
  nn::Sequential small;
  small.add(std::make_shared<nn::Flatten>());
  small.add(std::make_shared<nn::Linear>(784, 10, gen));
  const std::string misfit = (dir_ / "misfit.safetensors").string();
  tutorial::save_model(misfit, small, card_);
  expect_error(run10("--checkpoint " + misfit + " --image " + png), {"misfit.safetensors", "model."});
  tutorial::ModelCard three = card_;
  three.class_names.resize(3);
  const std::string wrong_classes = (dir_ / "classes.safetensors").string();
  tutorial::save_model(wrong_classes, *model_, three);
  expect_error(run10("--checkpoint " + wrong_classes + " --image " + png), {"10 outputs", "3 classes"});

  const auto bad = run10("--checkpoint " + ckpt_ + " --image " + png + " --invert maybe");
  EXPECT_NE(bad.first, 0);
  EXPECT_TRUE(contains(bad.second, "--invert")) << bad.second;
  const auto bad_prepare = run10("--checkpoint " + ckpt_ + " --image " + png + " --prepare cifar10");
  EXPECT_NE(bad_prepare.first, 0);
  EXPECT_TRUE(contains(bad_prepare.second, "--prepare")) << bad_prepare.second;
}

// Tutorial 10 has no --gemm flag: a misspelt HALFLING_GEMM is refused naming the variable, and the
// message points at nothing the program lacks (it once said "set with --gemm or HALFLING_GEMM").
TEST_F(Tutorial10, MisspeltVariantEnvironmentIsNamed) {
  const std::string png = (dir_ / "seven.png").string();
  data::write_png(png, drawn_seven(28));
  for (const std::string var : {"HALFLING_GEMM", "HALFLING_BN"}) {
    const auto [status, out] = test::run_command(var + "=bogus " + test::tutorial_program("10_your_image") +
                                                 " --checkpoint " + ckpt_ + " --image " + png);
    EXPECT_EQ(status, 1) << out;
    EXPECT_TRUE(contains(out, "10_your_image: " + var + "=bogus: no ")) << out;
    EXPECT_TRUE(contains(out, "variant of that name on any device (known on cpu: ")) << out;
    EXPECT_FALSE(contains(out, "--gemm")) << out;
    EXPECT_FALSE(contains(out, "--bn")) << out;
  }
}

TEST(Tutorial10Handoff, Tutorial03SaveThen10Smoke) {
  const std::string data = test::data_dir("mnist");
  if (data.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const fs::path dir = fs::temp_directory_path() / ("halfling_t10h_" + std::to_string(test::fresh_seed()));
  fs::create_directories(dir);
  const std::string ckpt = (dir / "mlp.safetensors").string();
  const auto [s3, o3] = test::run_command(test::tutorial_program("03_mlp_mnist") + " --smoke --device cpu --data " + data +
                                          " --save " + ckpt);
  ASSERT_EQ(s3, 0) << o3;
  EXPECT_TRUE(contains(o3, "saved the model to " + ckpt)) << o3;
  const tutorial::LoadedModel lm = tutorial::load_model(ckpt);
  EXPECT_EQ(lm.card.model, "mlp512");
  EXPECT_EQ(lm.card.dataset, "mnist");
  EXPECT_EQ(lm.card.class_names, (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
  EXPECT_EQ(lm.card.norm.mean, data::mnist_normalization().mean);
  EXPECT_GT(lm.card.test_accuracy, 0.5);  // 03's smoke run reaches ~74%

  // 10 --smoke: test image 0 of MNIST (a 7), drawn dark on white at 4x; a 74% model gets it right. The
  // drawing goes into $TMPDIR: the test's folder, removed with it.
  const auto [s10, o10] = test::run_command("TMPDIR=" + dir.string() + " " + test::tutorial_program("10_your_image") +
                                            " --checkpoint " + ckpt + " --smoke --data " + data);
  fs::remove_all(dir);
  ASSERT_EQ(s10, 0) << o10;
  EXPECT_TRUE(contains(o10, "test image 0 of mnist (label 7)")) << o10;
  EXPECT_TRUE(contains(o10, "inverted (light background")) << o10;
  const auto top = top_lines(o10);
  ASSERT_EQ(top.size(), 3u) << o10;
  EXPECT_GE(top[0].second, top[1].second);
  EXPECT_GE(top[1].second, top[2].second);
  EXPECT_LE(top[0].second + top[1].second + top[2].second, 100.01);
  EXPECT_TRUE(contains(o10, "the true label is 7: correct")) << o10;
}

TEST(Tutorial10Handoff, Tutorial07LenetSaveThen10OnADrawnDigit) {
  const std::string data = test::data_dir("mnist");
  if (data.empty()) GTEST_SKIP() << "MNIST not found: run datasets/fetch.sh mnist";
  const fs::path dir = fs::temp_directory_path() / ("halfling_t10l_" + std::to_string(test::fresh_seed()));
  fs::create_directories(dir);
  const std::string ckpt = (dir / "lenet.safetensors").string();
  // Two mixed-precision steps are enough: the test is about the hand-over, not the accuracy.
  const auto [s7, o7] = test::run_command(test::tutorial_program("07_conv_lenet") +
                                          " --smoke --max-steps 2 --device cpu --precision mixed --data " + data +
                                          " --save " + ckpt);
  ASSERT_EQ(s7, 0) << o7;
  EXPECT_TRUE(contains(o7, "saved the model to " + ckpt)) << o7;
  const tutorial::LoadedModel lm = tutorial::load_model(ckpt);
  EXPECT_EQ(lm.card.model, "lenet");
  EXPECT_EQ(lm.card.dataset, "mnist");
  EXPECT_EQ(lm.card.channels, 1);
  EXPECT_EQ(lm.card.height, 28);
  EXPECT_EQ(lm.card.class_names.size(), 10u);
  EXPECT_EQ(lm.card.norm.mean, data::mnist_normalization().mean);
  // Saved from the FP32 masters, not the FP16 working copies: every stored weight is f32, and at
  // least one of them is not exactly representable in FP16 (an f16 copy widened would be).
  const SafeTensors file = load_safetensors(ckpt);
  bool some_not_f16 = false;
  for (const auto& [name, t] : file.tensors) {
    EXPECT_EQ(t.dtype(), DType::f32) << name;
    if (name.rfind("model.", 0) != 0 || t.dtype() != DType::f32) continue;
    const std::vector<float> v = t.to_vector();
    const std::vector<float> back = t.to(DType::f16).to(DType::f32).to_vector();
    some_not_f16 = some_not_f16 || v != back;
  }
  EXPECT_TRUE(some_not_f16) << "the checkpoint holds FP16-rounded weights, not the FP32 masters";

  const data::Image seven = drawn_seven(28);
  const std::string png = (dir / "seven.png").string();
  data::write_png(png, seven);
  const auto [s10, o10] = run10("--checkpoint " + ckpt + " --image " + png + " --no-center");
  fs::remove_all(dir);
  ASSERT_EQ(s10, 0) << o10;
  EXPECT_TRUE(contains(o10, "lenet trained on mnist")) << o10;
  const auto got = top_lines(o10);
  const auto want = expected_top3(*lm.model, seven, lm.card.norm);
  ASSERT_EQ(got.size(), 3u) << o10;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].first, lm.card.class_names[want[i].first]) << o10;
    EXPECT_NEAR(got[i].second, want[i].second, 0.006) << o10;  // printed with 2 decimals
  }
}

}  // namespace
