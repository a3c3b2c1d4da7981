// libFuzzer target: parse_cifar10_batch (datasets/cifar10.h) and the batches.meta.txt parser on
// arbitrary bytes.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "datasets/cifar10.h"
#include "kernels/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hl::data::CifarRecords r = hl::data::parse_cifar10_batch(data, size, "fuzz");
    // What the parser promises: whole records, every label in range.
    if (r.pixels.size() != r.labels.size() * 3072 || r.labels.empty()) std::abort();
    for (uint8_t l : r.labels)
      if (l >= 10) std::abort();
  } catch (const hl::Error&) {
  }
  try {
    const auto names = hl::data::parse_cifar10_label_names(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    if (names.size() != 10) std::abort();
  } catch (const hl::Error&) {
  }
  return 0;
}
