// Small file helpers shared by the loaders: whole-file reads, with errors that name the operation and
// the file. (Writes go through hl::write_file_atomic, framework/atomic_file.h.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hl::data {

// The whole file. Throws hl::Error("<op>(<path>): ...") when it is missing, a directory or unreadable.
std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& op);

}  // namespace hl::data
