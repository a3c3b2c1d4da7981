// Loading MNIST and Fashion-MNIST from their IDX files into normalized f32 tensors (see mnist.h).
// The two sets share a format and differ only in names, so one loader serves both.
#include "datasets/mnist.h"

#include <filesystem>

#include "datasets/idx.h"
#include "kernels/error.h"

namespace hl::data {
namespace {

constexpr int64_t kSide = 28;
constexpr int64_t kClasses = 10;

struct IdxImageSet {
  const char* op;          // "load_mnist", for error messages
  const char* fetch_name;  // the datasets/fetch.sh argument
  std::vector<std::string> class_names;
};

// The raw file when present, else its .gz; throws naming both when neither exists.
std::string find_idx_file(const IdxImageSet& set, const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  const fs::path raw = fs::path(dir) / stem;
  const fs::path gz = fs::path(dir) / (stem + ".gz");
  std::error_code ec;
  if (fs::is_regular_file(raw, ec)) return raw.string();
  if (fs::is_regular_file(gz, ec)) return gz.string();
  throw Error(detail::concat(set.op, "(", dir, "): neither ", raw.string(), " nor ", gz.string(),
                             " exists; run datasets/fetch.sh ", set.fetch_name, " to download the data set"));
}

Dataset load_idx_image_set(const IdxImageSet& set, const std::string& dir, Split split, Normalization norm) {
  norm.check(detail::concat(set.op, "(", dir, ")"), 1);
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string images_path = find_idx_file(set, dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(set, dir, prefix + "-labels-idx1-ubyte");
  const IdxArray images = read_idx(images_path);
  const IdxArray labels = read_idx(labels_path);

  const auto fail = [&](const auto&... what) { throw Error(detail::concat(set.op, "(", dir, "): ", what...)); };
  const auto dims = [](const IdxArray& a) { return shape_str(Shape(a.dims.begin(), a.dims.end())); };
  if (images.dims.size() != 3 || images.dims[1] != kSide || images.dims[2] != kSide)
    fail(images_path, " holds an array of shape ", dims(images), "; expected images [N, 28, 28]");
  if (labels.dims.size() != 1) fail(labels_path, " holds an array of shape ", dims(labels), "; expected labels [N]");
  const int64_t n = images.dims[0];
  if (labels.dims[0] != n)
    fail("count mismatch: ", images_path, " holds ", n, " images but ", labels_path, " holds ", labels.dims[0],
         " labels");
  if (n == 0) fail(images_path, " holds no images");
  for (int64_t i = 0; i < n; ++i)
    if (labels.data[static_cast<size_t>(i)] >= kClasses)
      fail(labels_path, ": label ", int{labels.data[static_cast<size_t>(i)]}, " at index ", i,
           " is out of range (expected 0 to ", kClasses - 1, ")");

  Dataset ds;
  ds.images = normalize_pixels(images.data.data(), n, 1, kSide, kSide, norm);
  ds.labels = Tensor::empty({n}, DType::i32, Device::cpu);
  int32_t* lb = ds.labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) lb[i] = labels.data[static_cast<size_t>(i)];
  ds.num_classes = kClasses;
  ds.class_names = set.class_names;
  ds.name = std::string(set.fetch_name) + "/" + split_name(split);
  ds.norm = norm;
  return ds;
}

}  // namespace

Dataset load_mnist(const std::string& dir, Split split, Normalization norm) {
  static const IdxImageSet set{"load_mnist", "mnist", {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}};
  return load_idx_image_set(set, dir, split, norm);
}

Dataset load_fashion_mnist(const std::string& dir, Split split, Normalization norm) {
  static const IdxImageSet set{"load_fashion_mnist",
                               "fashion-mnist",
                               {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                                "Bag", "Ankle boot"}};
  return load_idx_image_set(set, dir, split, norm);
}

}  // namespace hl::data
