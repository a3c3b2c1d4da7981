// Small file helpers shared by the loaders: whole-file reads and atomic writes, with errors that
// name the operation and the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hl::data {

// The whole file. Throws hl::Error("<op>(<path>): ...") when it is missing, a directory or unreadable.
std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& op);

// Write `bytes` to path atomically: into a temporary file in the same folder, flushed, then renamed
// over path, so a reader sees the old file or the whole new one, never half of one (a crash or a
// second process writing at the same time cannot leave a torn file). Throws hl::Error on failure.
void write_file_atomic(const std::string& path, const void* bytes, size_t size, const std::string& op);

}  // namespace hl::data
