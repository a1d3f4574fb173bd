// Record files: token records (conversations, prompt/completion pairs, documents) whose every
// token says whether it counts in the loss, with the source line of each record and a metadata
// text; what data.jsonl is tokenized into (text/records.h) and the engine's record sampler reads.
//
// Note [record file]
// Little-endian throughout; sections in this order, each starting at a multiple of 8 bytes:
//   header (64 bytes):
//     0  magic "PSTARREC"                     8 bytes
//     8  version (1)                          uint32
//     12 header bytes (64)                    uint32
//     16 records R                            uint64
//     24 tokens T                             uint64
//     32 metadata bytes M                     uint64
//     40 payload bytes (the file size - 64)   uint64
//     48 CRC-32 of the payload                uint32
//     52 zero                                 8 bytes
//     60 CRC-32 of header bytes [0, 60)       uint32
//   payload:
//     tokens    T uint32, zero-padded to 8 bytes: the id in bits 0-23 (pstar's tokenizers keep ids
//               below 2^24), bit 31 set when the token counts in the loss, bits 24-30 zero
//     offsets   R + 1 uint64: record r is tokens [offsets[r], offsets[r + 1]); offsets[0] = 0,
//               non-decreasing, offsets[R] = T
//     lines     R uint64: the 1-based line of the source each record came from
//     metadata  M bytes (UTF-8; JSON by convention), zero-padded to 8
// The reader checks the header's CRC, that the sizes agree with each other and with the file, and
// the payload's CRC before it reads any other byte; then that the offsets are in order and every
// token has its reserved bits clear. A damaged or truncated file is a FormatError naming it, never
// records read from garbage. Files are written atomically (Note [publish by rename] in
// file_guard.h), so a reader sees a whole file or none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pstar/formats/mapped_file.h"

namespace pstar::formats {

// A token of a record file: the id and the "counts in the loss" flag in one uint32.
constexpr uint32_t kRecordLossBit = 1u << 31;
constexpr uint32_t kRecordIdLimit = 1u << 24;  // ids are below this
inline uint32_t record_token(uint32_t id, bool counts) {
  return id | (counts ? kRecordLossBit : 0);
}
inline uint32_t record_token_id(uint32_t token) { return token & (kRecordIdLimit - 1); }
inline bool record_token_counts(uint32_t token) { return (token & kRecordLossBit) != 0; }

class RecordFile {
 public:
  // Maps and checks the whole file (Note [record file]). IoError when it cannot be read,
  // FormatError naming the path and what is wrong otherwise.
  explicit RecordFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  int64_t records() const { return records_; }
  int64_t tokens() const { return tokens_; }
  // Tokens in record r (0 <= r < records()).
  int64_t size(int64_t r) const { return offset(r + 1) - offset(r); }
  // Where record r starts among all tokens.
  int64_t offset(int64_t r) const;
  // Token k of record r (id and flag, see record_token_id / record_token_counts).
  uint32_t at(int64_t r, int64_t k) const;
  // Copies tokens [begin, begin + count) of record r into out.
  void read(int64_t r, int64_t begin, int64_t count, uint32_t* out) const;
  // The source line record r came from (1-based).
  int64_t line(int64_t r) const;
  const std::string& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  int64_t records_ = 0, tokens_ = 0;
  const uint8_t* tokens_at_ = nullptr;
  const uint8_t* offsets_at_ = nullptr;
  const uint8_t* lines_at_ = nullptr;
  std::string metadata_;
};

// Writes a record file record by record, so that it never has to be in memory whole; through
// AtomicFileWriter, so nothing is published before commit() and an error on the way leaves
// `path` as it was. The tokens go to the file as they come; offsets and lines are kept (16 bytes a
// record) until commit().
class RecordFileWriter {
 public:
  explicit RecordFileWriter(const std::string& path);
  // One record of tokens made with record_token(); `line` is its 1-based source line. FormatError
  // naming the record when a token has reserved bits set (an id of 2^24 or more).
  void add(const uint32_t* tokens, size_t count, int64_t line);
  void add(const std::vector<uint32_t>& tokens, int64_t line) {
    add(tokens.data(), tokens.size(), line);
  }
  int64_t records() const { return static_cast<int64_t>(lines_.size()); }
  int64_t tokens() const { return static_cast<int64_t>(offsets_.back()); }
  // Writes the tables, `metadata` and the header, then publishes the file.
  void commit(const std::string& metadata);

 private:
  void append(const void* bytes, size_t size);

  AtomicFileWriter writer_;
  uint32_t crc_ = 0;
  std::vector<uint64_t> offsets_{0};
  std::vector<uint64_t> lines_;
  std::vector<uint8_t> buffer_;
};

}  // namespace pstar::formats
