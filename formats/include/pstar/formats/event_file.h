// TensorBoard event files (`events.out.tfevents.*`): the few protobuf messages pstar writes,
// encoded by hand, in TFRecord framing, appended to a file that TensorBoard reads while it grows.
//
// Note [event file]
// An event file is a sequence of records, each
//
//   uint64 length | uint32 masked CRC-32C of those 8 bytes | payload | uint32 masked CRC-32C of it
//
// (little-endian; CRC-32C is the Castagnoli polynomial, and "masked" is ((c >> 15) | (c << 17)) +
// 0xa282ead8, so that a CRC of data holding CRCs is not trivially related to them). Each payload
// is a serialized `Event` message (tensorboard/compat/proto/event.proto): wall_time (double, field
// 1), step (int64, 2), and one of file_version (string, 3), summary (Summary, 5) or session_log
// (SessionLog, 7). The first record holds file_version "brain.Event:2". A Summary is repeated
// Value (field 1); a Value has tag (string, 1) and simple_value (float, 2) for a scalar, or, for
// TensorBoard's text plugin, metadata (SummaryMetadata, 9: plugin_data (1) with plugin_name (1)
// "text", data_class (4) DATA_CLASS_TENSOR = 2) and tensor (TensorProto, 8: dtype (1) DT_STRING =
// 7, tensor_shape (2) empty for a scalar, string_val (8)). SessionLog's status (1) START = 1 tells
// TensorBoard that a run restarted at that step, so that what an earlier file holds from that step
// on is dropped from the view (a run resumed from an older checkpoint than its last step).
//
// The field numbers were checked against the .proto files of tensorflow/tensorboard; nothing of
// them is copied here. Protobuf readers accept fields in any order and a zero written out, which
// proto3 writers would omit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pstar/formats/file_guard.h"

namespace pstar::formats {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of `size` bytes, continuing `crc` (the
// CRC of the bytes before them; 0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// Note [event file]: the CRC as TFRecord stores it.
uint32_t masked_crc32c(const void* data, size_t size);

// One record around `payload` (Note [event file]).
std::string tfrecord(std::string_view payload);

// Event payloads (serialized `Event` messages).
struct EventScalar {
  std::string tag;
  float value = 0;
};
std::string file_version_event(double wall_time);
// One Summary holding every scalar of `values`, at `step`.
std::string scalars_event(double wall_time, int64_t step, const std::vector<EventScalar>& values);
// One text-plugin value: `text` (markdown) under `tag`, at `step`.
std::string text_event(double wall_time, int64_t step, std::string_view tag, std::string_view text);
// SessionLog START at `step` (Note [event file]).
std::string session_start_event(double wall_time, int64_t step);

// The name TensorBoard looks for: "events.out.tfevents.<seconds>.<host>.pstar.<pid>".
std::string event_file_name(int64_t unix_seconds, std::string_view host, int64_t pid);

// A new event file in a directory, written by appending records. Records are queued in memory
// and written by flush(), so that a step costs no system call; TensorBoard sees what was flushed.
class EventFileWriter {
 public:
  // Creates `dir` (with its parents) and a new event file in it (a name no other writer took:
  // a suffix ".1", ".2", ... after a name that exists), and writes its first record, the file
  // version, at once. IoError naming `what` (the key or option that gave the directory), the
  // directory and the reason.
  EventFileWriter(const std::string& dir, std::string_view what);
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;
  // Does not flush: whoever owns the writer decides what a failure then means.
  ~EventFileWriter() = default;

  // Queues one record holding `event` (an Event payload from the functions above).
  void add(std::string_view event);
  // Writes the queued records. On a failure the file is cut back to its last whole record, so
  // that it stays readable and later records can follow, the queued records are dropped, and
  // IoError names the file, the records lost and the reason.
  void flush();
  int64_t queued_records() const { return queued_records_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;
  uint64_t written_bytes_ = 0;  // whole records in the file
  std::string queued_;
  int64_t queued_records_ = 0;
};

}  // namespace pstar::formats
