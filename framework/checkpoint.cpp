#include "framework/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "framework/atomic_file.h"
#include "framework/autograd.h"
#include "framework/nn.h"
#include "framework/optim.h"

namespace hl {

// Tensors are written with memcpy from host memory: the file format is little-endian, and so is every
// machine halfling runs on (x86-64, aarch64). A big-endian port would byte-swap here.
static_assert(std::endian::native == std::endian::little, "safetensors files are little-endian");

namespace {

using json = nlohmann::ordered_json;  // keeps the tensors in file order

std::string errno_text() { return std::strerror(errno); }

// The safetensors reference implementation refuses headers above 100 MB; so do we (it also bounds
// what a corrupt length field can make us allocate).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

const char* dtype_code(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::f64: return "F64";
  }
  return "?";
}

bool dtype_from_code(const std::string& s, DType& out) {
  static const std::pair<const char*, DType> codes[] = {
      {"F32", DType::f32}, {"F16", DType::f16}, {"I32", DType::i32}, {"F64", DType::f64}};
  for (const auto& [code, t] : codes)
    if (s == code) {
      out = t;
      return true;
    }
  return false;
}

// ---- writing -------------------------------------------------------------------------------------------

// What the writer needs of each tensor: its bytes, in host memory.
struct Prepared {
  std::string name;
  Tensor host;  // contiguous, on the CPU
};

std::vector<Prepared> prepare(const NamedTensors& tensors, const std::string& op) {
  std::set<std::string> seen;
  std::vector<Prepared> out;
  for (const auto& [name, t] : tensors) {
    HL_CHECK(!name.empty(), op, ": a tensor has an empty name");
    HL_CHECK(name != "__metadata__", op, ": '__metadata__' is reserved for the metadata and cannot name a tensor");
    HL_CHECK(seen.insert(name).second, op, ": duplicate tensor name '", name, "'");
    HL_CHECK(t.defined(), op, ": tensor '", name, "' is undefined");
    out.push_back({name, t.detach().to(Device::cpu)});
  }
  return out;
}

// The header, padded with spaces so that the data starts at a multiple of 8 bytes (the format's rule,
// which lets a reader map the file and view the tensors in place, aligned).
std::string make_header(const std::vector<Prepared>& tensors, const StringMap& metadata, const std::string& op) {
  json header = json::object();
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const auto& p : tensors) {
    const uint64_t bytes = p.host.nbytes();
    header[p.name] = {{"dtype", dtype_code(p.host.dtype())},
                      {"shape", p.host.shape()},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // names and metadata must be valid UTF-8 to be JSON
    throw Error(op + ": a tensor name or metadata string is not valid UTF-8 (" + e.what() + ")");
  }
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}

template <class Sink>
void emit(const std::vector<Prepared>& tensors, const StringMap& metadata, const std::string& op, Sink&& sink) {
  const std::string header = make_header(tensors, metadata, op);
  const uint64_t n = header.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  sink(len, sizeof len);
  sink(header.data(), header.size());
  for (const auto& p : tensors)
    if (p.host.nbytes() > 0) sink(p.host.data_ptr(), p.host.nbytes());
}

}  // namespace

std::vector<uint8_t> serialize_safetensors(const NamedTensors& tensors, const StringMap& metadata) {
  const std::string op = "serialize_safetensors";
  const auto prepared = prepare(tensors, op);
  std::vector<uint8_t> out;
  emit(prepared, metadata, op, [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors, const StringMap& metadata) {
  const std::string op = "save_safetensors(" + path + ")";
  const auto prepared = prepare(tensors, op);
  AtomicFile file(path, "save_safetensors");
  emit(prepared, metadata, op, [&](const void* p, size_t n) { file.write(p, n); });
  file.commit();
}

// ---- reading -------------------------------------------------------------------------------------------

bool SafeTensors::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& nt) { return nt.first == name; });
}

const Tensor& SafeTensors::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  std::string names;
  for (const auto& [n, t] : tensors) names += (names.empty() ? "" : ", ") + n;
  throw Error("SafeTensors::at: no tensor '" + name + "' (present: " + (names.empty() ? "none" : names) + ")");
}

namespace {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// Parse the JSON header, refusing duplicate keys in any object (nlohmann would silently keep one of
// them; two tensors with one name means the file is not what its writer meant).
json parse_header(const char* text, size_t n, const std::string& where) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty() && parsed.is_string()) {
      if (!keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, text + n, callback);
  } catch (const json::exception& e) {
    throw Error(where + "invalid JSON header: " + e.what());
  }
  HL_CHECK(duplicate.empty(), where, "duplicate name '", duplicate, "' in the header");
  return header;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Entry parse_entry(const std::string& name, const json& info, const std::string& where) {
  const std::string what = where + "tensor '" + name + "': ";
  HL_CHECK(info.is_object(), what, "expected an object with dtype, shape and data_offsets, got ", info.type_name());
  for (const auto& [key, value] : info.items()) {
    (void)value;
    HL_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", what, "unknown field '", key, "'");
  }
  HL_CHECK(info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"), what,
           "needs dtype, shape and data_offsets");
  Entry e;
  e.name = name;
  const json& dt = info["dtype"];
  HL_CHECK(dt.is_string(), what, "dtype must be a string, got ", dt.dump());
  if (!dtype_from_code(dt.get<std::string>(), e.dtype)) {
    // PyTorch's BatchNorm keeps an int64 step counter in its state_dict, which halfling has no use for:
    // the usual reason a file written from PyTorch is refused, so the message says what to do.
    const std::string suffix = "num_batches_tracked";
    const bool bn_counter = dt.get<std::string>() == "I64" && name.size() >= suffix.size() &&
                            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    throw Error(what + "unsupported dtype '" + dt.get<std::string>() + "' (halfling reads F32, F16, F64 and I32)" +
                (bn_counter ? "; this is PyTorch's BatchNorm step counter, which halfling does not keep: leave "
                              "the *.num_batches_tracked keys out when saving (docs/checkpoints.md, \"Load PyTorch "
                              "weights into halfling\")"
                            : ""));
  }

  const json& shape = info["shape"];
  HL_CHECK(shape.is_array(), what, "shape must be an array, got ", shape.dump());
  for (const json& d : shape) {
    HL_CHECK(d.is_number_unsigned(), what, "shape ", shape.dump(), " must hold non-negative integers");
    const uint64_t v = d.get<uint64_t>();
    HL_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), what, "dimension ", v,
             " is too large");
    e.shape.push_back(static_cast<int64_t>(v));
  }
  // Tensor's rule (shape_numel): the product of the non-zero dimensions must fit in an int64, so that
  // every shape the parser accepts, [0, 2^40, 2^40] included, is one Tensor::empty accepts too.
  int64_t numel = 0;
  HL_CHECK(shape_numel_fits(e.shape, numel), what, "shape ", shape.dump(), " has too many elements");

  const json& off = info["data_offsets"];
  HL_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), what,
           "data_offsets must be [begin, end] with non-negative integers, got ", off.dump());
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  HL_CHECK(e.begin <= e.end, what, "data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  uint64_t bytes = 0;
  HL_CHECK(!__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(dtype_size(e.dtype)), &bytes),
           what, "shape ", shape.dump(), " has too many bytes");
  HL_CHECK(e.end - e.begin == bytes, what, "data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
           " bytes, but ", dt.get<std::string>(), shape_str(e.shape), " needs ", bytes);
  return e;
}

}  // namespace

SafeTensors parse_safetensors(const uint8_t* data, size_t size, const std::string& source) {
  const std::string where = "load_safetensors(" + source + "): ";
  HL_CHECK(size >= 8, where, "file too short (", size, " bytes): a safetensors file starts with an 8-byte header length");
  const uint64_t n = read_u64_le(data);
  HL_CHECK(n <= size - 8, where, "header length ", n, " is larger than the file (", size - 8,
           " bytes after the length field)");
  HL_CHECK(n <= kMaxHeaderBytes, where, "header length ", n, " exceeds the format's limit of ", kMaxHeaderBytes);
  const json header = parse_header(reinterpret_cast<const char*>(data + 8), n, where);
  HL_CHECK(header.is_object(), where, "the header must be a JSON object, got ", header.type_name());

  SafeTensors out;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      HL_CHECK(value.is_object(), where, "__metadata__ must be an object of strings, got ", value.type_name());
      for (const auto& [mk, mv] : value.items()) {
        HL_CHECK(mv.is_string(), where, "__metadata__ value of '", mk, "' must be a string, got ", mv.dump());
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    HL_CHECK(!key.empty(), where, "a tensor has an empty name");
    entries.push_back(parse_entry(key, value, where));
  }

  // The byte buffer must be covered exactly: sorted by offset, each tensor starts where the previous
  // one ended, and the last one ends at the end of the file.
  const uint64_t buffer = size - 8 - n;
  std::vector<const Entry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    HL_CHECK(e->end <= buffer, where, "tensor '", e->name, "' data_offsets [", e->begin, ", ", e->end,
             "] run past the end of the data (", buffer, " bytes)");
    HL_CHECK(e->begin >= expected, where, "tensor '", e->name, "' data_offsets [", e->begin, ", ", e->end,
             "] overlap tensor '", prev ? prev->name : "", "' (which ends at ", expected, ")");
    HL_CHECK(e->begin == expected, where, "gap of ", e->begin - expected, " unused bytes before tensor '", e->name,
             "' (data_offsets [", e->begin, ", ", e->end, "])");
    expected = e->end;
    prev = e;
  }
  HL_CHECK(expected == buffer, where, buffer - expected, " unexpected bytes after the last tensor (the data holds ",
           buffer, " bytes, the tensors ", expected, ")");

  const uint8_t* base = data + 8 + n;
  for (const auto& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu);
    if (e.end > e.begin) std::memcpy(t.data_ptr(), base + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

SafeTensors load_safetensors(const std::string& path) {
  const std::string where = "load_safetensors(" + path + "): ";
  const int fd = ::open(path.c_str(), O_RDONLY);
  HL_CHECK(fd >= 0, where, "cannot open: ", errno_text());
  std::vector<uint8_t> bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) bytes.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const std::string err = errno_text();
      ::close(fd);
      throw Error(where + "read failed: " + err);
    }
    if (r == 0) break;
    bytes.insert(bytes.end(), buf, buf + r);
  }
  ::close(fd);
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

// ---- checkpoints ---------------------------------------------------------------------------------------

namespace {

constexpr const char* kFormatKey = "halfling.format";
constexpr const char* kVersionKey = "halfling.version";
constexpr const char* kSectionsKey = "halfling.sections";
constexpr const char* kFormatVersion = "1";

bool valid_section_name(const std::string& s) {
  if (s.empty() || s == "model" || s == "optim" || s == "user" || s == "halfling") return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Exact conversions only: the same dtype, or a wider floating dtype (every f16 is an f32, every f32
// an f64).
bool loads_exactly(DType stored, DType into) {
  if (stored == into) return true;
  auto rank = [](DType t) { return t == DType::f16 ? 0 : t == DType::f32 ? 1 : 2; };
  return is_floating(stored) && is_floating(into) && rank(stored) < rank(into);
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer,
                     const StringMap& metadata, const std::map<std::string, CheckpointSection>& sections) {
  const std::string op = "save_checkpoint(" + path + ")";
  NamedTensors tensors;
  StringMap meta;
  meta[kFormatKey] = "checkpoint";
  meta[kVersionKey] = kFormatVersion;
  for (const auto& [name, p] : model.named_state()) tensors.emplace_back("model." + name, p);
  if (optimizer != nullptr) {
    const optim::Optimizer::State st = optimizer->state();
    for (const auto& [name, t] : st.tensors) tensors.emplace_back("optim." + name, t);
    for (const auto& [k, v] : st.meta) meta["optim." + k] = v;
  }
  std::string section_list;
  for (const auto& [sname, section] : sections) {
    HL_CHECK(valid_section_name(sname), op, ": invalid section name '", sname,
             "' (lower-case letters, digits and '_'; not model, optim, user or halfling)");
    section_list += (section_list.empty() ? "" : ",") + sname;
    for (const auto& [name, t] : section.tensors) tensors.emplace_back(sname + "." + name, t);
    for (const auto& [k, v] : section.meta) meta[sname + "." + k] = v;
  }
  if (!section_list.empty()) meta[kSectionsKey] = section_list;
  for (const auto& [k, v] : metadata) meta["user." + k] = v;
  save_safetensors(path, tensors, meta);
}

void load_parameters(const SafeTensors& file, nn::Module& model, const std::string& prefix,
                     const std::string& source) {
  const std::string where = "load_checkpoint(" + source + "): ";
  const auto params = model.named_state();  // parameters and buffers (BatchNorm2d's running statistics)
  std::set<std::string> expected;
  std::vector<std::string> missing, problems;
  for (const auto& [name, p] : params) {
    expected.insert(prefix + name);
    if (!file.contains(prefix + name)) {
      missing.push_back(prefix + name);
      continue;
    }
    const Tensor& t = file.at(prefix + name);
    if (t.shape() != p.shape())
      problems.push_back(detail::concat("'", prefix + name, "' has shape ", shape_str(t.shape()),
                                        " in the file but ", shape_str(p.shape()), " in the model"));
    else if (!loads_exactly(t.dtype(), p.dtype()))
      problems.push_back(detail::concat("'", prefix + name, "' is ", dtype_name(t.dtype()), " in the file but ",
                                        dtype_name(p.dtype()), " in the model (only exact widening, f16 -> f32 -> "
                                        "f64, is done on load)"));
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : file.tensors)
    if (starts_with(name, prefix) && !expected.count(name)) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !problems.empty()) {
    std::string msg = where + "the file does not match the model:";
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
      return s;
    };
    if (!missing.empty()) msg += " missing " + list(missing) + ";";
    if (!unexpected.empty()) msg += " unexpected " + list(unexpected) + ";";
    for (const auto& p : problems) msg += " " + p + ";";
    msg.pop_back();
    throw Error(msg);
  }
  NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    Tensor dst = p;  // a handle to the parameter itself: copy_ writes into its storage
    dst.copy_(file.at(prefix + name));
  }
}

Checkpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* optimizer) {
  const std::string where = "load_checkpoint(" + path + "): ";
  const SafeTensors file = load_safetensors(path);
  // A missing format key is accepted (a file another tool wrote with the same names, docs/checkpoints.md);
  // a different one says the file is something else that happens to be safetensors.
  if (auto it = file.metadata.find(kFormatKey); it != file.metadata.end())
    HL_CHECK(it->second == "checkpoint", where, kFormatKey, " is '", it->second,
             "', not 'checkpoint': this file is not a halfling training checkpoint");
  if (auto it = file.metadata.find(kVersionKey); it != file.metadata.end())
    HL_CHECK(it->second == kFormatVersion, where, "checkpoint format version ", it->second,
             " is not supported (this halfling reads version ", kFormatVersion, ")");

  Checkpoint out;
  std::vector<std::string> section_names;
  if (auto it = file.metadata.find(kSectionsKey); it != file.metadata.end()) section_names = split_commas(it->second);
  for (const auto& s : section_names) {
    HL_CHECK(valid_section_name(s), where, "invalid section name '", s, "' in ", kSectionsKey);
    out.sections[s];
  }

  // Sort every tensor and every metadata key into its section; anything else is unexpected.
  optim::Optimizer::State opt_state;
  bool has_optim = false;
  std::vector<std::string> unexpected;
  auto section_of = [&](const std::string& key) -> std::pair<std::string, std::string> {
    const size_t dot = key.find('.');
    if (dot == std::string::npos) return {"", key};
    return {key.substr(0, dot), key.substr(dot + 1)};
  };
  for (const auto& [name, t] : file.tensors) {
    const auto [sec, rest] = section_of(name);
    if (sec == "model") continue;  // load_parameters checks these
    if (sec == "optim") {
      opt_state.tensors.emplace_back(rest, t);
      has_optim = true;
    } else if (out.sections.count(sec)) {
      out.sections[sec].tensors.emplace_back(rest, t);
    } else {
      unexpected.push_back(name);
    }
  }
  for (const auto& [key, value] : file.metadata) {
    const auto [sec, rest] = section_of(key);
    if (sec == "user") {
      out.metadata[rest] = value;
    } else if (sec == "optim") {
      opt_state.meta[rest] = value;
      has_optim = true;
    } else if (out.sections.count(sec)) {
      out.sections[sec].meta[rest] = value;
    }
    // Other metadata (halfling.*, or keys another writer added, such as "format": "pt") is not state.
  }
  if (!unexpected.empty()) {
    std::string names;
    for (const auto& n : unexpected) names += (names.empty() ? "" : ", ") + n;
    throw Error(where + "unexpected tensors " + names + " (neither model.*, optim.* nor a listed section)");
  }
  if (optimizer != nullptr)
    HL_CHECK(has_optim, where, "the checkpoint holds no optimizer state, but an optimizer (", optimizer->type(),
             ") was given to load it into");

  // The model is checked completely before anything is copied. If the optimizer then refuses its
  // state, the model and the optimizer get their old values back, so a failed load changes nothing.
  std::vector<Tensor> model_backup;
  for (const auto& [name, p] : model.named_state()) model_backup.push_back(p.detach().clone());
  optim::Optimizer::State opt_backup;
  if (optimizer != nullptr) {
    opt_backup = optimizer->state();
    for (auto& [name, t] : opt_backup.tensors) t = t.detach().clone();
  }
  load_parameters(file, model, "model.", path);
  if (optimizer != nullptr) {
    try {
      optimizer->load_state(opt_state);
    } catch (const std::exception& e) {  // hl::Error, or bad_alloc from a copy: roll back either way
      NoGradGuard no_grad;
      const auto state = model.named_state();
      for (size_t i = 0; i < state.size(); ++i) Tensor(state[i].second).copy_(model_backup[i]);
      optimizer->load_state(opt_backup);
      throw Error(where + "optimizer state does not fit: " + e.what());
    }
  }
  return out;
}

}  // namespace hl
