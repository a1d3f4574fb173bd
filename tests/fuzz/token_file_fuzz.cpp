// Fuzz target: token data files (pstar::formats::TokenFile), read as uint16 and as uint32. The
// input is the file.
//
// Beyond "only FormatError or IoError, naming the file": the token count matches the file size,
// max_token() and find_token_at_least() agree with a plain scan through at(), and every id lies
// inside the mapping (all are read).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "fuzz_util.h"
#include "pstar/formats/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstar;
  using formats::TokenDType;
  static fuzz::MemFile file("tokens");
  const std::string& path = file.write(data, size);
  for (TokenDType dtype : {TokenDType::kU16, TokenDType::kU32}) {
    fuzz::expect_typed_errors(path, {ErrorKind::kFormat, ErrorKind::kIo}, [&] {
      const formats::TokenFile tokens(path, dtype);
      const int64_t n = tokens.size();
      if (static_cast<uint64_t>(n) * formats::token_dtype_size(dtype) != size) {
        fuzz::finding(str_cat(n, " tokens do not make up the ", size, "-byte file"));
      }
      uint32_t max = 0;
      int64_t first_max = n > 0 ? 0 : -1;
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t token = tokens.at(i);
        if (token > max) {
          max = token;
          first_max = i;
        }
      }
      if (tokens.max_token() != max) fuzz::finding("max_token() disagrees with a scan");
      if (tokens.find_token_at_least(max) != first_max) {
        fuzz::finding("find_token_at_least(max) is not the first largest token");
      }
      if (max < std::numeric_limits<uint32_t>::max() && tokens.find_token_at_least(max + 1) != -1) {
        fuzz::finding("find_token_at_least(max + 1) found a token");
      }
    });
  }
  // The dtype name a config gives (data.dtype) is outside input too.
  fuzz::expect_typed_errors("fuzz data.dtype", {ErrorKind::kConfig}, [&] {
    formats::parse_token_dtype(std::string(reinterpret_cast<const char*>(data), size),
                               "fuzz data.dtype");
  });
  return 0;
}
