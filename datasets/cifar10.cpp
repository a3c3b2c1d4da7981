// CIFAR-10 from the binary batches or from an image folder (see cifar10.h).
#include "datasets/cifar10.h"

#include <filesystem>

#include "datasets/image_folder.h"
#include "datasets/io.h"
#include "kernels/error.h"

namespace hl::data {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> batch_files(Split split) {
  if (split == Split::test) return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"};
}

bool has_binary(const fs::path& d) {
  std::error_code ec;
  return fs::is_regular_file(d / "data_batch_1.bin", ec) || fs::is_regular_file(d / "test_batch.bin", ec);
}
bool has_folder(const fs::path& d) {
  std::error_code ec;
  return fs::is_directory(d / "train", ec) || fs::is_directory(d / "test", ec);
}

Dataset load_binary(const fs::path& dir, Split split, const Normalization& norm) {
  const std::string op = detail::concat("load_cifar10(", dir.string(), ")");
  CifarRecords all;
  for (const std::string& name : batch_files(split)) {
    const fs::path path = dir / name;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw Error(detail::concat(op, ": ", path.string(), " is missing; the ", split_name(split), " split needs ",
                                 split == Split::train ? "data_batch_1.bin to data_batch_5.bin" : "test_batch.bin",
                                 " (run datasets/fetch.sh cifar10)"));
    CifarRecords r = read_cifar10_batch(path.string());
    all.labels.insert(all.labels.end(), r.labels.begin(), r.labels.end());
    all.pixels.insert(all.pixels.end(), r.pixels.begin(), r.pixels.end());
  }
  std::vector<std::string> names = cifar10_class_names();
  const fs::path meta = dir / "batches.meta.txt";
  std::error_code ec;
  if (fs::exists(meta, ec)) {
    const std::vector<uint8_t> text = read_file_bytes(meta.string(), "load_cifar10");
    names = parse_cifar10_label_names(std::string(text.begin(), text.end()), meta.string());
  }
  const int64_t n = all.size();
  Dataset ds;
  ds.images = normalize_pixels(all.pixels.data(), n, kCifarChannels, kCifarSide, kCifarSide, norm);
  std::vector<int32_t> labels(all.labels.begin(), all.labels.end());
  ds.labels = Tensor::from_vector(labels, {n});
  ds.num_classes = kCifarClasses;
  ds.class_names = names;
  ds.norm = norm;
  ds.name = detail::concat("cifar10/", split_name(split));
  return ds;
}

}  // namespace

CifarRecords parse_cifar10_batch(const uint8_t* data, size_t size, const std::string& source) {
  const auto fail = [&](const auto&... what) { throw Error(detail::concat("parse_cifar10(", source, "): ", what...)); };
  const auto record = static_cast<size_t>(kCifarRecordBytes);
  if (size == 0) fail("the file is empty; a CIFAR-10 batch holds records of ", record, " bytes");
  if (size % record != 0)
    fail("truncated record: ", size, " bytes is ", size / record, " whole record(s) of ", record, " bytes and ",
         size % record, " byte(s) more (the file is cut short, or not a CIFAR-10 batch)");
  const size_t n = size / record;
  CifarRecords r;
  r.labels.resize(n);
  r.pixels.resize(n * static_cast<size_t>(kCifarImageBytes));
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* rec = data + i * record;
    if (rec[0] >= kCifarClasses)
      fail("label ", int{rec[0]}, " of record ", i, " (byte offset ", i * record, ") is out of range (expected 0 to ",
           kCifarClasses - 1, ")");
    r.labels[i] = rec[0];
    std::copy(rec + 1, rec + record, r.pixels.begin() + static_cast<std::ptrdiff_t>(i * (record - 1)));
  }
  return r;
}

CifarRecords read_cifar10_batch(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, "read_cifar10_batch");
  return parse_cifar10_batch(bytes.data(), bytes.size(), path);
}

std::vector<std::string> parse_cifar10_label_names(const std::string& text, const std::string& source) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (!line.empty()) names.push_back(line);
    start = end + 1;
  }
  HL_CHECK(static_cast<int64_t>(names.size()) == kCifarClasses, "parse_cifar10_label_names(", source, "): found ",
           names.size(), " class name(s); expected ", kCifarClasses, ", one per line");
  return names;
}

const std::vector<std::string>& cifar10_class_names() {
  static const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                 "dog",      "frog",       "horse", "ship", "truck"};
  return names;
}

Cifar10Source find_cifar10(const std::string& dir) {
  // The folder itself, or the folder each archive unpacks to.
  for (const fs::path& d : {fs::path(dir), fs::path(dir) / "cifar-10-batches-bin"})
    if (has_binary(d)) return {Cifar10Source::Kind::binary, d.string()};
  for (const fs::path& d : {fs::path(dir), fs::path(dir) / "cifar10-jpg"})
    if (has_folder(d)) return {Cifar10Source::Kind::image_folder, d.string()};
  return {};
}

Dataset load_cifar10(const std::string& dir, Split split, Normalization norm, const std::string& cache_dir,
                     ImageFolderInfo* info) {
  const std::string op = detail::concat("load_cifar10(", dir, ")");
  norm.check(op, kCifarChannels);
  const Cifar10Source source = find_cifar10(dir);
  if (source.kind == Cifar10Source::Kind::binary) return load_binary(source.path, split, norm);
  if (source.kind == Cifar10Source::Kind::image_folder) {
    const fs::path d = source.path;
    ImageFolderOptions opt;
    opt.channels = kCifarChannels;
    opt.height = opt.width = kCifarSide;
    opt.norm = norm;
    opt.cache_dir = cache_dir;
    opt.name = detail::concat("cifar10/", split_name(split));
    Dataset ds = load_image_folder(d.string(), split_name(split), opt, info);
    // Labels are the sorted folder names' ranks, so only CIFAR-10's own names give label i the class
    // it has in the binary batches and cifar10_class_names(); "plane" for "airplane" would shift them.
    const std::vector<std::string>& official = cifar10_class_names();
    if (ds.class_names != official) {
      const auto list = [](const std::vector<std::string>& v) {
        std::string s;
        for (const std::string& name : v) s += (s.empty() ? "" : ", ") + name;
        return s;
      };
      const std::string folder = (d / split_name(split)).string();
      if (ds.num_classes != kCifarClasses)
        throw Error(detail::concat(op, ": ", folder, " holds ", ds.num_classes, " class folders; CIFAR-10 has ",
                                   kCifarClasses, " (expected ", list(official), "; found ", list(ds.class_names),
                                   ")"));
      throw Error(detail::concat(op, ": the class folders of ", folder, " are not CIFAR-10's: expected ",
                                 list(official), "; found ", list(ds.class_names),
                                 " (labels follow the sorted folder names, so they would not mean CIFAR-10's ",
                                 "classes; rename the folders)"));
    }
    return ds;
  }
  throw Error(detail::concat(op, ": found neither the binary batches (data_batch_1.bin ... test_batch.bin) nor an ",
                             "image folder (train/<class>/*.jpg); run datasets/fetch.sh cifar10, or ",
                             "datasets/fetch.sh cifar10 --from <cifar10-jpg.tar.gz or folder>"));
}

}  // namespace hl::data
