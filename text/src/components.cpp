// The tokenizer's building blocks: added-token matching, split behaviours and BPE merging.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>

#include "pstar/base/error.h"
#include "tokenizer_impl.h"
#include "utf8.h"

namespace pstar::text {

void AddedTokenMatcher::add(std::string_view content, uint32_t id) {
  PSTAR_INTERNAL_ASSERT(!content.empty(), "an empty added token");
  int32_t node = 0;
  for (const char ch : content) {
    const auto byte = static_cast<unsigned char>(ch);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[static_cast<size_t>(node)].children;
      children.insert(
          std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1})),
          {byte, next});
    }
    node = next;
  }
  // A later entry with the same content replaces an earlier one, as in Hugging Face's vocabulary.
  nodes_[static_cast<size_t>(node)].id = id;
  first_[static_cast<unsigned char>(content[0])] = true;
  max_len_ = std::max(max_len_, content.size());
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  const auto& children = nodes_[static_cast<size_t>(node)].children;
  const auto it =
      std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
  return it != children.end() && it->first == byte ? it->second : -1;
}

AddedTokenMatcher::Found AddedTokenMatcher::find(std::string_view text, size_t from,
                                                 bool final) const {
  Found result;
  if (empty()) return result;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t start = from; start < text.size(); ++start) {
    if (!first_[p[start]]) continue;
    int32_t node = 0;
    int64_t best_id = -1;
    size_t best_end = 0;
    size_t i = start;
    for (; i < text.size(); ++i) {
      node = child(node, p[i]);
      if (node < 0) break;
      if (nodes_[static_cast<size_t>(node)].id >= 0) {
        best_id = nodes_[static_cast<size_t>(node)].id;
        best_end = i + 1;
      }
    }
    if (i == text.size() && node >= 0 && !nodes_[static_cast<size_t>(node)].children.empty() &&
        !final) {
      // The text ended inside the trie: more text may start or lengthen a match here.
      result.begin = start;
      result.held = true;
      return result;
    }
    if (best_id >= 0) {
      result.begin = start;
      result.end = best_end;
      result.id = static_cast<uint32_t>(best_id);
      result.found = true;
      return result;
    }
  }
  return result;
}

void apply_split_behavior(const std::vector<Span>& spans, SplitBehavior behavior, bool invert,
                          std::vector<std::pair<size_t, size_t>>& pieces) {
  pieces.clear();
  auto is_match = [&](const Span& s) { return s.is_match != invert; };
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!is_match(s)) pieces.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) pieces.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (is_match(s) && !previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = is_match(s);
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // A match joins the piece after it: the same fold, from the end.
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (is_match(*it) && !previous_match && !pieces.empty()) {
          pieces.back().first = it->begin;
        } else {
          pieces.emplace_back(it->begin, it->end);
        }
        previous_match = is_match(*it);
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (is_match(s) == previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = is_match(s);
      }
      break;
    }
  }
  // Empty pieces (empty matches) produce no tokens.
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(),
                              [](const auto& p) { return p.first == p.second; }),
               pieces.end());
}

namespace {

constexpr uint64_t kNoMerge = ~uint64_t{0};

std::string hex_byte(unsigned char byte) {
  char hex[3];
  std::snprintf(hex, sizeof(hex), "%02x", byte);
  return hex;
}

}  // namespace

uint64_t Bpe::pair_rank(uint32_t a, uint32_t b) const {
  const auto it = merges.find((uint64_t{a} << 32) | b);
  return it == merges.end() ? kNoMerge : it->second;
}

void Bpe::initial_symbols(std::string_view word, std::vector<uint32_t>& symbols) const {
  symbols.clear();
  // A piece without an entry becomes unk (consecutive ones fused into one with fuse_unk).
  bool previous_unk = false;
  auto push_unk = [&](const std::string& what) {
    PSTAR_CHECK(unk.has_value(), FormatError, what,
                " has no token in the BPE vocabulary and model.unk_token is null");
    if (!(fuse_unk && previous_unk)) symbols.push_back(*unk);
    previous_unk = true;
  };
  if (byte_level) {
    for (const char ch : word) {
      const auto byte = static_cast<unsigned char>(ch);
      if (byte_ids[byte] >= 0) {
        symbols.push_back(static_cast<uint32_t>(byte_ids[byte]));
        previous_unk = false;
      } else {
        push_unk("the byte 0x" + hex_byte(byte));
      }
    }
    return;
  }
  // Note [code-point BPE]: the text was checked as UTF-8 before it got here.
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    const uint32_t cp = decode_utf8(word, i);
    const auto it = char_ids.find(cp);
    if (it != char_ids.end()) {
      symbols.push_back(it->second);
      previous_unk = false;
      continue;
    }
    if (byte_fallback && std::all_of(word.begin() + static_cast<std::ptrdiff_t>(start),
                                     word.begin() + static_cast<std::ptrdiff_t>(i), [&](char b) {
                                       return fallback_ids[static_cast<unsigned char>(b)] >= 0;
                                     })) {
      for (size_t k = start; k < i; ++k)
        symbols.push_back(static_cast<uint32_t>(fallback_ids[static_cast<unsigned char>(word[k])]));
      previous_unk = false;
      continue;
    }
    char what[48];
    std::snprintf(what, sizeof(what), "the character U+%04X", cp);
    push_unk(what);
  }
}

size_t Bpe::merge_by_scan(std::vector<uint32_t>& symbols, std::vector<uint64_t>& ranks) const {
  // ranks[i] is the pair (i, i+1) as (rank << 32 | new id), or kNoMerge. The rank is in the high
  // half, so comparing whole values orders by rank (ties keep the leftmost, as the scan takes
  // only a strictly smaller one): the order Hugging Face's priority queue gives.
  ranks.resize(symbols.size());
  for (size_t i = 0; i + 1 < symbols.size(); ++i) ranks[i] = pair_rank(symbols[i], symbols[i + 1]);
  ranks.back() = kNoMerge;
  size_t n = symbols.size();
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNoMerge) break;
    symbols[best] = static_cast<uint32_t>(ranks[best] & 0xffffffffu);
    std::copy(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 2,
              symbols.begin() + static_cast<std::ptrdiff_t>(n),
              symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    std::copy(ranks.begin() + static_cast<std::ptrdiff_t>(best) + 2,
              ranks.begin() + static_cast<std::ptrdiff_t>(n),
              ranks.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    --n;
    if (best > 0) ranks[best - 1] = pair_rank(symbols[best - 1], symbols[best]);
    ranks[best] = best + 1 < n ? pair_rank(symbols[best], symbols[best + 1]) : kNoMerge;
  }
  return n;
}

size_t Bpe::merge_by_heap(std::vector<uint32_t>& symbols) const {
  // The same order as merge_by_scan (lowest rank, then leftmost), through a min-heap of candidate
  // pairs keyed by (rank, position of the left symbol) over a linked list of the symbols. A
  // candidate is stale when its left symbol is gone or the pair there is no longer the one it
  // was made for (the rank names the pair: each rank is one merge).
  const size_t n = symbols.size();
  std::vector<int64_t> next(n), prev(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
    prev[i] = static_cast<int64_t>(i) - 1;
  }
  using Candidate = std::pair<uint64_t, size_t>;  // (rank << 32 | new id, left position)
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  for (size_t i = 0; i + 1 < n; ++i) {
    const uint64_t r = pair_rank(symbols[i], symbols[i + 1]);
    if (r != kNoMerge) heap.emplace(r, i);
  }
  while (!heap.empty()) {
    const auto [rank, pos] = heap.top();
    heap.pop();
    if (!alive[pos] || next[pos] < 0) continue;
    const auto right = static_cast<size_t>(next[pos]);
    if (pair_rank(symbols[pos], symbols[right]) != rank) continue;
    symbols[pos] = static_cast<uint32_t>(rank & 0xffffffffu);
    alive[right] = false;
    next[pos] = next[right];
    if (next[right] >= 0) prev[static_cast<size_t>(next[right])] = static_cast<int64_t>(pos);
    if (prev[pos] >= 0) {
      const auto left = static_cast<size_t>(prev[pos]);
      const uint64_t r = pair_rank(symbols[left], symbols[pos]);
      if (r != kNoMerge) heap.emplace(r, left);
    }
    if (next[pos] >= 0) {
      const uint64_t r = pair_rank(symbols[pos], symbols[static_cast<size_t>(next[pos])]);
      if (r != kNoMerge) heap.emplace(r, pos);
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) symbols[kept++] = symbols[i];
  return kept;
}

void Bpe::encode_word(std::string_view word, std::vector<uint32_t>& out,
                      std::vector<uint32_t>& symbols, std::vector<uint64_t>& ranks) const {
  if (word.empty()) return;
  if (ignore_merges) {
    // ignore_merges: a pre-token that is itself in the vocabulary is that token, whatever the
    // merges would make of it.
    const auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  initial_symbols(word, symbols);
  if (symbols.empty()) return;
  const size_t n =
      symbols.size() > kHeapMergeFrom ? merge_by_heap(symbols) : merge_by_scan(symbols, ranks);
  out.insert(out.end(), symbols.begin(), symbols.begin() + static_cast<std::ptrdiff_t>(n));
}

void Bpe::encode_word_cached(std::string_view word, std::vector<uint32_t>& out,
                             BpeCache& cache) const {
  if (word.size() > kMaxCachedWord) {
    encode_word(word, out, cache.symbols, cache.ranks);
    return;
  }
  cache.key.assign(word.data(), word.size());
  const auto it = cache.words.find(cache.key);
  if (it != cache.words.end()) {
    const uint32_t* ids = cache.ids.data() + it->second.first;
    out.insert(out.end(), ids, ids + it->second.second);
    return;
  }
  if (cache.ids.size() >= kMaxCachedIds) {
    cache.ids.clear();
    cache.words.clear();
  }
  const size_t before = out.size();
  encode_word(word, out, cache.symbols, cache.ranks);
  const auto offset = static_cast<uint32_t>(cache.ids.size());
  cache.ids.insert(cache.ids.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  cache.words.emplace(cache.key,
                      std::make_pair(offset, static_cast<uint32_t>(out.size() - before)));
}

}  // namespace pstar::text
