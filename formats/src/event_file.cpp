// TensorBoard event files (Note [event file] in pstar/formats/event_file.h).
#include "pstar/formats/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "pstar/base/error.h"

namespace pstar::formats {

namespace fs = std::filesystem;

namespace {

// One table of the byte-at-a-time CRC, built at compile time: event files are a few kilobytes per
// step, so neither slicing nor SSE4.2's crc32 instruction would be noticed.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) != 0 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protobuf's wire format, for the fields Note [event file] names.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void put_key(std::string* out, uint32_t field, WireType type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}

// Little-endian whatever the host's order.
void put_le(std::string* out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void put_double(std::string* out, uint32_t field, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string* out, uint32_t field, float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

// int64 and enums: a negative value as its two's complement, ten bytes.
void put_int(std::string* out, uint32_t field, int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(value));
}

// Strings, bytes and nested messages.
void put_bytes(std::string* out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

// Event's fields and the members of its oneof pstar writes.
namespace event_field {
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
}
namespace value_field {  // Summary.Value
constexpr uint32_t kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
}
constexpr uint32_t kSummaryValue = 1;        // Summary.value
constexpr uint32_t kMetadataPluginData = 1;  // SummaryMetadata.plugin_data
constexpr uint32_t kMetadataDataClass = 4;   // SummaryMetadata.data_class
constexpr int64_t kDataClassTensor = 2;      // DataClass.DATA_CLASS_TENSOR
constexpr uint32_t kPluginName = 1;          // SummaryMetadata.PluginData.plugin_name
constexpr uint32_t kTensorDtype = 1, kTensorShape = 2, kTensorStringVal = 8;  // TensorProto
constexpr int64_t kDtString = 7;                                              // DataType.DT_STRING
constexpr uint32_t kSessionStatus = 1;                                        // SessionLog.status
constexpr int64_t kSessionStart = 1;  // SessionLog.SessionStatus.START

std::string event_head(double wall_time, int64_t step) {
  std::string event;
  put_double(&event, event_field::kWallTime, wall_time);
  put_int(&event, event_field::kStep, step);
  return event;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) return "localhost";
  std::string name(host.data());
  // A file name must not hold a separator; host names never do, but a misconfigured one could.
  for (char& c : name)
    if (c == '/') c = '_';
  return name.empty() ? "localhost" : name;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view payload) {
  std::string record;
  record.reserve(payload.size() + 16);
  put_le(&record, payload.size(), 8);
  const uint32_t length_crc = masked_crc32c(record.data(), 8);
  put_le(&record, length_crc, 4);
  record.append(payload.data(), payload.size());
  put_le(&record, masked_crc32c(payload.data(), payload.size()), 4);
  return record;
}

std::string file_version_event(double wall_time) {
  std::string event = event_head(wall_time, 0);
  put_bytes(&event, event_field::kFileVersion, "brain.Event:2");
  return event;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<EventScalar>& values) {
  std::string summary;
  for (const EventScalar& scalar : values) {
    std::string value;
    put_bytes(&value, value_field::kTag, scalar.tag);
    put_float(&value, value_field::kSimpleValue, scalar.value);
    put_bytes(&summary, kSummaryValue, value);
  }
  std::string event = event_head(wall_time, step);
  put_bytes(&event, event_field::kSummary, summary);
  return event;
}

std::string text_event(double wall_time, int64_t step, std::string_view tag,
                       std::string_view text) {
  std::string plugin_data;
  put_bytes(&plugin_data, kPluginName, "text");
  std::string metadata;
  put_bytes(&metadata, kMetadataPluginData, plugin_data);
  put_int(&metadata, kMetadataDataClass, kDataClassTensor);
  std::string tensor;
  put_int(&tensor, kTensorDtype, kDtString);
  put_bytes(&tensor, kTensorShape, "");  // a scalar: no dimension
  put_bytes(&tensor, kTensorStringVal, text);
  std::string value;
  put_bytes(&value, value_field::kTag, tag);
  put_bytes(&value, value_field::kMetadata, metadata);
  put_bytes(&value, value_field::kTensor, tensor);
  std::string summary;
  put_bytes(&summary, kSummaryValue, value);
  std::string event = event_head(wall_time, step);
  put_bytes(&event, event_field::kSummary, summary);
  return event;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  put_int(&session_log, kSessionStatus, kSessionStart);
  std::string event = event_head(wall_time, step);
  put_bytes(&event, event_field::kSessionLog, session_log);
  return event;
}

std::string event_file_name(int64_t unix_seconds, std::string_view host, int64_t pid) {
  return str_cat("events.out.tfevents.", unix_seconds, ".", host, ".pstar.", pid);
}

EventFileWriter::EventFileWriter(const std::string& dir, std::string_view what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  PSTAR_CHECK(!ec, IoError, what, ": cannot create the directory ", dir, ": ", ec.message());
  const double wall_time = now_seconds();
  const std::string name = event_file_name(static_cast<int64_t>(wall_time), host_name(),
                                           static_cast<int64_t>(::getpid()));
  // O_EXCL: a run never appends to another's file, even one of the same second and process (a
  // program that trains twice).
  for (int attempt = 0;; ++attempt) {
    path_ = (fs::path(dir) / (attempt == 0 ? name : str_cat(name, ".", attempt))).string();
    fd_ = UniqueFd(open_retrying(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd_ || errno != EEXIST) break;
  }
  PSTAR_CHECK(static_cast<bool>(fd_), IoError, what, ": cannot create an event file in ", dir, ": ",
              std::strerror(errno));
  add(file_version_event(wall_time));
  flush();
}

void EventFileWriter::add(std::string_view event) {
  queued_ += tfrecord(event);
  ++queued_records_;
}

void EventFileWriter::flush() {
  if (queued_.empty()) return;
  const int64_t records = queued_records_;
  size_t done = 0;
  int error = 0;
  while (done < queued_.size()) {
    const ssize_t n = ::pwrite(fd_.get(), queued_.data() + done, queued_.size() - done,
                               static_cast<off_t>(written_bytes_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  queued_.clear();
  queued_records_ = 0;
  if (error == 0) {
    written_bytes_ += done;
    return;
  }
  // A part of a record would end the file for every reader: cut it off.
  const bool cut = ::ftruncate(fd_.get(), static_cast<off_t>(written_bytes_)) == 0;
  PSTAR_THROW(IoError, "cannot write ", path_, ": ", std::strerror(error), "; ", records,
              records == 1 ? " record" : " records", " lost",
              cut ? "" : " (and the file could not be cut back to its last whole record)");
}

}  // namespace pstar::formats
