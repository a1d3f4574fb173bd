#include "pstar/formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "pstar/base/error.h"

namespace pstar::formats {
namespace {

using nlohmann::json;

// The reference implementation's limit: a larger header is a corrupt length, not a real header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kLengthBytes = 8;
constexpr const char* kMetadataKey = "__metadata__";
// Far more than a valid header's 3 levels ({name: {"shape": [...]}}), far less than overflows a
// stack.
constexpr int kMaxHeaderDepth = 64;

constexpr DType kAllDTypes[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI64,
                                DType::kI32, DType::kI16, DType::kI8,  DType::kU8,   DType::kBool,
                                DType::kU16, DType::kU32, DType::kU64};

std::optional<DType> dtype_from_name(const std::string& name) {
  for (DType dtype : kAllDTypes) {
    if (name == dtype_name(dtype)) return dtype;
  }
  return std::nullopt;
}

std::string dtype_names_list() {
  std::string out;
  for (DType dtype : kAllDTypes) {
    if (!out.empty()) out += ", ";
    out += dtype_name(dtype);
  }
  return out;
}

uint64_t load_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

void store_u64_le(uint64_t value, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(value >> (8 * i));
}

// numel of `shape` and its size in bytes, or nullopt when either does not fit in 64 bits.
std::optional<std::pair<int64_t, uint64_t>> checked_sizes(const std::vector<int64_t>& shape,
                                                          DType dtype) {
  int64_t numel = 1;
  for (int64_t dim : shape) {
    if (dim != 0 && numel > std::numeric_limits<int64_t>::max() / dim) return std::nullopt;
    numel *= dim;
  }
  const uint64_t elem = dtype_size(dtype);
  if (static_cast<uint64_t>(numel) > std::numeric_limits<uint64_t>::max() / elem) {
    return std::nullopt;
  }
  return std::make_pair(numel, static_cast<uint64_t>(numel) * elem);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// Parses one header entry; `where` prefixes every message ("safetensors file 'p': tensor 'n'").
TensorInfo parse_entry(const std::string& name, const json& entry, const std::string& where) {
  PSTAR_CHECK(entry.is_object(), FormatError, where, ": the entry must be a JSON object with ",
              "dtype, shape and data_offsets, but it is ", entry.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    PSTAR_CHECK(entry.contains(key), FormatError, where, ": the entry has no '", key,
                "'; every tensor needs dtype, shape and data_offsets");
  }

  const json& dtype_json = entry.at("dtype");
  PSTAR_CHECK(dtype_json.is_string(), FormatError, where, ": 'dtype' must be a string such as ",
              "\"F32\", but it is ", dtype_json.dump());
  const std::string dtype_str = dtype_json.get<std::string>();
  const std::optional<DType> dtype = dtype_from_name(dtype_str);
  PSTAR_CHECK(dtype.has_value(), FormatError, where, ": unknown dtype '", dtype_str,
              "'; supported dtypes are ", dtype_names_list());

  const json& shape_json = entry.at("shape");
  PSTAR_CHECK(shape_json.is_array(), FormatError, where,
              ": 'shape' must be an array of non-negative integers, but it is ", shape_json.dump());
  std::vector<int64_t> shape;
  shape.reserve(shape_json.size());
  for (const json& dim : shape_json) {
    PSTAR_CHECK(dim.is_number_integer(), FormatError, where,
                ": 'shape' must hold non-negative integers, but it is ", shape_json.dump());
    PSTAR_CHECK(dim.is_number_unsigned(), FormatError, where, ": 'shape' ", shape_json.dump(),
                " has a negative dimension; dimensions must be >= 0");
    const uint64_t value = dim.get<uint64_t>();
    PSTAR_CHECK(value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), FormatError,
                where, ": 'shape' ", shape_json.dump(), " has a dimension that does not fit int64");
    shape.push_back(static_cast<int64_t>(value));
  }
  const auto sizes = checked_sizes(shape, *dtype);
  PSTAR_CHECK(sizes.has_value(), FormatError, where, ": shape ", shape_string(shape), " of ",
              dtype_str, " is too large: its byte size overflows 64 bits");

  const json& offsets = entry.at("data_offsets");
  PSTAR_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                  offsets[1].is_number_unsigned(),
              FormatError, where,
              ": 'data_offsets' must be [begin, end] with non-negative integers, but it is ",
              offsets.dump());
  const uint64_t begin = offsets[0].get<uint64_t>();
  const uint64_t end = offsets[1].get<uint64_t>();
  PSTAR_CHECK(begin <= end, FormatError, where, ": data_offsets [", begin, ", ", end,
              "] has begin > end");
  PSTAR_CHECK(end - begin == sizes->second, FormatError, where, ": data_offsets [", begin, ", ",
              end, "] hold ", end - begin, " bytes, but shape ", shape_string(shape), " of ",
              dtype_str, " needs ", sizes->second, " bytes");

  return TensorInfo{name, *dtype, std::move(shape), begin, end - begin};
}

// A tensor as the header describes it; the layout is the same for both writers.
struct HeaderEntry {
  const std::string* name;
  DType dtype;
  const std::vector<int64_t>* shape;
  uint64_t size_bytes;
};

// Checks a tensor a writer is given: the name, the dimensions, and that `size_bytes` (when set)
// matches the shape. Returns the tensor's size in bytes.
uint64_t check_writer_entry(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                            std::optional<size_t> size_bytes) {
  PSTAR_CHECK(name != kMetadataKey, ConfigError, "safetensors tensor name '", name,
              "' is reserved for metadata; use set_metadata, or another name");
  for (int64_t dim : shape) {
    PSTAR_CHECK(dim >= 0, ConfigError, "safetensors tensor '", name, "' has shape ",
                shape_string(shape), "; dimensions must be >= 0");
  }
  const auto sizes = checked_sizes(shape, dtype);
  PSTAR_CHECK(sizes.has_value(), ConfigError, "safetensors tensor '", name, "' shape ",
              shape_string(shape), " of ", dtype_name(dtype), " is too large for 64-bit sizes");
  PSTAR_CHECK(!size_bytes || *size_bytes == sizes->second, ConfigError, "safetensors tensor '",
              name, "' got ", size_bytes.value_or(0), " bytes, but shape ", shape_string(shape),
              " of ", dtype_name(dtype), " needs ", sizes->second, " bytes");
  return sizes->second;
}

// The header's JSON text, padded with spaces so the data section starts 8-byte aligned (the spec
// allows them). Tensors are laid out sorted by name, so the same tensors always give the same
// bytes; `entries` is sorted in place.
std::string header_text(std::vector<HeaderEntry>& entries,
                        const std::map<std::string, std::string>& metadata) {
  std::sort(entries.begin(), entries.end(),
            [](const HeaderEntry& a, const HeaderEntry& b) { return *a.name < *b.name; });
  json header = json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const HeaderEntry& entry : entries) {
    const uint64_t end = offset + entry.size_bytes;
    header[*entry.name] = {{"dtype", dtype_name(entry.dtype)},
                           {"shape", *entry.shape},
                           {"data_offsets", json::array({offset, end})}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    PSTAR_THROW(ConfigError, "cannot write safetensors: a tensor name or metadata string is not ",
                "valid UTF-8 (", e.what(), "); the format stores them as JSON strings");
  }
  text.append((kLengthBytes - text.size() % kLengthBytes) % kLengthBytes, ' ');
  return text;
}

}  // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return "F64";
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI64:
      return "I64";
    case DType::kI32:
      return "I32";
    case DType::kI16:
      return "I16";
    case DType::kI8:
      return "I8";
    case DType::kU8:
      return "U8";
    case DType::kBool:
      return "BOOL";
    case DType::kU16:
      return "U16";
    case DType::kU32:
      return "U32";
    case DType::kU64:
      return "U64";
  }
  PSTAR_INTERNAL_ASSERT(false, "unhandled DType ", static_cast<int>(dtype));
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
    case DType::kU64:
      return 8;
    case DType::kF32:
    case DType::kI32:
    case DType::kU32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
    case DType::kU16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  PSTAR_INTERNAL_ASSERT(false, "unhandled DType ", static_cast<int>(dtype));
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : file_(path) {
  const std::string where = str_cat("safetensors file '", path, "'");
  const uint64_t file_bytes = file_.size();
  PSTAR_CHECK(file_bytes >= kLengthBytes, FormatError, where, " is ", file_bytes,
              " bytes, too short to hold the 8-byte header length; the file is truncated or not "
              "safetensors");
  const uint64_t header_bytes = load_u64_le(file_.data());
  PSTAR_CHECK(header_bytes <= kMaxHeaderBytes, FormatError, where, ": header length ", header_bytes,
              " exceeds the limit of ", kMaxHeaderBytes,
              " bytes; the file is corrupt or not safetensors");
  PSTAR_CHECK(header_bytes <= file_bytes - kLengthBytes, FormatError, where, ": header length ",
              header_bytes, " runs past the end of the ", file_bytes,
              "-byte file; the file is truncated or corrupt");
  data_start_ = kLengthBytes + header_bytes;
  const uint64_t data_bytes = file_bytes - data_start_;

  // nlohmann keeps only the last of duplicate keys; the spec forbids them, so catch them here
  // before a tensor silently disappears.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    // nlohmann parses any depth without recursion, but dump() (in the messages below) recurses
    // once per level: a value nested ~100k levels deep overflowed the stack (found by tests/fuzz).
    PSTAR_CHECK(depth <= kMaxHeaderDepth, FormatError, where,
                ": the header nests JSON deeper than ", kMaxHeaderDepth,
                " levels; a safetensors header nests 3 (the file is corrupt)");
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  const char* header_text = reinterpret_cast<const char*>(file_.data() + kLengthBytes);
  json header;
  try {
    header = json::parse(header_text, header_text + header_bytes, on_event);
  } catch (const json::exception& e) {
    PSTAR_THROW(FormatError, where, ": the header is not valid JSON (", e.what(), ")");
  }
  PSTAR_CHECK(header.is_object(), FormatError, where,
              ": the header must be a JSON object of tensors, but it is ", header.type_name());
  PSTAR_CHECK(duplicate.empty(), FormatError, where, ": the header names '", duplicate,
              "' more than once; names must be unique");

  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      PSTAR_CHECK(entry.is_object(), FormatError, where, ": '", kMetadataKey,
                  "' must be an object of string to string, but it is ", entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        PSTAR_CHECK(value.is_string(), FormatError, where, ": '", kMetadataKey, "' key '", key,
                    "' must have a string value, but it is ", value.dump());
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string tensor_where = str_cat(where, ": tensor '", name, "'");
    TensorInfo info = parse_entry(name, entry, tensor_where);
    PSTAR_CHECK(info.begin_bytes + info.size_bytes <= data_bytes, FormatError, tensor_where,
                ": data_offsets [", info.begin_bytes, ", ", info.begin_bytes + info.size_bytes,
                "] run past the end of the ", data_bytes,
                "-byte data section; the file is truncated or corrupt");
    tensors_.push_back(std::move(info));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin_bytes, a.size_bytes, a.name) <
           std::tie(b.begin_bytes, b.size_bytes, b.name);
  });
  // The spec requires the tensors to tile the data section exactly: no byte shared, none unused.
  uint64_t cursor = 0;
  const TensorInfo* previous = nullptr;  // the last tensor that ends at `cursor`
  for (const TensorInfo& info : tensors_) {
    const uint64_t end = info.begin_bytes + info.size_bytes;
    if (info.begin_bytes < cursor) {
      PSTAR_THROW(FormatError, where, ": tensor '", info.name, "' data_offsets [", info.begin_bytes,
                  ", ", end, "] overlap tensor '", previous->name, "' data_offsets [",
                  previous->begin_bytes, ", ", cursor, "]; each tensor needs its own bytes");
    }
    PSTAR_CHECK(info.begin_bytes == cursor, FormatError, where, ": bytes [", cursor, ", ",
                info.begin_bytes, ") of the data section before tensor '", info.name,
                "' belong to no tensor; the data section must be fully covered");
    cursor = end;
    previous = &info;
  }
  PSTAR_CHECK(cursor == data_bytes, FormatError, where, ": bytes [", cursor, ", ", data_bytes,
              ") at the end of the data section belong to no tensor",
              previous != nullptr ? str_cat(" (the last is '", previous->name, "')") : "",
              "; the data section must be fully covered");

  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsReader::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* SafetensorsReader::data(const TensorInfo& info) const {
  PSTAR_INTERNAL_ASSERT(info.begin_bytes + info.size_bytes <= file_.size() - data_start_,
                        "tensor '", info.name, "' is not from safetensors file '", path(), "'");
  return file_.data() + data_start_ + info.begin_bytes;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                            const void* bytes, size_t size_bytes) {
  check_writer_entry(name, dtype, shape, size_bytes);
  for (const Entry& entry : entries_) {
    PSTAR_CHECK(entry.name != name, ConfigError, "safetensors tensor '", name,
                "' is added twice; tensor names must be unique");
  }
  PSTAR_INTERNAL_ASSERT(bytes != nullptr || size_bytes == 0, "tensor '", name, "' has no data");
  const auto* p = static_cast<const uint8_t*>(bytes);
  entries_.push_back(Entry{name, dtype, shape, std::vector<uint8_t>(p, p + size_bytes)});
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  std::vector<HeaderEntry> entries;
  entries.reserve(entries_.size());
  for (const Entry& entry : entries_)
    entries.push_back(HeaderEntry{&entry.name, entry.dtype, &entry.shape, entry.bytes.size()});
  const std::string text = header_text(entries, metadata_);

  // header_text sorted `entries` by name: that is the data order too.
  std::map<std::string, const Entry*> by_name;
  for (const Entry& entry : entries_) by_name.emplace(entry.name, &entry);
  uint64_t data_bytes = 0;
  for (const Entry& entry : entries_) data_bytes += entry.bytes.size();
  std::vector<uint8_t> out(kLengthBytes + text.size() + data_bytes);
  store_u64_le(text.size(), out.data());
  std::memcpy(out.data() + kLengthBytes, text.data(), text.size());
  uint8_t* data = out.data() + kLengthBytes + text.size();
  for (const auto& [name, entry] : by_name) {
    if (!entry->bytes.empty()) std::memcpy(data, entry->bytes.data(), entry->bytes.size());
    data += entry->bytes.size();
  }
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  write_file_atomic(path, bytes.data(), bytes.size());
}

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path,
                                                 const std::vector<Entry>& entries,
                                                 const std::map<std::string, std::string>& metadata)
    : file_(path) {
  std::vector<HeaderEntry> header;
  header.reserve(entries.size());
  for (const Entry& entry : entries) {
    const uint64_t size = check_writer_entry(entry.name, entry.dtype, entry.shape, std::nullopt);
    PSTAR_CHECK(slots_.emplace(entry.name, Slot{0, size, false}).second, ConfigError,
                "safetensors tensor '", entry.name,
                "' is added twice; tensor names must be unique");
    header.push_back(HeaderEntry{&entry.name, entry.dtype, &entry.shape, size});
  }
  const std::string text = header_text(header, metadata);
  uint8_t length[kLengthBytes];
  store_u64_le(text.size(), length);
  file_.append(length, kLengthBytes);
  file_.append(text.data(), text.size());
  uint64_t offset = kLengthBytes + text.size();
  for (const HeaderEntry& entry : header) {
    slots_[*entry.name].offset = offset;
    offset += entry.size_bytes;
  }
  file_bytes_ = offset;
}

void SafetensorsStreamWriter::write(const std::string& name, const void* bytes, size_t size_bytes) {
  auto it = slots_.find(name);
  PSTAR_CHECK(it != slots_.end(), ConfigError, "safetensors tensor '", name,
              "' is not in the header given to the writer");
  Slot& slot = it->second;
  PSTAR_CHECK(!slot.written, ConfigError, "safetensors tensor '", name,
              "' is written twice; each tensor is written once");
  PSTAR_CHECK(size_bytes == slot.size_bytes, ConfigError, "safetensors tensor '", name, "' got ",
              size_bytes, " bytes, but its header entry needs ", slot.size_bytes, " bytes");
  file_.write_at(slot.offset, bytes, size_bytes);
  slot.written = true;
}

void SafetensorsStreamWriter::commit() {
  for (const auto& [name, slot] : slots_) {
    PSTAR_CHECK(slot.written, ConfigError, "safetensors file '", file_.path(), "': tensor '", name,
                "' was never written; every tensor in the header needs its bytes");
  }
  // Zero-sized tensors at the end write nothing: the file must still reach its full length.
  if (file_.size_bytes() < file_bytes_) file_.write_at(file_bytes_, nullptr, 0);
  file_.commit();
}

}  // namespace pstar::formats
