// RecordTokenizer: one record's tokens and loss flags (Note [record masks] in records.h).
#include <algorithm>
#include <utility>

#include "pstar/base/error.h"
#include "pstar/formats/record_file.h"
#include "pstar/text/records.h"
#include "records/parse.h"

namespace pstar::text {
namespace {

using records::ParsedRecord;
using records::Shape;

// What stands in for an assistant content that leaves no bytes, to find where it goes: U+E000
// (private use), which no template changes and no tokenizer splits from nothing.
constexpr std::string_view kMarker = "\xEE\x80\x80";

BadRecord bad(const char* kind, std::string message) { return {kind, std::move(message)}; }

// How records render a conversation: without the generation prompt (Note [record masks]).
ChatOptions chat_options_of(const RecordOptions& options) {
  ChatOptions o;
  o.date = options.date;
  o.template_kwargs = options.template_kwargs;
  return o;
}

// A byte range of the text whose tokens count.
struct Range {
  size_t begin = 0, end = 0;
};

}  // namespace

class RecordTokenizer::Impl {
 public:
  Impl(const Tokenizer& tokenizer, const ChatTemplate* chat, RecordOptions options,
       std::string no_template)
      : tokenizer_(tokenizer),
        chat_(chat),
        options_(std::move(options)),
        no_template_(std::move(no_template)),
        encoder_(tokenizer) {}

  std::optional<BadRecord> tokenize(std::string_view line, std::vector<uint32_t>& out,
                                    RecordStats& stats) {
    out.clear();
    if (auto b = records::parse_record(line, parsed_)) return b;
    switch (parsed_.shape) {
      case Shape::kMessages:
        if (auto b = conversation(out, stats)) return b;
        ++stats.conversations;
        break;
      case Shape::kPair:
        if (auto b = document(parsed_.prompt, parsed_.completion, false, out)) return b;
        ++stats.pairs;
        break;
      case Shape::kText:
        if (auto b = document("", parsed_.text, true, out)) return b;
        ++stats.texts;
        break;
    }
    stats.tokens += static_cast<int64_t>(out.size());
    // Targets are tokens 1 .. n-1: the first token's flag never reaches the loss.
    if (!out.empty())
      stats.counted += std::count_if(out.begin() + 1, out.end(), formats::record_token_counts);
    return std::nullopt;
  }

 private:
  std::optional<BadRecord> conversation(std::vector<uint32_t>& out, RecordStats& stats) {
    if (chat_ == nullptr) return bad("no chat template", no_template_);
    const std::vector<ChatMessage>& messages = parsed_.messages;
    int last_assistant = -1;
    for (size_t i = 0; i < messages.size(); ++i)
      if (messages[i].role == "assistant") last_assistant = static_cast<int>(i);
    auto selected = [&](int m) {
      return options_.loss_on == LossOn::kLastAssistant
                 ? m == last_assistant
                 : messages[static_cast<size_t>(m)].role == "assistant";
    };
    const ChatOptions chat_options = chat_options_of(options_);
    RenderedChat rendered;
    try {
      rendered = chat_->render(messages, chat_options);
    } catch (const FormatError& e) {
      return bad("template refused", std::string("the chat template refused it: ") + e.what());
    }
    if (last_assistant < 0 && options_.loss_on != LossOn::kAll) ++stats.no_assistant;

    // The selected contents' bytes, and where each selected content without bytes goes.
    std::vector<Range> contents;
    std::vector<bool> placed(messages.size(), false);
    for (const auto& s : rendered.spans) {
      if (!selected(s.message)) continue;
      contents.push_back({s.begin, s.end});
      placed[static_cast<size_t>(s.message)] = true;
    }
    std::vector<int> unplaced;
    for (size_t i = 0; i < messages.size(); ++i)
      if (selected(static_cast<int>(i)) && !placed[i]) unplaced.push_back(static_cast<int>(i));
    if (!unplaced.empty() && options_.loss_on != LossOn::kAll) {
      if (!place_empty_turns(unplaced, rendered.text, contents))
        stats.empty_turns_uncounted += static_cast<int64_t>(unplaced.size());
    }

    std::vector<size_t> cuts = {0, rendered.text.size()};
    for (const Range& r : contents) {
      cuts.push_back(r.begin);
      cuts.push_back(r.end);
    }
    if (auto b = align(rendered.text, cuts)) return b;
    std::vector<Range> counted;
    for (const Range& r : contents)
      counted.push_back({normalized_at(r.begin), normalized_at(r.end)});
    flags_.assign(ids_.size(), options_.loss_on == LossOn::kAll);
    if (options_.loss_on != LossOn::kAll) mark(counted, /*end_of_turn=*/true);
    emit(out);
    return std::nullopt;
  }

  // A pair (prompt, completion) or a text ("", text, whole): prefix + text + eos, the completion
  // and eos counting, or with `whole` every token.
  std::optional<BadRecord> document(const std::string& prompt, const std::string& answer,
                                    bool whole, std::vector<uint32_t>& out) {
    const bool all = whole || options_.loss_on == LossOn::kAll;
    const std::optional<uint32_t> eos = tokenizer_.eos_id();
    PSTAR_CHECK(eos.has_value(), FormatError, "the tokenizer ", tokenizer_.description(),
                " has no end-of-text token (eos_token in tokenizer_config.json), which "
                "prompt/completion and text records end with");
    const std::string text = prompt + answer;
    if (auto b = align(text, {0, prompt.size(), text.size()})) return b;
    const Range completion{normalized_at(prompt.size()), normalized_at(text.size())};
    flags_.assign(ids_.size(), all);
    mark({completion}, /*end_of_turn=*/false);
    std::vector<uint32_t> ids;
    std::vector<bool> flags;
    if (const auto prefix = tokenizer_.prefix_id()) {
      ids.push_back(*prefix);
      flags.push_back(all);
    }
    ids.insert(ids.end(), ids_.begin(), ids_.end());
    flags.insert(flags.end(), flags_.begin(), flags_.end());
    ids.push_back(*eos);
    flags.push_back(true);
    ids_ = std::move(ids);
    flags_ = std::move(flags);
    emit(out);
    return std::nullopt;
  }

  // Renders the conversation again with the marker for each content in `unplaced`; when taking
  // the markers out gives `text` back, each marker's place is a content without bytes (added to
  // `contents`, zero-length, so that its end-of-turn token counts). False when it does not.
  bool place_empty_turns(const std::vector<int>& unplaced, const std::string& text,
                         std::vector<Range>& contents) {
    std::vector<ChatMessage> marked = parsed_.messages;
    for (int m : unplaced) marked[static_cast<size_t>(m)].content = std::string(kMarker);
    RenderedChat again;
    try {
      again = chat_->render(marked, chat_options_of(options_));
    } catch (const FormatError&) {
      return false;
    }
    std::vector<Range> markers;
    for (const auto& s : again.spans) {
      if (std::find(unplaced.begin(), unplaced.end(), s.message) == unplaced.end()) continue;
      if (again.text.compare(s.begin, s.end - s.begin, kMarker) != 0) return false;
      markers.push_back({s.begin, s.end});
    }
    if (markers.size() != unplaced.size()) return false;
    std::sort(markers.begin(), markers.end(),
              [](const Range& a, const Range& b) { return a.begin < b.begin; });
    std::string without;
    std::vector<Range> places;
    size_t from = 0;
    for (const Range& m : markers) {
      without.append(again.text, from, m.begin - from);
      places.push_back({without.size(), without.size()});
      from = m.end;
    }
    without.append(again.text, from, std::string::npos);
    if (without != text) return false;
    contents.insert(contents.end(), places.begin(), places.end());
    return true;
  }

  // Tokenizes `text` into ids_ and finds each token's place in the normalized text (starts_),
  // checking that the token texts spell it (Note [token offsets]); `cuts` are the positions of
  // the text that normalized_at() will be asked about.
  std::optional<BadRecord> align(const std::string& text, std::vector<size_t> cuts) {
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    cuts_ = cuts;
    cut_at_.assign(cuts.size(), 0);
    normalized_.clear();
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      cut_at_[k] = normalized_.size();
      normalized_ +=
          tokenizer_.normalize(std::string_view(text).substr(cuts[k], cuts[k + 1] - cuts[k]));
    }
    cut_at_.back() = normalized_.size();
    ids_.clear();
    encoder_.feed(text, ids_);
    encoder_.finish(ids_);
    starts_.assign(ids_.size() + 1, 0);
    size_t pos = 0;
    for (size_t i = 0; i < ids_.size(); ++i) {
      const std::string& t = tokenizer_.token_text(ids_[i]);
      if (t.empty() || normalized_.compare(pos, t.size(), t) != 0) return misaligned(pos);
      starts_[i] = pos;
      pos += t.size();
    }
    starts_.back() = pos;
    if (pos != normalized_.size()) return misaligned(pos);
    return std::nullopt;
  }

  BadRecord misaligned(size_t pos) const {
    return bad("unaligned tokens",
               "the token texts of its ids do not spell the text the tokenizer normalized (from "
               "byte " +
                   std::to_string(pos + 1) +
                   "), so which tokens are the answer's cannot be told: the normalizer composes "
                   "characters across a content's edge, or the tokenizer adds text (a ByteLevel "
                   "add_prefix_space) or maps bytes to an unknown token");
  }

  size_t normalized_at(size_t text_pos) const {
    const auto it = std::lower_bound(cuts_.begin(), cuts_.end(), text_pos);
    PSTAR_INTERNAL_ASSERT(it != cuts_.end() && *it == text_pos, "position ", text_pos,
                          " was not a cut");
    return cut_at_[static_cast<size_t>(it - cuts_.begin())];
  }

  // Sets flags_ of the tokens overlapping `ranges` (normalized positions), and with
  // `end_of_turn` of the first token at or after each range's end when it is special.
  void mark(const std::vector<Range>& ranges, bool end_of_turn) {
    for (const Range& r : ranges) {
      // Tokens i with starts_[i] < r.end and starts_[i + 1] > r.begin (none for an empty range).
      const auto first = std::upper_bound(starts_.begin() + 1, starts_.end(), r.begin);
      for (auto i = static_cast<size_t>(first - starts_.begin()) - 1;
           r.begin < r.end && i < ids_.size() && starts_[i] < r.end; ++i)
        flags_[i] = true;
      if (!end_of_turn) continue;
      const auto next = std::lower_bound(starts_.begin(), starts_.end() - 1, r.end);
      const auto i = static_cast<size_t>(next - starts_.begin());
      if (i < ids_.size() && tokenizer_.is_special(ids_[i])) flags_[i] = true;
    }
  }

  void emit(std::vector<uint32_t>& out) const {
    out.resize(ids_.size());
    for (size_t i = 0; i < ids_.size(); ++i) out[i] = formats::record_token(ids_[i], flags_[i]);
  }

  const Tokenizer& tokenizer_;
  const ChatTemplate* chat_;
  RecordOptions options_;
  std::string no_template_;
  StreamEncoder encoder_;  // one for every record: its BPE cache stays warm
  // Scratch of the record at hand.
  ParsedRecord parsed_;
  std::vector<uint32_t> ids_;
  std::vector<bool> flags_;
  std::vector<size_t> starts_, cuts_, cut_at_;
  std::string normalized_;
};

RecordTokenizer::RecordTokenizer(const Tokenizer& tokenizer, const ChatTemplate* chat,
                                 RecordOptions options, std::string no_template)
    : impl_(std::make_unique<Impl>(tokenizer, chat, std::move(options), std::move(no_template))) {}
RecordTokenizer::~RecordTokenizer() = default;

std::optional<BadRecord> RecordTokenizer::tokenize(std::string_view line,
                                                   std::vector<uint32_t>& out, RecordStats& stats) {
  return impl_->tokenize(line, out, stats);
}

}  // namespace pstar::text
