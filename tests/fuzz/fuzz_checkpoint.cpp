// libFuzzer target for the safetensors reader (framework/checkpoint.h: parse_safetensors).
//
// The contract under test: any byte string either parses, or is rejected with hl::Error. Anything
// else (a crash, a sanitizer report, another exception type, a huge allocation) is a bug. A file that
// parses must also survive a round trip: written back by serialize_safetensors and read again, it
// gives the same names, dtypes, shapes, bytes and metadata.
//
// Build: tests/fuzz/CMakeLists.txt (-DHALFLING_FUZZ=ON with clang++); run: tests/fuzz/run.sh.
// Seeds: tests/fuzz/corpus/fuzz_checkpoint/.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "framework/checkpoint.h"

namespace {

bool same_bytes(const hl::Tensor& a, const hl::Tensor& b) {
  return a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

void check_round_trip(const hl::SafeTensors& s) {
  const std::vector<uint8_t> again = hl::serialize_safetensors(s.tensors, s.metadata);
  const hl::SafeTensors t = hl::parse_safetensors(again.data(), again.size(), "fuzz round trip");
  bool ok = t.tensors.size() == s.tensors.size() && t.metadata == s.metadata;
  for (size_t i = 0; ok && i < s.tensors.size(); ++i) {
    const auto& [na, a] = s.tensors[i];
    const auto& [nb, b] = t.tensors[i];
    ok = na == nb && a.dtype() == b.dtype() && a.shape() == b.shape() && same_bytes(a, b);
  }
  if (!ok) std::abort();  // the fuzzer reports the input that broke the round trip
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    check_round_trip(hl::parse_safetensors(data, size, "fuzz input"));
  } catch (const hl::Error&) {
    // A rejected file: the expected outcome for almost every input.
  }
  return 0;
}
