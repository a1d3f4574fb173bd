// Running a tokenizer over text fed in pieces (Note [whole-text equivalence] in tokenizer.h).
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "pstar/base/error.h"
#include "pstar/text/tokenizer.h"
#include "tokenizer_impl.h"
#include "utf8.h"

namespace pstar::text {
namespace {

// A stage of the pipeline. text() passes text on, end() ends the segment (an added token follows
// or the document ends: everything kept back must go), token() passes an added token's id on.
class Stage {
 public:
  virtual ~Stage() = default;
  virtual void text(std::string_view s) = 0;
  virtual void end() = 0;
  virtual void token(uint32_t id) = 0;
  virtual size_t pending() const = 0;
};

// Splits the text at added tokens (leftmost, then longest).
class AddedTokenStage final : public Stage {
 public:
  AddedTokenStage(const AddedTokenMatcher& matcher, Stage& next) : matcher_(matcher), next_(next) {}

  void text(std::string_view s) override {
    pending_.append(s);
    run(false);
  }
  void end() override {
    run(true);
    next_.end();
  }
  void token(uint32_t id) override { next_.token(id); }
  size_t pending() const override { return pending_.size() + next_.pending(); }

 private:
  void run(bool final) {
    size_t pos = 0;
    for (;;) {
      const AddedTokenMatcher::Found f = matcher_.find(pending_, pos, final);
      if (f.found) {
        if (f.begin > pos) next_.text(std::string_view(pending_).substr(pos, f.begin - pos));
        next_.end();
        next_.token(f.id);
        pos = f.end;
        continue;
      }
      const size_t keep_from = f.held ? f.begin : pending_.size();
      if (keep_from > pos) next_.text(std::string_view(pending_).substr(pos, keep_from - pos));
      pending_.erase(0, keep_from);
      return;
    }
  }

  const AddedTokenMatcher& matcher_;
  Stage& next_;
  std::string pending_;
};

// `n` bytes of `text` composed (NFC), as Hugging Face's NFC normalizer composes them.
std::string nfc(const char* text, size_t n) {
  // ASCII is NFC already and composes with nothing after it here: most text skips utf8proc.
  if (std::all_of(text, text + n, [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text, n);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t len = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(text), static_cast<utf8proc_ssize_t>(n), &out,
      static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  PSTAR_CHECK(len >= 0, FormatError, "NFC normalization failed: ", utf8proc_errmsg(len));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(len));
  std::free(out);
  return result;
}

// NFC. Text up to the last ASCII byte can be normalized on its own: an ASCII character is a
// starter that never composes with what precedes it.
class NfcStage final : public Stage {
 public:
  explicit NfcStage(Stage& next) : next_(next) {}

  void text(std::string_view s) override {
    pending_.append(s);
    size_t cut = pending_.size();
    while (cut > 0 && static_cast<unsigned char>(pending_[cut - 1]) >= 0x80) --cut;
    // cut is just after the last ASCII byte; the ASCII byte itself may still be followed by a
    // combining mark, so cut before it.
    if (cut > 0) --cut;
    flush(cut);
  }
  void end() override {
    flush(pending_.size());
    next_.end();
  }
  void token(uint32_t id) override { next_.token(id); }
  size_t pending() const override { return pending_.size() + next_.pending(); }

 private:
  void flush(size_t n) {
    if (n == 0) return;
    next_.text(nfc(pending_.data(), n));
    pending_.erase(0, n);
  }

  Stage& next_;
  std::string pending_;
};

// Replace of a literal string (Hugging Face's Replace normalizer with a {"String": ...}): every
// occurrence, left to right without overlaps, becomes the content. What may be the start of an
// occurrence (up to pattern.size() - 1 bytes at the end) waits for the next piece.
std::string replace_all(std::string_view text, const std::string& pattern,
                        const std::string& content, size_t* consumed = nullptr, bool final = true) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(pattern, pos)) != std::string_view::npos;) {
    out.append(text.substr(pos, hit - pos));
    out += content;
    pos = hit + pattern.size();
  }
  size_t keep = text.size();
  if (!final && pattern.size() > 1 && text.size() - pos < pattern.size()) {
    keep = pos;
  } else if (!final && pattern.size() > 1) {
    keep = text.size() - (pattern.size() - 1);
    // Cut on a character boundary (a pattern is whole characters, so none starts inside one).
    while (keep > pos && (static_cast<unsigned char>(text[keep]) & 0xc0) == 0x80) --keep;
  }
  out.append(text.substr(pos, keep - pos));
  if (consumed != nullptr) *consumed = keep;
  return out;
}

class ReplaceStage final : public Stage {
 public:
  ReplaceStage(const Normalizer& n, Stage& next) : n_(n), next_(next) {}

  void text(std::string_view s) override {
    pending_.append(s);
    flush(false);
  }
  void end() override {
    flush(true);
    next_.end();
  }
  void token(uint32_t id) override { next_.token(id); }
  size_t pending() const override { return pending_.size() + next_.pending(); }

 private:
  void flush(bool final) {
    size_t consumed = 0;
    const std::string out = replace_all(pending_, n_.pattern, n_.content, &consumed, final);
    pending_.erase(0, consumed);
    if (!out.empty()) next_.text(out);
  }

  const Normalizer& n_;
  Stage& next_;
  std::string pending_;
};

// The pre-tokenizers and the BPE model: the last stage, which appends ids to `out`.
class PreTokenizeStage final : public Stage {
 public:
  explicit PreTokenizeStage(const TokenizerImpl& impl) : impl_(impl) {
    if (!impl_.pre.empty() && impl_.pre[0].regex) {
      // Lookbehinds (and \b) read before the cut: keep that many characters as context, at most
      // 4 bytes each.
      context_bytes_ = 4 * size_t{impl_.pre[0].regex->max_lookbehind()};
    }
  }

  void set_output(std::vector<uint32_t>* out) { out_ = out; }

  void text(std::string_view s) override {
    if (s.empty()) return;
    if (!started_) {
      started_ = true;
      // ByteLevel's add_prefix_space acts on each piece it is given; as the first pre-tokenizer
      // that is the whole segment.
      if (!impl_.pre.empty() && impl_.pre[0].kind == PreTokenizer::Kind::kByteLevel &&
          impl_.pre[0].add_prefix_space && s[0] != ' ') {
        pending_.push_back(' ');
      }
    }
    pending_.append(s);
    run(false);
  }
  void end() override {
    if (started_) run(true);
    pending_.clear();
    context_ = 0;
    started_ = false;
    segment_cut_ = false;
  }
  void token(uint32_t id) override { out_->push_back(id); }
  size_t pending() const override { return pending_.size() - context_; }

 private:
  void run(bool final) {
    const std::string_view text(pending_);
    if (impl_.pre.empty() || !impl_.pre[0].regex) {
      // Nothing splits the segment: it is one piece, known only at its end.
      if (final) split(1, text.substr(context_));
      return;
    }
    const PreTokenizer& first = impl_.pre[0];
    spans_.clear();
    find_spans(*first.regex, matcher_, text, context_, !final, segment_cut_, spans_);
    apply_split_behavior(spans_, first.behavior, first.invert, pieces_);
    size_t cut = text.size();
    if (!final) {
      // The last piece may still grow or merge with what comes next.
      if (pieces_.empty()) return;
      cut = pieces_.back().first;
      pieces_.pop_back();
    }
    for (const auto& [b, e] : pieces_) split(1, text.substr(b, e - b));
    if (final) return;
    // Keep context before the cut for lookbehinds, starting on a character boundary.
    size_t keep = cut > context_bytes_ ? cut - context_bytes_ : 0;
    while (keep > 0 && (static_cast<unsigned char>(pending_[keep]) & 0xc0) == 0x80) --keep;
    if (keep > 0) segment_cut_ = true;
    pending_.erase(0, keep);
    context_ = cut - keep;
  }

  // Runs pre-tokenizers level.. on a piece that is final, then BPE.
  void split(size_t level, std::string_view piece) {
    if (level >= impl_.pre.size()) {
      impl_.bpe.encode_word_cached(piece, *out_, cache_);
      return;
    }
    const PreTokenizer& p = impl_.pre[level];
    std::string prefixed;
    if (p.kind == PreTokenizer::Kind::kByteLevel && p.add_prefix_space && piece[0] != ' ') {
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (!p.regex) {
      split(level + 1, piece);
      return;
    }
    std::vector<Span> spans;
    find_spans(*p.regex, matcher_, piece, 0, false, false, spans);
    std::vector<std::pair<size_t, size_t>> pieces;
    apply_split_behavior(spans, p.behavior, p.invert, pieces);
    for (const auto& [b, e] : pieces) split(level + 1, piece.substr(b, e - b));
  }

  const TokenizerImpl& impl_;
  std::vector<uint32_t>* out_ = nullptr;
  Matcher matcher_;
  BpeCache cache_;
  std::string pending_;
  size_t context_ = 0;        // bytes at the front of pending_ kept only as lookbehind context
  size_t context_bytes_ = 0;  // how much context to keep
  bool started_ = false;      // the segment has had text
  bool segment_cut_ = false;  // pending_ no longer starts where the segment starts
  std::vector<Span> spans_;
  std::vector<std::pair<size_t, size_t>> pieces_;
};

}  // namespace

class StreamEncoder::Pipeline {
 public:
  explicit Pipeline(const TokenizerImpl& impl) : last_(impl) {
    Stage* next = &last_;
    if (!impl.normalized_added.empty()) {
      normalized_added_ = std::make_unique<AddedTokenStage>(impl.normalized_added, *next);
      next = normalized_added_.get();
    }
    // The normalizers in the file's order: the last one feeds the stages above, so build from it.
    for (auto it = impl.normalizers.rbegin(); it != impl.normalizers.rend(); ++it) {
      if (it->kind == Normalizer::Kind::kNfc) {
        normalizers_.push_back(std::make_unique<NfcStage>(*next));
      } else {
        normalizers_.push_back(std::make_unique<ReplaceStage>(*it, *next));
      }
      next = normalizers_.back().get();
    }
    if (!impl.raw_added.empty()) {
      raw_added_ = std::make_unique<AddedTokenStage>(impl.raw_added, *next);
      next = raw_added_.get();
    }
    first_ = next;
  }

  void feed(std::string_view piece, std::vector<uint32_t>& out) {
    last_.set_output(&out);
    // UTF-8 is checked here, once: a character cut by the piece boundary waits for the rest.
    std::string_view text = piece;
    if (!carry_.empty()) {
      carry_.append(piece);
      text = carry_;
    }
    const Utf8Check check = check_utf8(text);
    PSTAR_CHECK(!check.invalid, FormatError, "the text is not valid UTF-8 at byte ",
                offset_ - (text.size() - piece.size()) + check.valid,
                " (Hugging Face tokenizers take UTF-8 text only)");
    first_->text(text.substr(0, check.valid));
    std::string rest(text.substr(check.valid));
    offset_ += piece.size();
    carry_ = std::move(rest);
  }

  void finish(std::vector<uint32_t>& out) {
    last_.set_output(&out);
    PSTAR_CHECK(carry_.empty(), FormatError, "the text is not valid UTF-8 at byte ",
                offset_ - carry_.size(), ": it ends inside a character");
    first_->end();
    offset_ = 0;
  }

  size_t pending() const { return carry_.size() + first_->pending(); }

 private:
  PreTokenizeStage last_;
  std::unique_ptr<AddedTokenStage> normalized_added_, raw_added_;
  std::vector<std::unique_ptr<Stage>> normalizers_;
  Stage* first_ = nullptr;
  std::string carry_;
  uint64_t offset_ = 0;  // bytes of the document fed so far
};

StreamEncoder::StreamEncoder(const Tokenizer& tokenizer)
    : pipeline_(std::make_unique<Pipeline>(tokenizer.impl())) {}
StreamEncoder::~StreamEncoder() = default;

void StreamEncoder::feed(std::string_view piece, std::vector<uint32_t>& out) {
  pipeline_->feed(piece, out);
}
void StreamEncoder::finish(std::vector<uint32_t>& out) { pipeline_->finish(out); }
size_t StreamEncoder::pending_bytes() const { return pipeline_->pending(); }

std::string Tokenizer::normalize(std::string_view text) const {
  const TokenizerImpl& impl = *impl_;
  if (impl.normalizers.empty()) return std::string(text);
  const Utf8Check check = check_utf8(text);
  PSTAR_CHECK(!check.invalid && check.valid == text.size(), FormatError,
              "the text is not valid UTF-8 at byte ", check.valid,
              " (Hugging Face tokenizers take UTF-8 text only)");
  // The pipeline's order (StreamEncoder::Pipeline): added tokens matched on the raw text first,
  // the normalizers on the stretches between them.
  auto normalized = [&](std::string_view stretch) {
    std::string t(stretch);
    for (const Normalizer& n : impl.normalizers)
      t = n.kind == Normalizer::Kind::kNfc ? nfc(t.data(), t.size())
                                           : replace_all(t, n.pattern, n.content);
    return t;
  };
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedTokenMatcher::Found f =
        impl.raw_added.empty() ? AddedTokenMatcher::Found{} : impl.raw_added.find(text, pos, true);
    const size_t stop = f.found ? f.begin : text.size();
    out += normalized(text.substr(pos, stop - pos));
    if (!f.found) break;
    out.append(text.substr(f.begin, f.end - f.begin));
    pos = f.end;
  }
  return out;
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text) const {
  StreamEncoder encoder(*this);
  std::vector<uint32_t> out;
  encoder.feed(text, out);
  encoder.finish(out);
  return out;
}

}  // namespace pstar::text
