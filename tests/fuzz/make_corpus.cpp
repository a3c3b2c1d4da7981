// Writes the seed corpora in tests/fuzz/corpus/ (small valid files and a few near-misses for each
// parser). Not a fuzz target (the name does not start with fuzz_); rebuild the seeds with
//   g++ -std=c++20 -I. tests/fuzz/make_corpus.cpp -o /tmp/make_corpus -L<build> -lhalfling -lstb -lz \
//       -Wl,-rpath,<build> && /tmp/make_corpus tests/fuzz/corpus
#include <stb/stb_image_write.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "datasets/image_folder.h"
#include "tests/datasets/exif_files.h"

using Bytes = std::vector<uint8_t>;
namespace fs = std::filesystem;

static void put(const fs::path& p, const Bytes& b) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

static Bytes idx(const std::vector<uint32_t>& dims, uint8_t fill) {
  Bytes b = {0, 0, 8, static_cast<uint8_t>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(fill + i * 37));
  return b;
}

static Bytes gzip(const Bytes& raw) {
  Bytes out(compressBound(raw.size()) + 64);
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);  // 16+: a gzip wrapper
  z.next_in = const_cast<Bytes::value_type*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

static Bytes image(int w, int h, int c, const char* fmt) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h * c));
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 29);
  Bytes out;
  auto append = [](void* ctx, void* data, int size) {
    auto* o = static_cast<Bytes*>(ctx);
    o->insert(o->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  };
  if (std::string(fmt) == "png") stbi_write_png_to_func(append, &out, w, h, c, px.data(), w * c);
  if (std::string(fmt) == "jpg") stbi_write_jpg_to_func(append, &out, w, h, c, px.data(), 80);
  if (std::string(fmt) == "bmp") stbi_write_bmp_to_func(append, &out, w, h, c, px.data());
  return out;
}

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
  // IDX: images and labels, raw and gzipped, plus a cut-off file and a wrong magic.
  const Bytes images = idx({3, 4, 4}, 1), labels = idx({3}, 0);
  put(root / "fuzz_idx/images_3x4x4.idx", images);
  put(root / "fuzz_idx/labels_3.idx", labels);
  put(root / "fuzz_idx/images_3x4x4.idx.gz", gzip(images));
  put(root / "fuzz_idx/truncated.idx", Bytes(images.begin(), images.end() - 5));
  put(root / "fuzz_idx/wrong_magic.idx", Bytes{1, 2, 8, 1, 0, 0, 0, 1, 7});
  // CIFAR-10: one record, two records, one cut short, a meta file.
  Bytes rec(3073);
  for (size_t i = 0; i < rec.size(); ++i) rec[i] = static_cast<uint8_t>(i * 13);
  rec[0] = 7;
  put(root / "fuzz_cifar10/one_record.bin", rec);
  Bytes two = rec;
  two.insert(two.end(), rec.begin(), rec.end());
  two[3073] = 2;
  put(root / "fuzz_cifar10/two_records.bin", two);
  put(root / "fuzz_cifar10/truncated.bin", Bytes(rec.begin(), rec.begin() + 1000));
  const std::string meta = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n";
  put(root / "fuzz_cifar10/batches.meta.txt", Bytes(meta.begin(), meta.end()));
  // Images: each format, gray and RGB(A).
  put(root / "fuzz_image/rgb_8x6.png", image(8, 6, 3, "png"));
  put(root / "fuzz_image/gray_5x5.png", image(5, 5, 1, "png"));
  put(root / "fuzz_image/rgba_4x4.png", image(4, 4, 4, "png"));
  put(root / "fuzz_image/rgb_8x8.jpg", image(8, 8, 3, "jpg"));
  put(root / "fuzz_image/gray_16x8.jpg", image(16, 8, 1, "jpg"));
  put(root / "fuzz_image/rgb_5x3.bmp", image(5, 3, 3, "bmp"));
  // EXIF orientation (datasets/exif.cpp): a JPEG's APP1 segment, little-endian; a PNG's eXIf chunk, big-endian.
  using hl::test::exif_payload, hl::test::tiff_orientation, hl::test::with_app1, hl::test::with_exif_chunk;
  put(root / "fuzz_image/exif6_rgb_8x6.jpg",
      with_app1(image(8, 6, 3, "jpg"), exif_payload(tiff_orientation(false, 6))));
  put(root / "fuzz_image/exif8_gray_5x5.png", with_exif_chunk(image(5, 5, 1, "png"), tiff_orientation(true, 8)));
  // Image cache: two tiny ones.
  hl::data::ImageCache c{0x1234, 2, 1, 2, 2, {"cat", "dog"}, {1, 0}, Bytes(8, 9)};
  put(root / "fuzz_image_cache/gray_2x2x2.bin", hl::data::serialize_image_cache(c));
  hl::data::ImageCache rgb{7, 1, 3, 1, 2, {"a"}, {0}, Bytes(6, 200)};
  put(root / "fuzz_image_cache/rgb_1x1x2.bin", hl::data::serialize_image_cache(rgb));
  return 0;
}
