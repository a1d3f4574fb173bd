// BPE tokenizers as Hugging Face's `tokenizers` runs them: byte-level (GPT-2, Llama 3, Qwen) or
// over code points with byte fallback (Gemma), from a `tokenizer.json`, or GPT-2's `vocab.json` +
// `merges.txt` folder form (text/README.md lists what is supported).
//
// Note [whole-text equivalence]
// encode(text) equals Hugging Face's `encode(text, add_special_tokens=False).ids` for the whole
// text at once. StreamEncoder gives the same ids for the same text fed in pieces of any size, cut
// anywhere (even inside a UTF-8 character): each stage keeps back what a later piece could still
// change and processes only what it cannot:
//   - added tokens: a tail that is the start of an added token, or a match a longer one could
//     still extend;
//   - NFC: everything after the last ASCII byte (ASCII never composes with what comes before);
//   - Replace of a string: a tail that may be the start of the string (its length - 1 bytes);
//   - the first pre-tokenizer's regex: runs with PCRE2's hard partial matching, so a match or a
//     gap whose extent depends on text not yet seen is reported as such; the last piece the
//     split behaviour produced is kept too, since the next match may still merge into it;
//   - a first pre-tokenizer without a regex keeps the whole segment (nothing can be cut).
// The text between two added tokens, or a document, is a "segment": HF pre-tokenizes each on its
// own, so StreamEncoder::finish() (end of document) and an added token end one.
//
// Note [token offsets]
// BPE loses nothing: the token texts of encode(text) (token_text: bytes for byte-level entries,
// the entry's text for code-point ones, the byte for a byte-fallback <0xNN>, content for added
// tokens), one after another, spell normalize(text) exactly, so token i covers
// the bytes [sum of the lengths before it, that + its length) of normalize(text). Without a
// normalizer that is the text itself; with NFC or Replace (Gemma's " " -> "▁"), a position in the
// text maps to one in normalize(text) by normalizing the pieces on either side apart, which is
// exact when no character composes and no replaced string lies across the cut (text/records.h
// checks that the pieces spell the token texts and refuses the record otherwise). What breaks the
// spelling (a ByteLevel add_prefix_space, an unknown byte or character fused into an unk token) is
// found by that check, never silently mis-aligned.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pstar::text {

class TokenizerImpl;

class Tokenizer {
 public:
  // `path`: a tokenizer.json file, a folder holding one, or a folder holding GPT-2's vocab.json
  // and merges.txt. A tokenizer_config.json beside either names the begin/end tokens (bos_token,
  // eos_token). Throws IoError when a file cannot be read, FormatError naming the component (and
  // its "type") when the file is malformed or uses something pstar does not support.
  static Tokenizer load(const std::string& path);
  // The same from the text of a tokenizer.json (tests); `origin` names it in error messages.
  static Tokenizer from_json(std::string_view json, const std::string& origin);
  // The ids pstar's byte-level runs train on (data.text without data.tokenizer): each byte of the
  // UTF-8 text its own id, 0 to 255, and decode() those bytes back to text (Note [decoding]).
  static Tokenizer bytes();

  // HF's encode(text, add_special_tokens=False).ids. `text` must be UTF-8 (FormatError naming
  // the byte offset otherwise).
  std::vector<uint32_t> encode(std::string_view text) const;

  // Largest id (of the model's vocabulary and the added tokens) + 1. Ids above 16777215 are
  // refused when loading (FormatError), so this is at most 2^24.
  int64_t vocab_size() const;
  // The begin/end-of-text tokens: from tokenizer_config.json when present, else the added special
  // token conventionally used (<|endoftext|> for both, <|begin_of_text|>/<|end_of_text|>,
  // <s>/</s>); nullopt when there is none.
  std::optional<uint32_t> bos_id() const;
  std::optional<uint32_t> eos_id() const;
  // The id of an added token or a vocabulary entry (its text as it appears in the file); nullopt
  // when absent.
  std::optional<uint32_t> token_id(std::string_view token) const;
  // The token's text (its bytes for BPE entries, the content for added tokens); "" for an id
  // without one. Valid as long as the tokenizer.
  const std::string& token_text(uint32_t id) const;
  // Whether the id is an added token marked special (<|eot_id|>, <|im_end|>, ...).
  bool is_special(uint32_t id) const;
  // The token Hugging Face's encode(text, add_special_tokens=True) puts before the text: the
  // special token that begins the post_processor's TemplateProcessing "single" template (Llama
  // 3.1's <|begin_of_text|>); nullopt when the post-processor adds none (GPT-2, Qwen2).
  std::optional<uint32_t> prefix_id() const;
  // The text as the tokenizer's normalizer leaves it, which is what the ids' token texts spell
  // (Note [token offsets]): the same text without a normalizer; else each stretch between added
  // tokens matched on the raw text normalized (NFC, Replace), as encode() does. `text` must be
  // UTF-8.
  std::string normalize(std::string_view text) const;
  // Hugging Face's decode(ids, skip_special_tokens=skip_special, clean_up_tokenization_spaces=
  // False), through tokenizer.json's decoder (Note [decoding] in src/decode.cpp: ByteLevel,
  // Replace, ByteFallback, Fuse, Strip): the text, each invalid UTF-8 sequence one U+FFFD. Ids the
  // tokenizer does not have are left out. FormatError naming the decoder's type when it is one
  // pstar does not run (Metaspace, WordPiece, ...); loading and encoding never depend on it.
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special = false) const;
  // A 64-bit FNV-1a checksum (16 hex digits) of the files the tokenizer was loaded from, in a fixed
  // order: the key a token cache of a text file needs besides the text's own checksum.
  const std::string& fingerprint() const;
  // One line for logs: the form, the path, the vocabulary size and the pipeline.
  const std::string& description() const;

  const TokenizerImpl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const TokenizerImpl> impl_;
};

// Encodes one document fed in pieces (Note [whole-text equivalence]). Not thread-safe; use one
// per thread. The tokenizer must outlive it.
class StreamEncoder {
 public:
  explicit StreamEncoder(const Tokenizer& tokenizer);
  ~StreamEncoder();
  StreamEncoder(const StreamEncoder&) = delete;
  StreamEncoder& operator=(const StreamEncoder&) = delete;

  // Appends to `out` the ids that no later piece can change.
  void feed(std::string_view piece, std::vector<uint32_t>& out);
  // Ends the document: appends the remaining ids. The encoder is then ready for the next one.
  void finish(std::vector<uint32_t>& out);
  // Bytes fed but not yet turned into ids (kept back for a later piece).
  size_t pending_bytes() const;

 private:
  class Pipeline;
  std::unique_ptr<Pipeline> pipeline_;
};

// Decodes ids as they come (Note [decoding]): each feed gives the text no later id can change,
// never a part of a character; those pieces and finish()'s are decode(ids) exactly.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string feed(uint32_t id);
  // The rest of the text; the decoder then starts again.
  std::string finish();

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::vector<uint32_t> ids_;
  size_t emitted_ = 0;  // bytes of the decode given out
};

}  // namespace pstar::text
