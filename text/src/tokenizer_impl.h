// The parts of a loaded tokenizer (private to pstar_text): added tokens, normalizer,
// pre-tokenizers and the BPE model, as load.cpp builds them from the files and stream.cpp runs
// them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "regex.h"

namespace pstar::text {

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool special = false;
  bool normalized = false;
};

// Leftmost-longest matching of a set of added tokens (as Hugging Face's AddedVocabulary does with
// its Aho-Corasick automaton), over a byte trie.
class AddedTokenMatcher {
 public:
  void add(std::string_view content, uint32_t id);
  bool empty() const { return max_len_ == 0; }

  struct Found {
    size_t begin = 0, end = 0;
    uint32_t id = 0;
    bool found = false;
    // Without `final`, the search stopped at `begin` because what follows it in the text could
    // still make (or lengthen) a match: keep text[begin, ...) for later.
    bool held = false;
  };
  // The leftmost, then longest, match in text[from, size).
  Found find(std::string_view text, size_t from, bool final) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int64_t id = -1;
  };
  int32_t child(int32_t node, unsigned char byte) const;
  std::vector<Node> nodes_{Node{}};
  std::array<bool, 256> first_{};
  size_t max_len_ = 0;
};

// One normalizer of the sequence, applied in the file's order.
struct Normalizer {
  enum class Kind { kNfc, kReplace };
  Kind kind = Kind::kNfc;
  // kReplace: every occurrence of `pattern` (a literal string; found left to right, without
  // overlaps, as Hugging Face's Replace finds a {"String": ...}) becomes `content`.
  std::string pattern, content;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Turns the spans of a split (matches and gaps) into pieces as `behavior` says, after swapping
// matches and gaps when `invert` (Hugging Face's NormalizedString::split).
void apply_split_behavior(const std::vector<Span>& spans, SplitBehavior behavior, bool invert,
                          std::vector<std::pair<size_t, size_t>>& pieces);

struct PreTokenizer {
  enum class Kind { kSplit, kByteLevel };
  Kind kind = Kind::kSplit;
  std::unique_ptr<Regex> regex;  // null: ByteLevel without use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel only
};

// Per-encoder memo of BPE results: most words of a text recur, and merging is the costly part.
struct BpeCache {
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> words;  // -> (offset, count)
  std::vector<uint32_t> ids;
  std::vector<uint32_t> symbols;  // scratch
  std::vector<uint64_t> ranks;    // scratch
  std::string key;                // scratch
};

// Note [code-point BPE]
// A BPE model runs over the characters of each pre-token (Hugging Face's BPE splits a word into
// chars). Behind a ByteLevel pre-tokenizer those characters stand for bytes (GPT-2's alphabet), so
// pstar runs it over the bytes directly (`byte_level`). Without one (SentencePiece-style files:
// Gemma's Replace(" " -> "▁") normalizer and its vocabulary of "▁the"), the symbols are code
// points: each character's own entry, else with byte_fallback its UTF-8 bytes as the entries
// <0x00>..<0xFF>, else unk. Merges then join symbols by id either way.
class Bpe {
 public:
  // encode_word through `cache`. Words longer than kMaxCachedWord bytes are not cached; the
  // cache starts over when it holds kMaxCachedIds ids.
  void encode_word_cached(std::string_view word, std::vector<uint32_t>& out, BpeCache& cache) const;
  static constexpr size_t kMaxCachedWord = 64;
  static constexpr size_t kMaxCachedIds = size_t{1} << 22;

  // Appends the ids of one pre-token (raw bytes). `symbols`/`ranks` are scratch space.
  void encode_word(std::string_view word, std::vector<uint32_t>& out,
                   std::vector<uint32_t>& symbols, std::vector<uint64_t>& ranks) const;

  // Words longer than this many symbols merge through a heap (n log n) rather than by scanning
  // for the best pair after each merge (n^2, faster for short words): without a regex splitting
  // them, a code-point model's words are whole lines (Gemma's).
  static constexpr size_t kHeapMergeFrom = 64;

  bool byte_level = true;  // Note [code-point BPE]
  // Byte-level: the raw bytes of each entry reachable from bytes (its text in the byte-level
  // alphabet decoded). Code points: each entry by its text.
  std::unordered_map<std::string, uint32_t> vocab;
  std::array<int64_t, 256> byte_ids{};  // byte-level: each byte's entry; -1: none
  // Code points: the entry of each single character, and with byte_fallback each byte's <0xNN>
  // entry (-1: none).
  std::unordered_map<uint32_t, uint32_t> char_ids;
  bool byte_fallback = false;
  std::array<int64_t, 256> fallback_ids{};
  // (left id << 32 | right id) -> (rank << 32 | merged id).
  std::unordered_map<uint64_t, uint64_t> merges;
  bool ignore_merges = false;
  std::optional<uint32_t> unk;
  bool fuse_unk = false;

 private:
  // The initial symbols of a word (one per byte, or per code point: Note [code-point BPE]).
  void initial_symbols(std::string_view word, std::vector<uint32_t>& symbols) const;
  // Applies the merges, lowest rank first (leftmost among equals), until none applies; returns
  // how many symbols are left at the front of `symbols`.
  size_t merge_by_scan(std::vector<uint32_t>& symbols, std::vector<uint64_t>& ranks) const;
  size_t merge_by_heap(std::vector<uint32_t>& symbols) const;
  uint64_t pair_rank(uint32_t a, uint32_t b) const;
};

// tokenizer.json's `decoder`, flattened from its Sequences (Note [decoding] in decode.cpp).
struct DecodeStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip };
  Kind kind = Kind::kFuse;
  std::string pattern, content;  // kReplace: a literal pattern; kStrip: content, one character
  size_t start = 0, stop = 0;    // kStrip: how many of it to take off each token's ends
};

struct DecoderChain {
  bool present = false;  // without a decoder Hugging Face joins the token strings with spaces
  std::vector<DecodeStep> steps;
  std::string unsupported;  // why decode() is refused ("" when it is not); encoding is unaffected
};

class TokenizerImpl {
 public:
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_added;         // normalized: false, matched on the text as given
  AddedTokenMatcher normalized_added;  // normalized: true, matched after the normalizer
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre;
  Bpe bpe;
  // Every entry by its text in the file (the byte-level alphabet) and added tokens by content.
  std::unordered_map<std::string, uint32_t> token_ids;
  std::unordered_map<uint32_t, std::string> id_texts;  // raw bytes or content, by id (loading)
  // The same as a table by id, made when loading ends (token_text is on the path of every token
  // of a record: Note [token offsets]), and whether each id is a special added token.
  std::vector<std::string> texts;
  std::vector<bool> special;
  int64_t vocab_size = 0;
  std::optional<uint32_t> bos, eos;
  std::optional<uint32_t> prefix;  // what the post-processor puts before the text
  DecoderChain decoder;
  std::string fingerprint, description;
};

}  // namespace pstar::text
