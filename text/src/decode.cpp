// Detokenization: ids back to text, as Hugging Face's decoders do it, whole or streamed.
//
// Note [decoding]
// Hugging Face's decode(ids) takes each id's token string (special added tokens left out with
// skip_special_tokens), runs the tokenizer.json `decoder` over the list of strings, and turns the
// resulting bytes into text, each invalid UTF-8 sequence becoming one U+FFFD (its "maximal
// subpart", as Rust's from_utf8_lossy, Python's and the browsers' decoders count them). The steps
// pstar runs, in the file's order:
//   ByteLevel     the byte-level alphabet back to bytes. Token texts of a byte-level model are
//                 already those bytes (Note [token offsets]); an added token is its content (as
//                 transformers.js and the slow tokenizers have it; Rust maps its characters through
//                 the alphabet when all are in it, which differs only for contents with characters
//                 such as "é", in no tokenizer pstar reads);
//   Replace       a literal pattern in each token (Gemma's "▁" -> " ");
//   ByteFallback  a run of <0xNN> tokens becomes its bytes when they are valid UTF-8, else one
//                 U+FFFD for each token of the run;
//   Fuse          all tokens into one;
//   Strip         up to `start` copies of a character off each token's front, `stop` off its end
//                 (after Fuse: the text's).
// Ids the tokenizer does not have (a model's vocabulary padded past the tokenizer's) are left
// out, as Hugging Face's id_to_token drops them. Tokenization's clean-up of spaces before
// punctuation (transformers' clean_up_tokenization_spaces) is not applied: it changes the text the
// model wrote (" ." becomes "."), and transformers 5 leaves it off.
//
// Streaming (StreamDecoder) gives out the decoded text of the ids so far, less what a later id can
// still change: the bytes of a character not yet complete, a run of <0xNN> tokens (a later byte can
// turn it into U+FFFDs), and copies of a Strip's character at the end (they go only at the text's
// end). What it gives out is a prefix of the whole decode, so its pieces, with finish()'s, are that
// decode exactly, and never end inside a character. Each feed decodes the ids so far again (cheap
// beside a model's forward: a string append an id).
#include <algorithm>
#include <string>
#include <vector>

#include "load_pipeline.h"
#include "pstar/base/error.h"
#include "pstar/text/tokenizer.h"
#include "tokenizer_impl.h"
#include "utf8.h"

namespace pstar::text {

namespace {

constexpr const char* kReplacement = "\xef\xbf\xbd";  // U+FFFD

void read_step(const Json& d, const std::string& what, const std::string& origin,
               DecoderChain& chain) {
  if (d.is_null()) return;
  PSTAR_CHECK(d.is_object(), FormatError, origin, ": ", what, " must be an object");
  const std::string type = d.value("type", "");
  DecodeStep step;
  if (type == "Sequence") {
    const Json& inner = field(d, "decoders", what, origin);
    PSTAR_CHECK(inner.is_array(), FormatError, origin, ": ", what, ".decoders must be a list");
    for (size_t i = 0; i < inner.size(); ++i)
      read_step(inner[i], what + ".decoders[" + std::to_string(i) + "]", origin, chain);
    return;
  } else if (type == "ByteLevel") {
    step.kind = DecodeStep::Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = DecodeStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecodeStep::Kind::kFuse;
  } else if (type == "Replace") {
    const Json& pattern = field(d, "pattern", what, origin);
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string()) {
      chain.unsupported = what + ": a Replace of a {\"Regex\": ...} pattern";
      return;
    }
    step.kind = DecodeStep::Kind::kReplace;
    step.pattern = pattern["String"].get<std::string>();
    step.content = field(d, "content", what, origin).get<std::string>();
    PSTAR_CHECK(!step.pattern.empty(), FormatError, origin, ": ", what,
                " replaces an empty string");
  } else if (type == "Strip") {
    step.kind = DecodeStep::Kind::kStrip;
    step.content = field(d, "content", what, origin).get<std::string>();
    step.start = field(d, "start", what, origin).get<size_t>();
    step.stop = field(d, "stop", what, origin).get<size_t>();
    size_t at = 0;
    PSTAR_CHECK(!step.content.empty() && check_utf8(step.content).valid == step.content.size() &&
                    (decode_utf8(step.content, at), at == step.content.size()),
                FormatError, origin, ": ", what, " strips '", step.content,
                "', which is not one character");
  } else {
    chain.unsupported = what + " of type \"" + type + "\"";
    return;
  }
  chain.steps.push_back(std::move(step));
}

// The bytes of the longest start of `s` that could still be the start of a valid UTF-8 sequence
// (at least 1): what one U+FFFD replaces when the sequence is invalid.
size_t utf8_subpart(std::string_view s) {
  const auto c = static_cast<unsigned char>(s[0]);
  size_t len = 0;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    lo = c == 0xe0 ? 0xa0 : lo;
    hi = c == 0xed ? 0x9f : hi;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    lo = c == 0xf0 ? 0x90 : lo;
    hi = c == 0xf4 ? 0x8f : hi;
  } else {
    return 1;
  }
  size_t k = 1;
  for (; k < len && k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) break;
  }
  return k;
}

// `bytes` as text: each invalid sequence one U+FFFD (Note [decoding]).
std::string lossy_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const Utf8Check c = check_utf8(bytes);
    out.append(bytes.substr(0, c.valid));
    bytes.remove_prefix(c.valid);
    if (bytes.empty()) break;
    out += kReplacement;
    bytes.remove_prefix(std::min(bytes.size(), utf8_subpart(bytes)));
  }
  return out;
}

// The length of the tail of `bytes` that a later byte could still complete into a character.
size_t incomplete_tail(std::string_view bytes) {
  const size_t n = bytes.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(bytes[n - back]);
    if (c < 0xc2 || c > 0xf4) continue;  // not a lead byte
    const size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    return need > back && utf8_subpart(bytes.substr(n - back)) == back ? back : 0;
  }
  return 0;
}

// One token string on its way through the chain: a <0xNN> token keeps its byte until a
// ByteFallback (without one it is the string "<0xNN>" again).
struct Piece {
  std::string text;
  int byte = -1;
};

std::string byte_token(int byte) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[byte >> 4] + hex[byte & 15] + ">";
}

void replace_all(std::string& s, const std::string& pattern, const std::string& content) {
  for (size_t at = s.find(pattern); at != std::string::npos; at = s.find(pattern, at)) {
    s.replace(at, pattern.size(), content);
    at += content.size();
  }
}

void strip(std::string& s, const DecodeStep& step) {
  const size_t w = step.content.size();
  size_t front = 0, back = 0;
  while (front < step.start && s.compare(front * w, w, step.content) == 0) ++front;
  s.erase(0, front * w);
  while (back < step.stop && s.size() >= (back + 1) * w &&
         s.compare(s.size() - (back + 1) * w, w, step.content) == 0)
    ++back;
  s.resize(s.size() - back * w);
}

void byte_fallback(std::vector<Piece>& pieces) {
  std::vector<Piece> out;
  for (size_t i = 0; i < pieces.size();) {
    if (pieces[i].byte < 0) {
      out.push_back(std::move(pieces[i++]));
      continue;
    }
    std::string run;
    size_t j = i;
    for (; j < pieces.size() && pieces[j].byte >= 0; ++j)
      run.push_back(static_cast<char>(pieces[j].byte));
    const Utf8Check c = check_utf8(run);
    if (c.valid == run.size()) {
      out.push_back({run, -1});
    } else {
      for (size_t k = i; k < j; ++k) out.push_back({kReplacement, -1});
    }
    i = j;
  }
  pieces = std::move(out);
}

// The bytes of `ids` through the chain, before the final UTF-8 conversion.
std::string decode_bytes(const TokenizerImpl& impl, const std::vector<uint32_t>& ids,
                         bool skip_special) {
  const DecoderChain& chain = impl.decoder;
  PSTAR_CHECK(chain.unsupported.empty(), FormatError, "cannot decode with this tokenizer: its ",
              chain.unsupported,
              " is not one pstar runs (ByteLevel, Replace of a string, ByteFallback, Fuse, Strip)");
  std::vector<Piece> pieces;
  pieces.reserve(ids.size());
  for (const uint32_t id : ids) {
    if (id >= impl.texts.size() || (skip_special && impl.special[id])) continue;
    Piece p{impl.texts[id], -1};
    if (impl.bpe.byte_fallback && p.text.size() == 1 &&
        impl.bpe.fallback_ids[static_cast<unsigned char>(p.text[0])] == static_cast<int64_t>(id))
      p.byte = static_cast<unsigned char>(p.text[0]);
    pieces.push_back(std::move(p));
  }
  if (!chain.present) {
    std::string joined;
    for (const auto& p : pieces)
      joined += (joined.empty() ? "" : " ") + (p.byte >= 0 ? byte_token(p.byte) : p.text);
    return joined;
  }
  for (const DecodeStep& step : chain.steps) {
    switch (step.kind) {
      case DecodeStep::Kind::kByteLevel:  // the texts are bytes already (Note [decoding])
        break;
      case DecodeStep::Kind::kReplace:
        for (auto& p : pieces)
          if (p.byte < 0) replace_all(p.text, step.pattern, step.content);
        break;
      case DecodeStep::Kind::kByteFallback:
        byte_fallback(pieces);
        break;
      case DecodeStep::Kind::kFuse: {
        Piece all;
        for (const auto& p : pieces) all.text += p.byte >= 0 ? byte_token(p.byte) : p.text;
        pieces.assign(1, std::move(all));
        break;
      }
      case DecodeStep::Kind::kStrip:
        for (auto& p : pieces) {
          if (p.byte >= 0) p = {byte_token(p.byte), -1};
          strip(p.text, step);
        }
        break;
    }
  }
  std::string out;
  for (const auto& p : pieces) out += p.byte >= 0 ? byte_token(p.byte) : p.text;
  return out;
}

}  // namespace

void read_decoder(const Json& d, const std::string& origin, TokenizerImpl& impl) {
  DecoderChain chain;
  chain.present = !d.is_null();
  read_step(d, "decoder", origin, chain);
  for (const auto& step : chain.steps)
    if (step.kind == DecodeStep::Kind::kByteLevel && !impl.bpe.byte_level)
      chain.unsupported = "ByteLevel decoder over a model without a ByteLevel pre-tokenizer";
  impl.decoder = std::move(chain);
}

void use_byte_level_decoder(TokenizerImpl& impl) {
  impl.decoder = DecoderChain{};
  impl.decoder.present = true;
  impl.decoder.steps.push_back({DecodeStep::Kind::kByteLevel, "", "", 0, 0});
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special) const {
  return lossy_utf8(decode_bytes(*impl_, ids, skip_special));
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::feed(uint32_t id) {
  ids_.push_back(id);
  const TokenizerImpl& impl = tokenizer_.impl();
  // Note [decoding]: a run of <0xNN> tokens at the end waits for the token after it.
  size_t settled = ids_.size();
  const bool fallback =
      std::any_of(impl.decoder.steps.begin(), impl.decoder.steps.end(),
                  [](const DecodeStep& s) { return s.kind == DecodeStep::Kind::kByteFallback; });
  while (fallback && impl.bpe.byte_fallback && settled > 0) {
    const uint32_t last = ids_[settled - 1];
    const std::string& text = tokenizer_.token_text(last);
    if (text.size() != 1 ||
        impl.bpe.fallback_ids[static_cast<unsigned char>(text[0])] != static_cast<int64_t>(last))
      break;
    --settled;
  }
  const std::vector<uint32_t> head(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(settled));
  const std::string bytes = decode_bytes(impl, head, skip_special_);
  size_t end = bytes.size() - incomplete_tail(bytes);
  for (const auto& step : impl.decoder.steps) {
    if (step.kind != DecodeStep::Kind::kStrip) continue;
    const size_t w = step.content.size();
    for (size_t k = 0; k < step.stop && end >= w && bytes.compare(end - w, w, step.content) == 0;
         ++k)
      end -= w;
  }
  if (end <= emitted_) return "";
  std::string out = lossy_utf8(std::string_view(bytes).substr(emitted_, end - emitted_));
  emitted_ = end;
  return out;
}

std::string StreamDecoder::finish() {
  const std::string bytes = decode_bytes(tokenizer_.impl(), ids_, skip_special_);
  std::string out =
      emitted_ < bytes.size() ? lossy_utf8(std::string_view(bytes).substr(emitted_)) : "";
  ids_.clear();
  emitted_ = 0;
  return out;
}

}  // namespace pstar::text
