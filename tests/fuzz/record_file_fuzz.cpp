// Fuzz target: record files (pstar::formats::RecordFile, Note [record file]). The input is the
// file.
//
// Beyond "only FormatError or IoError, naming the file": an accepted file's records tile its
// tokens (offsets from 0 to tokens(), each record's size what its offsets say), every token has
// its reserved bits clear, every line and the metadata are readable, and the records written back
// by RecordFileWriter read back the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "pstar/formats/record_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstar;
  static fuzz::MemFile file("records");
  static fuzz::ScratchDir dir;
  const std::string& path = file.write(data, size);
  fuzz::expect_typed_errors(path, {ErrorKind::kFormat, ErrorKind::kIo}, [&] {
    const formats::RecordFile records(path);
    int64_t total = 0;
    std::vector<std::vector<uint32_t>> all;
    std::vector<int64_t> lines;
    for (int64_t r = 0; r < records.records(); ++r) {
      if (records.offset(r) != total) fuzz::finding("records do not tile the tokens");
      std::vector<uint32_t> tokens(static_cast<size_t>(records.size(r)));
      records.read(r, 0, records.size(r), tokens.data());
      for (size_t k = 0; k < tokens.size(); ++k) {
        if ((tokens[k] & ~(formats::kRecordLossBit | (formats::kRecordIdLimit - 1))) != 0)
          fuzz::finding("a token with reserved bits set was accepted");
        if (records.at(r, static_cast<int64_t>(k)) != tokens[k])
          fuzz::finding("at() disagrees with read()");
      }
      total += records.size(r);
      lines.push_back(records.line(r));
      all.push_back(std::move(tokens));
    }
    if (total != records.tokens()) fuzz::finding("the records' sizes do not add up to tokens()");
    // Written back, the same records, lines and metadata.
    const std::string copy = dir.file("copy.records");
    formats::RecordFileWriter writer(copy);
    for (size_t r = 0; r < all.size(); ++r) writer.add(all[r], lines[r]);
    writer.commit(records.metadata());
    const formats::RecordFile again(copy);
    if (again.records() != records.records() || again.metadata() != records.metadata())
      fuzz::finding("written back, the file reads back otherwise");
    for (int64_t r = 0; r < again.records(); ++r) {
      std::vector<uint32_t> tokens(static_cast<size_t>(again.size(r)));
      again.read(r, 0, again.size(r), tokens.data());
      if (tokens != all[static_cast<size_t>(r)] || again.line(r) != lines[static_cast<size_t>(r)])
        fuzz::finding("written back, a record reads back otherwise");
    }
  });
  return 0;
}
