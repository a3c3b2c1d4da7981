// Image-folder data sets with a decoded-pixel cache (see image_folder.h).
#include "datasets/image_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "datasets/image.h"
#include "datasets/io.h"
#include "framework/atomic_file.h"
#include "kernels/error.h"

namespace hl::data {
namespace {

namespace fs = std::filesystem;

constexpr char kCacheMagic[8] = {'H', 'L', 'I', 'M', 'G', 'C', 0, 1};  // last byte: format version
constexpr int64_t kMaxClasses = int64_t{1} << 20;
constexpr uint32_t kMaxNameBytes = 4096;

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp";
}

bool hidden(const fs::path& p) { return p.filename().string().starts_with("."); }

// A file's modification and status-change times, to the nanosecond (the field names differ on macOS).
timespec file_mtime(const struct stat& st) {
#ifdef __APPLE__
  return st.st_mtimespec;
#else
  return st.st_mtim;
#endif
}
timespec file_ctime(const struct stat& st) {
#ifdef __APPLE__
  return st.st_ctimespec;
#else
  return st.st_ctim;
#endif
}

// FNV-1a, 64-bit: a fingerprint, not a defence against anyone crafting collisions.
struct Fnv {
  uint64_t h = 0xCBF29CE484222325ull;
  void bytes(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001B3ull;
  }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
};

struct Listing {
  std::vector<std::string> classes;
  std::vector<fs::path> files;  // all images, class by class
  std::vector<int32_t> labels;  // per file
  uint64_t fingerprint = 0;
};

Listing list_folder(const fs::path& dir, const ImageFolderOptions& opt, const std::string& op) {
  const auto fail = [&](const auto&... what) { throw Error(detail::concat(op, ": ", what...)); };
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("no such folder: ", dir.string());
  if (!fs::is_directory(dir, ec)) fail(dir.string(), " is not a folder");
  Listing l;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (!hidden(e.path()) && e.is_directory()) l.classes.push_back(e.path().filename().string());
  if (ec) fail("cannot list ", dir.string(), ": ", ec.message());
  if (l.classes.empty())
    fail(dir.string(), " holds no class folders (expected ", dir.string(), "/<class>/*.jpg|png|bmp)");
  std::sort(l.classes.begin(), l.classes.end());

  Fnv fp;
  fp.str("halfling image folder v2");  // v2: seconds and nanoseconds of mtime and ctime, from stat
  fp.u64(static_cast<uint64_t>(opt.channels));
  fp.u64(static_cast<uint64_t>(opt.height));
  fp.u64(static_cast<uint64_t>(opt.width));
  for (size_t c = 0; c < l.classes.size(); ++c) {
    const fs::path class_dir = dir / l.classes[c];
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(class_dir, ec))
      if (!hidden(e.path()) && is_image_file(e.path()) && e.is_regular_file()) files.push_back(e.path());
    if (ec) fail("cannot list ", class_dir.string(), ": ", ec.message());
    if (files.empty()) fail("the class folder ", class_dir.string(), " holds no images (.jpg, .jpeg, .png, .bmp)");
    std::sort(files.begin(), files.end());
    fp.str(l.classes[c]);
    for (const fs::path& f : files) {
      // One stat per file (the fingerprint's main cost on a cached load). The change time joins size
      // and modification time because cp -p, rsync -a and tar x keep a replaced file's mtime, and a
      // same-size replacement would then be served from the cache; the ctime cannot be set back
      // (touch -r sets only atime and mtime), and a copy, a write or a chmod moves it on.
      struct stat st {};
      if (::stat(f.c_str(), &st) != 0) fail("cannot stat ", f.string(), ": ", std::strerror(errno));
      fp.str(f.filename().string());
      fp.u64(static_cast<uint64_t>(st.st_size));
      for (const timespec& t : {file_mtime(st), file_ctime(st)}) {
        fp.u64(static_cast<uint64_t>(t.tv_sec));
        fp.u64(static_cast<uint64_t>(t.tv_nsec));
      }
      l.files.push_back(f);
      l.labels.push_back(static_cast<int32_t>(c));
    }
  }
  l.fingerprint = fp.h;
  return l;
}

// Where the cache goes: opt.cache_dir, else next to the data when root is writable, else the user's
// cache folder under a name that includes a hash of root's absolute path.
std::string cache_path_for(const fs::path& root, const std::string& split, const ImageFolderOptions& opt) {
  const std::string file = detail::concat(".halfling-cache-", split.empty() ? "all" : split, "-c", opt.channels, "-",
                                          opt.height, "x", opt.width, ".bin");
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(root, ec), ec);
  Fnv h;
  h.str(abs.string());
  char tag[24];
  std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(h.h));
  if (!opt.cache_dir.empty()) return (fs::path(opt.cache_dir) / (tag + file)).string();
  if (::access(root.c_str(), W_OK) == 0) return (root / file).string();
  fs::path base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) base = xdg;
  else if (const char* home = std::getenv("HOME"); home && *home) base = fs::path(home) / ".cache";
  else base = fs::temp_directory_path();
  return (base / "halfling" / (tag + file)).string();
}

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A bounds-checked little-endian reader over the cache bytes.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& source) : p_(data), n_(size), source_(source) {}
  uint64_t u64() {
    need(8, "a 64-bit field");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{p_[at_ + static_cast<size_t>(i)]} << (8 * i);
    at_ += 8;
    return v;
  }
  uint32_t u32() {
    need(4, "a 32-bit field");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{p_[at_ + static_cast<size_t>(i)]} << (8 * i);
    at_ += 4;
    return v;
  }
  const uint8_t* take(size_t n, const char* what) {
    need(n, what);
    const uint8_t* q = p_ + at_;
    at_ += n;
    return q;
  }
  size_t left() const { return n_ - at_; }
  template <class... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw Error(detail::concat("parse_image_cache(", source_, "): ", args...));
  }

 private:
  void need(size_t n, const char* what) const {
    if (n > n_ - at_) fail("truncated: ", what, " at byte ", at_, " needs ", n, " byte(s), ", n_ - at_, " left");
  }
  const uint8_t* p_;
  size_t n_, at_ = 0;
  std::string source_;
};

}  // namespace

std::vector<uint8_t> serialize_image_cache(const ImageCache& c) {
  std::vector<uint8_t> b(kCacheMagic, kCacheMagic + sizeof kCacheMagic);
  put_u64(b, c.fingerprint);
  for (int64_t v : {c.count, c.channels, c.height, c.width}) put_u64(b, static_cast<uint64_t>(v));
  put_u32(b, static_cast<uint32_t>(c.class_names.size()));
  for (const std::string& s : c.class_names) {
    put_u32(b, static_cast<uint32_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
  for (int32_t l : c.labels) put_u32(b, static_cast<uint32_t>(l));
  b.insert(b.end(), c.pixels.begin(), c.pixels.end());
  return b;
}

ImageCache parse_image_cache(const uint8_t* data, size_t size, const std::string& source) {
  Reader r(data, size, source);
  if (std::memcmp(r.take(sizeof kCacheMagic, "the magic"), kCacheMagic, sizeof kCacheMagic) != 0)
    r.fail("wrong magic: not a halfling image cache (or one of another format version)");
  ImageCache c;
  c.fingerprint = r.u64();
  const uint64_t count = r.u64(), channels = r.u64(), height = r.u64(), width = r.u64();
  if (channels != 1 && channels != 3) r.fail("bad header: ", channels, " channels (expected 1 or 3)");
  if (height == 0 || width == 0 || height > (1u << 16) || width > (1u << 16))
    r.fail("bad header: images of ", height, "x", width, " pixels");
  const uint64_t image_bytes = channels * height * width;  // < 2^34: cannot overflow
  const uint32_t classes = r.u32();
  if (classes == 0 || classes > kMaxClasses) r.fail("bad header: ", classes, " classes");
  for (uint32_t k = 0; k < classes; ++k) {
    const uint32_t len = r.u32();
    if (len == 0 || len > kMaxNameBytes) r.fail("bad class name length ", len, " for class ", k);
    const uint8_t* s = r.take(len, "a class name");
    c.class_names.emplace_back(reinterpret_cast<const char*>(s), len);
  }
  // The rest must be exactly count labels and count images: compare before allocating anything.
  if (count == 0 || count > r.left() / (4 + image_bytes) || r.left() != count * (4 + image_bytes))
    r.fail("size mismatch: the header promises ", count, " images of ", image_bytes, " bytes plus labels, but ",
           r.left(), " bytes follow");
  c.count = static_cast<int64_t>(count);
  c.channels = static_cast<int64_t>(channels);
  c.height = static_cast<int64_t>(height);
  c.width = static_cast<int64_t>(width);
  c.labels.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t l = r.u32();
    if (l >= classes) r.fail("label ", l, " of image ", i, " is out of range (", classes, " classes)");
    c.labels[i] = static_cast<int32_t>(l);
  }
  const uint8_t* px = r.take(count * image_bytes, "the pixels");
  c.pixels.assign(px, px + count * image_bytes);
  return c;
}

Dataset load_image_folder(const std::string& root, const std::string& split, const ImageFolderOptions& opt,
                          ImageFolderInfo* info) {
  const fs::path dir = split.empty() ? fs::path(root) : fs::path(root) / split;
  const std::string op = detail::concat("load_image_folder(", dir.string(), ")");
  HL_CHECK(opt.channels == 1 || opt.channels == 3, op, ": channels must be 1 or 3 (got ", opt.channels, ")");
  // Each side on its own: a negative width beside a positive height passes the both-or-neither test.
  HL_CHECK(opt.height >= 0 && opt.width >= 0, op, ": the size to resize to cannot be negative; got ", opt.height,
           "x", opt.width, " (height x width; give both, or neither to keep the files' size)");
  HL_CHECK((opt.height == 0) == (opt.width == 0) && opt.height >= 0 && opt.height <= kMaxImageSide &&
               opt.width <= kMaxImageSide,
           op, ": give both height and width (or neither), each at most ", kMaxImageSide, "; got ", opt.height, "x",
           opt.width);
  opt.norm.check(op, opt.channels);
  ImageFolderInfo local;
  ImageFolderInfo& inf = info ? *info : local;
  inf = {};

  const Listing l = list_folder(dir, opt, op);
  const int64_t n = static_cast<int64_t>(l.files.size());
  ImageCache cache;
  bool have = false;
  if (opt.use_cache) {
    inf.cache_path = cache_path_for(root, split, opt);
    std::error_code ec;
    if (fs::exists(inf.cache_path, ec)) {
      try {
        const std::vector<uint8_t> bytes = read_file_bytes(inf.cache_path, "load_image_folder");
        cache = parse_image_cache(bytes.data(), bytes.size(), inf.cache_path);
        have = cache.fingerprint == l.fingerprint && cache.count == n && cache.class_names == l.classes &&
               cache.labels == l.labels;
      } catch (const Error& e) {
        std::fprintf(stderr, "%s: ignoring a damaged cache, rebuilding it: %s\n", op.c_str(), e.what());
      }
    }
  }

  if (have) {
    inf.from_cache = true;
  } else {
    // Decode every file (in parallel: each thread reads and decodes its own files). An exception
    // cannot leave an OpenMP loop, so each failure is recorded and the first one, by file order, is
    // thrown afterwards: the same file is reported whatever the thread timing.
    std::vector<Image> images(static_cast<size_t>(n));
    std::vector<std::string> errors(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t i = 0; i < n; ++i) {
      try {
        Image img = read_image(l.files[static_cast<size_t>(i)].string(), opt.channels);
        if (opt.height > 0) img = resize_image(img, opt.width, opt.height);
        images[static_cast<size_t>(i)] = std::move(img);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    }
    for (int64_t i = 0; i < n; ++i)
      if (!errors[static_cast<size_t>(i)].empty()) throw Error(detail::concat(op, ": ", errors[static_cast<size_t>(i)]));
    inf.decoded = n;

    const Image& first = images.front();
    cache = ImageCache{l.fingerprint, n, opt.channels, first.height, first.width, l.classes, l.labels, {}};
    const int64_t plane = first.height * first.width, image_bytes = opt.channels * plane;
    cache.pixels.resize(static_cast<size_t>(n * image_bytes));
    for (int64_t i = 0; i < n; ++i) {
      const Image& img = images[static_cast<size_t>(i)];
      if (img.width != first.width || img.height != first.height)
        throw Error(detail::concat(op, ": ", l.files[static_cast<size_t>(i)].string(), " is ", img.width, "x",
                                   img.height, " but ", l.files[0].string(), " is ", first.width, "x", first.height,
                                   "; images of different sizes need a size to resize to (height, width)"));
      uint8_t* dst = cache.pixels.data() + i * image_bytes;  // interleaved HWC -> channel-major CHW
      for (int64_t c = 0; c < opt.channels; ++c)
        for (int64_t k = 0; k < plane; ++k) dst[c * plane + k] = img.pixels[static_cast<size_t>(k * opt.channels + c)];
    }
    if (opt.use_cache) {
      // A cache that cannot be written costs only time on the next run, so it is a warning.
      try {
        std::error_code ec;
        fs::create_directories(fs::path(inf.cache_path).parent_path(), ec);
        const std::vector<uint8_t> bytes = serialize_image_cache(cache);
        write_file_atomic(inf.cache_path, bytes.data(), bytes.size(), "load_image_folder");
      } catch (const Error& e) {
        std::fprintf(stderr, "%s: could not write the cache (the next load decodes again): %s\n", op.c_str(), e.what());
      }
    }
  }

  Dataset ds;
  ds.images = normalize_pixels(cache.pixels.data(), n, cache.channels, cache.height, cache.width, opt.norm);
  ds.labels = Tensor::from_vector(cache.labels, {n});
  ds.num_classes = static_cast<int64_t>(l.classes.size());
  ds.class_names = l.classes;
  ds.norm = opt.norm;
  fs::path base = fs::path(root).lexically_normal();
  if (base.filename().empty()) base = base.parent_path();  // root given with a trailing slash
  ds.name = !opt.name.empty() ? opt.name : detail::concat(base.filename().string(), split.empty() ? "" : "/", split);
  return ds;
}

}  // namespace hl::data
