// Record files (Note [record file] in record_file.h).
#include "pstar/formats/record_file.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "pstar/base/error.h"

namespace pstar::formats {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'T', 'A', 'R', 'R', 'E', 'C'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 64;
constexpr size_t kHeaderCrcAt = 60;  // the header's own CRC covers the bytes before it

// zlib's crc32 takes a uInt length: feed it in pieces below that.
uint32_t crc32_update(uint32_t crc, const uint8_t* data, size_t size) {
  uLong c = crc;
  while (size > 0) {
    const auto n = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    c = ::crc32(c, data, n);
    data += n;
    size -= n;
  }
  return static_cast<uint32_t>(c);
}

// Byte-wise little-endian loads and stores: the layout is the same on any host, and they compile
// to one load or store on x86 and ARM.
uint64_t load_le(const uint8_t* p, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void store_le(uint8_t* p, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t padded8(uint64_t bytes) { return (bytes + 7) / 8 * 8; }

}  // namespace

RecordFile::RecordFile(const std::string& path) : file_(path) {
  const uint8_t* p = file_.data();
  const size_t size = file_.size();
  const std::string where = "record file '" + path + "'";
  PSTAR_CHECK(size >= kHeaderBytes, FormatError, where, " is ", size,
              " bytes, shorter than its 64-byte header; it is truncated or not a record file");
  PSTAR_CHECK(std::memcmp(p, kMagic, sizeof kMagic) == 0, FormatError, where,
              " does not start with \"PSTARREC\"; it is not a pstar record file");
  const auto header_crc = static_cast<uint32_t>(load_le(p + kHeaderCrcAt, 4));
  PSTAR_CHECK(crc32_update(0, p, kHeaderCrcAt) == header_crc, FormatError, where,
              ": its header fails its CRC-32; the file is damaged (delete it: a record cache is "
              "made again from its source)");
  const auto version = static_cast<uint32_t>(load_le(p + 8, 4));
  PSTAR_CHECK(version == kVersion, FormatError, where, " has version ", version,
              "; this pstar reads version ", kVersion, " (made again from its source if deleted)");
  PSTAR_CHECK(load_le(p + 12, 4) == kHeaderBytes, FormatError, where, " has a header of ",
              load_le(p + 12, 4), " bytes, not 64");
  const uint64_t records = load_le(p + 16, 8);
  const uint64_t tokens = load_le(p + 24, 8);
  const uint64_t metadata = load_le(p + 32, 8);
  const uint64_t payload = load_le(p + 40, 8);
  PSTAR_CHECK(payload == size - kHeaderBytes, FormatError, where, " is ", size,
              " bytes but its header says ", payload, " bytes follow the 64-byte header; the file ",
              payload > size - kHeaderBytes ? "is truncated" : "has bytes after its end");
  // Every count is bounded by the file's size before any multiplication can overflow.
  const uint64_t limit = size;
  PSTAR_CHECK(records < limit && tokens < limit && metadata < limit, FormatError, where,
              ": its header counts (", records, " records, ", tokens, " tokens, ", metadata,
              " metadata bytes) cannot fit its ", size, " bytes");
  const uint64_t token_bytes = padded8(tokens * 4);
  const uint64_t table_bytes = (records + 1) * 8 + records * 8;
  PSTAR_CHECK(token_bytes + table_bytes + padded8(metadata) == payload, FormatError, where,
              ": its header counts (", records, " records, ", tokens, " tokens, ", metadata,
              " metadata bytes) need ", token_bytes + table_bytes + padded8(metadata),
              " payload bytes, but it has ", payload);
  const auto payload_crc = static_cast<uint32_t>(load_le(p + 48, 4));
  PSTAR_CHECK(crc32_update(0, p + kHeaderBytes, payload) == payload_crc, FormatError, where,
              ": its payload fails its CRC-32; the file is damaged (delete it: a record cache is "
              "made again from its source)");

  records_ = static_cast<int64_t>(records);
  tokens_ = static_cast<int64_t>(tokens);
  tokens_at_ = p + kHeaderBytes;
  offsets_at_ = tokens_at_ + token_bytes;
  lines_at_ = offsets_at_ + (records + 1) * 8;
  metadata_.assign(reinterpret_cast<const char*>(lines_at_ + records * 8), metadata);
  // The CRC says the bytes are those written; these say the writer was pstar's.
  PSTAR_CHECK(load_le(offsets_at_, 8) == 0 && load_le(offsets_at_ + records * 8, 8) == tokens,
              FormatError, where, ": its offsets do not run from 0 to its ", tokens, " tokens");
  for (uint64_t r = 0; r < records; ++r) {
    PSTAR_CHECK(load_le(offsets_at_ + r * 8, 8) <= load_le(offsets_at_ + (r + 1) * 8, 8),
                FormatError, where, ": the offset of record ", r + 1, " is below record ", r, "'s");
  }
  for (uint64_t t = 0; t < tokens; ++t) {
    const auto token = static_cast<uint32_t>(load_le(tokens_at_ + t * 4, 4));
    PSTAR_CHECK((token & ~(kRecordLossBit | (kRecordIdLimit - 1))) == 0, FormatError, where,
                ": token ", t, " (", token, ") has reserved bits set");
  }
}

int64_t RecordFile::offset(int64_t r) const {
  PSTAR_INTERNAL_ASSERT(r >= 0 && r <= records_, "record ", r, " of ", records_, " in ", path());
  return static_cast<int64_t>(load_le(offsets_at_ + static_cast<size_t>(r) * 8, 8));
}

uint32_t RecordFile::at(int64_t r, int64_t k) const {
  PSTAR_INTERNAL_ASSERT(k >= 0 && k < size(r), "token ", k, " of record ", r, " in ", path());
  return static_cast<uint32_t>(load_le(tokens_at_ + static_cast<size_t>(offset(r) + k) * 4, 4));
}

void RecordFile::read(int64_t r, int64_t begin, int64_t count, uint32_t* out) const {
  PSTAR_INTERNAL_ASSERT(begin >= 0 && count >= 0 && begin + count <= size(r), "tokens [", begin,
                        ", ", begin + count, ") of record ", r, " in ", path());
  const uint8_t* p = tokens_at_ + static_cast<size_t>(offset(r) + begin) * 4;
  for (int64_t k = 0; k < count; ++k) out[k] = static_cast<uint32_t>(load_le(p + k * 4, 4));
}

int64_t RecordFile::line(int64_t r) const {
  PSTAR_INTERNAL_ASSERT(r >= 0 && r < records_, "record ", r, " of ", records_, " in ", path());
  return static_cast<int64_t>(load_le(lines_at_ + static_cast<size_t>(r) * 8, 8));
}

RecordFileWriter::RecordFileWriter(const std::string& path) : writer_(path) {
  // The header is written last, over these zeros, once its counts and CRCs are known.
  const uint8_t zeros[kHeaderBytes] = {};
  writer_.append(zeros, sizeof zeros);
}

void RecordFileWriter::append(const void* bytes, size_t size) {
  crc_ = crc32_update(crc_, static_cast<const uint8_t*>(bytes), size);
  writer_.append(bytes, size);
}

void RecordFileWriter::add(const uint32_t* tokens, size_t count, int64_t line) {
  buffer_.resize(count * 4);
  for (size_t i = 0; i < count; ++i) {
    PSTAR_CHECK((tokens[i] & ~(kRecordLossBit | (kRecordIdLimit - 1))) == 0, FormatError,
                "cannot write record file '", writer_.path(), "': token ", i, " of record ",
                records() + 1, " (line ", line, ") has id ", tokens[i] & ~kRecordLossBit,
                ", not below 2^24");
    store_le(buffer_.data() + i * 4, tokens[i], 4);
  }
  append(buffer_.data(), buffer_.size());
  offsets_.push_back(offsets_.back() + count);
  lines_.push_back(static_cast<uint64_t>(line));
}

void RecordFileWriter::commit(const std::string& metadata) {
  const uint64_t tokens = offsets_.back();
  const uint64_t records = lines_.size();
  const uint8_t zeros[8] = {};
  append(zeros, padded8(tokens * 4) - tokens * 4);
  std::vector<uint8_t> table((offsets_.size() + lines_.size()) * 8);
  for (size_t i = 0; i < offsets_.size(); ++i) store_le(table.data() + i * 8, offsets_[i], 8);
  for (size_t i = 0; i < lines_.size(); ++i)
    store_le(table.data() + (offsets_.size() + i) * 8, lines_[i], 8);
  append(table.data(), table.size());
  append(metadata.data(), metadata.size());
  append(zeros, padded8(metadata.size()) - metadata.size());

  uint8_t header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof kMagic);
  store_le(header + 8, kVersion, 4);
  store_le(header + 12, kHeaderBytes, 4);
  store_le(header + 16, records, 8);
  store_le(header + 24, tokens, 8);
  store_le(header + 32, metadata.size(), 8);
  store_le(header + 40, writer_.size_bytes() - kHeaderBytes, 8);
  store_le(header + 48, crc_, 4);
  store_le(header + kHeaderCrcAt, crc32_update(0, header, kHeaderCrcAt), 4);
  writer_.write_at(0, header, sizeof header);
  writer_.commit();
}

}  // namespace pstar::formats
