#include "pstar/text/documents.h"

#include <string_view>

#include "pstar/base/error.h"
#include "pstar/formats/mapped_file.h"

namespace pstar::text {

TokenizeProgress tokenize_files(const Tokenizer& tokenizer, const std::vector<std::string>& inputs,
                                const DocumentOptions& options,
                                const std::function<void(const std::vector<uint32_t>&)>& sink,
                                const std::function<void(const TokenizeProgress&)>& progress) {
  PSTAR_CHECK(!options.bos || tokenizer.bos_id(), ConfigError,
              "a begin-of-text token was asked for, but the tokenizer (", tokenizer.description(),
              ") has none: no bos_token in a tokenizer_config.json beside it and none of the "
              "special tokens <|endoftext|>, <|begin_of_text|>, <s>");
  PSTAR_CHECK(!options.eos || tokenizer.eos_id(), ConfigError,
              "an end-of-text token was asked for, but the tokenizer (", tokenizer.description(),
              ") has none: no eos_token in a tokenizer_config.json beside it and none of the "
              "special tokens <|endoftext|>, <|end_of_text|>, </s>");
  PSTAR_CHECK(options.piece_bytes > 0, ConfigError, "piece_bytes must be positive");
  std::vector<formats::MappedFile> files;
  files.reserve(inputs.size());
  TokenizeProgress state;
  for (const auto& path : inputs) {
    files.emplace_back(path);
    state.bytes_total += files.back().size();
  }

  StreamEncoder encoder(tokenizer);
  std::vector<uint32_t> ids;
  auto deliver = [&] {
    state.tokens += ids.size();
    if (!ids.empty()) sink(ids);
    ids.clear();
  };
  for (const auto& file : files) {
    const std::string_view all(reinterpret_cast<const char*>(file.data()), file.size());
    size_t doc_begin = 0;
    while (doc_begin <= all.size()) {
      size_t doc_end =
          options.doc_sep.empty() ? std::string_view::npos : all.find(options.doc_sep, doc_begin);
      const bool last = doc_end == std::string_view::npos;
      if (last) doc_end = all.size();
      const std::string_view doc = all.substr(doc_begin, doc_end - doc_begin);
      if (!doc.empty()) {
        ++state.documents;
        if (options.bos) ids.push_back(*tokenizer.bos_id());
        try {
          for (size_t pos = 0; pos < doc.size(); pos += options.piece_bytes) {
            encoder.feed(doc.substr(pos, options.piece_bytes), ids);
            state.bytes_done = state.bytes_done + std::min(options.piece_bytes, doc.size() - pos);
            deliver();
            if (progress) progress(state);
          }
          encoder.finish(ids);
        } catch (const FormatError& e) {
          // The encoder counts bytes from the document's start; name the file and the offset in
          // it.
          PSTAR_THROW(FormatError, "'", file.path(), "', document starting at byte ", doc_begin,
                      ": ", e.what());
        }
        if (options.eos) ids.push_back(*tokenizer.eos_id());
        deliver();
      }
      if (last) break;
      state.bytes_done += options.doc_sep.size();
      doc_begin = doc_end + options.doc_sep.size();
    }
  }
  if (progress) progress(state);
  return state;
}

}  // namespace pstar::text
