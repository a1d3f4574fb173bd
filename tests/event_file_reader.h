// A reader of TensorBoard event files for the C++ tests (Note [event file] in
// pstar/formats/event_file.h): splits the records, checks both CRCs of each, and decodes the
// protobuf fields the tests look at. Apart from formats::masked_crc32c (tested against known
// vectors) it shares no code with the writer; tests/cmd/tensorboard_reader.py is the reader that
// shares none at all.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "pstar/formats/event_file.h"
#include "test_util.h"

namespace pstar::testing {

// One field of a protobuf message: its number, wire type, and value (varint, or the raw bytes of a
// fixed-width or length-delimited field).
struct ProtoField {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t varint = 0;
  std::string bytes;
};

// The fields of `data`, in order; a malformed message fails the test.
inline std::vector<ProtoField> decode_message(std::string_view data) {
  std::vector<ProtoField> fields;
  size_t at = 0;
  auto varint = [&](uint64_t* out) {
    *out = 0;
    for (int shift = 0; shift < 64 && at < data.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(data[at++]);
      *out |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  };
  while (at < data.size()) {
    uint64_t key = 0;
    if (!varint(&key)) {
      ADD_FAILURE() << "a field key runs past the message";
      return fields;
    }
    ProtoField f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    size_t size = 0;
    switch (f.wire) {
      case 0:
        if (!varint(&f.varint)) ADD_FAILURE() << "field " << f.number << ": a varint runs past";
        fields.push_back(f);
        continue;
      case 1:
        size = 8;
        break;
      case 5:
        size = 4;
        break;
      case 2: {
        uint64_t n = 0;
        if (!varint(&n)) ADD_FAILURE() << "field " << f.number << ": no length";
        size = static_cast<size_t>(n);
        break;
      }
      default:
        ADD_FAILURE() << "field " << f.number << ": wire type " << f.wire;
        return fields;
    }
    if (size > data.size() - at) {
      ADD_FAILURE() << "field " << f.number << " runs past the message";
      return fields;
    }
    f.bytes = std::string(data.substr(at, size));
    at += size;
    fields.push_back(std::move(f));
  }
  return fields;
}

// What the tests read of one Event.
struct ReadEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;
  std::vector<std::pair<std::string, std::string>> texts;  // text-plugin values: tag, text
  bool session_start = false;
};

inline ReadEvent decode_event(std::string_view payload) {
  ReadEvent e;
  for (const ProtoField& f : decode_message(payload)) {
    if (f.number == 1 && f.wire == 1) std::memcpy(&e.wall_time, f.bytes.data(), 8);
    if (f.number == 2 && f.wire == 0) e.step = static_cast<int64_t>(f.varint);
    if (f.number == 3 && f.wire == 2) e.file_version = f.bytes;
    if (f.number == 7 && f.wire == 2)
      for (const ProtoField& s : decode_message(f.bytes))
        e.session_start |= s.number == 1 && s.varint == 1;
    if (f.number != 5 || f.wire != 2) continue;
    for (const ProtoField& v : decode_message(f.bytes)) {  // Summary.value
      std::string tag, text;
      bool scalar = false;
      float value = 0;
      for (const ProtoField& vf : decode_message(v.bytes)) {
        if (vf.number == 1) tag = vf.bytes;
        if (vf.number == 2 && vf.wire == 5) {
          std::memcpy(&value, vf.bytes.data(), 4);
          scalar = true;
        }
        if (vf.number == 8)  // TensorProto.string_val
          for (const ProtoField& t : decode_message(vf.bytes))
            if (t.number == 8) text = t.bytes;
      }
      if (scalar)
        e.scalars.emplace_back(tag, value);
      else
        e.texts.emplace_back(tag, text);
    }
  }
  return e;
}

// The records of an event file, each checked; a bad CRC or a partial record fails the test.
inline std::vector<std::string> read_records(const std::string& path) {
  const std::string data = read_text(path);
  std::vector<std::string> out;
  auto le = [&](size_t at, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(data[at + i])) << (8 * i);
    return v;
  };
  size_t at = 0;
  while (at < data.size()) {
    if (data.size() - at < 12) {
      ADD_FAILURE() << path << ": " << data.size() - at << " bytes after the last record";
      break;
    }
    const uint64_t length = le(at, 8);
    EXPECT_EQ(le(at + 8, 4), formats::masked_crc32c(data.data() + at, 8))
        << path << ": length CRC at " << at;
    if (data.size() - at - 12 < length + 4) {
      ADD_FAILURE() << path << ": the record at " << at << " is cut short";
      break;
    }
    const std::string payload = data.substr(at + 12, length);
    EXPECT_EQ(le(at + 12 + length, 4), formats::masked_crc32c(payload.data(), payload.size()))
        << path << ": payload CRC at " << at;
    out.push_back(payload);
    at += 16 + length;
  }
  return out;
}

inline std::vector<ReadEvent> read_events(const std::string& path) {
  std::vector<ReadEvent> events;
  for (const std::string& r : read_records(path)) events.push_back(decode_event(r));
  return events;
}

}  // namespace pstar::testing
