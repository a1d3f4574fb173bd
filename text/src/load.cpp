// Loading a tokenizer: Hugging Face's tokenizer.json, or GPT-2's vocab.json + merges.txt.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "checksum.h"
#include "load_pipeline.h"
#include "pstar/base/error.h"
#include "pstar/formats/mapped_file.h"
#include "pstar/text/tokenizer.h"
#include "tokenizer_impl.h"
#include "utf8.h"

namespace pstar::text {
namespace {

// The largest id pstar accepts: far above any real vocabulary (Llama 3: 128256, Gemma 3: 262145),
// and low enough that a table by id (a user's statistics, an embedding) stays small. A file with
// an id of 4 billion is refused instead of asking for that much memory.
constexpr uint64_t kMaxId = (uint64_t{1} << 24) - 1;

std::string read_file(const std::string& path) {
  const formats::MappedFile file(path);
  return std::string(reinterpret_cast<const char*>(file.data()), file.size());
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Json parse_json(const std::string& text, const std::string& origin) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    PSTAR_THROW(FormatError, origin, " is not valid JSON: ", e.what());
  }
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The byte-level alphabet (GPT-2's bytes_to_unicode): printable bytes stand for themselves, the
// others for U+0100 + n in byte order. Returns code point -> byte.
const std::unordered_map<uint32_t, unsigned char>& byte_level_decoder() {
  static const auto decoder = [] {
    std::unordered_map<uint32_t, unsigned char> d;
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      d[printable ? b : 256 + n++] = static_cast<unsigned char>(b);
    }
    return d;
  }();
  return decoder;
}

// The raw bytes a vocabulary entry stands for, or nullopt when it has a character outside the
// byte-level alphabet (then no byte sequence reaches it through BPE).
std::optional<std::string> byte_level_bytes(const std::string& key) {
  const auto& decoder = byte_level_decoder();
  if (!check_utf8(key).valid || check_utf8(key).valid != key.size()) return std::nullopt;
  std::string bytes;
  for (size_t i = 0; i < key.size();) {
    const auto it = decoder.find(decode_utf8(key, i));
    if (it == decoder.end()) return std::nullopt;
    bytes.push_back(static_cast<char>(it->second));
  }
  return bytes;
}

class Builder {
 public:
  explicit Builder(std::string origin) : origin_(std::move(origin)) {
    impl_ = std::make_shared<TokenizerImpl>();
  }

  const std::string& origin() const { return origin_; }
  TokenizerImpl& impl() { return *impl_; }

  // The model's vocabulary; bpe.byte_level says how its entries are read (Note [code-point
  // BPE]), and `byte_fallback` that <0x00>..<0xFF> stand for bytes.
  void set_vocab(const Json& vocab, const std::string& what, bool byte_fallback = false) {
    PSTAR_CHECK(vocab.is_object(), FormatError, origin_, ": ", what,
                " must be an object of token -> id, not ", vocab.type_name());
    auto& bpe = impl_->bpe;
    bpe.byte_ids.fill(-1);
    bpe.fallback_ids.fill(-1);
    bpe.byte_fallback = byte_fallback;
    for (const auto& [key, value] : vocab.items()) {
      PSTAR_CHECK(value.is_number_unsigned() && value.get<uint64_t>() <= kMaxId, FormatError,
                  origin_, ": ", what, " entry '", key, "' has id ", value.dump(),
                  ", not an id from 0 to ", kMaxId);
      const auto id = value.get<uint32_t>();
      by_text_[key] = id;
      max_id_ = std::max<int64_t>(max_id_, id);
      if (!bpe.byte_level) {
        add_code_point_entry(key, id);
      } else if (auto bytes = byte_level_bytes(key)) {
        if (bytes->size() == 1) bpe.byte_ids[static_cast<unsigned char>((*bytes)[0])] = id;
        set_text(id, *bytes);
        bpe.vocab.emplace(std::move(*bytes), id);
      } else {
        set_text(id, key);
      }
    }
    impl_->token_ids = by_text_;
  }

  // An entry of a code-point model (Note [code-point BPE]): its text is the key, except that a
  // byte-fallback entry <0xNN> spells its byte, so that token texts spell the text (Note [token
  // offsets]).
  void add_code_point_entry(const std::string& key, uint32_t id) {
    auto& bpe = impl_->bpe;
    unsigned byte = 0;
    char tail = 0;
    if (bpe.byte_fallback && key.size() == 6 &&
        std::sscanf(key.c_str(), "<0x%2X%c", &byte, &tail) == 2 && tail == '>' &&
        std::isxdigit(static_cast<unsigned char>(key[3])) &&
        std::isxdigit(static_cast<unsigned char>(key[4]))) {
      bpe.fallback_ids[byte] = id;
      set_text(id, std::string(1, static_cast<char>(byte)));
    } else {
      set_text(id, key);
    }
    if (check_utf8(key).valid == key.size() && !check_utf8(key).invalid && !key.empty()) {
      size_t i = 0;
      const uint32_t cp = decode_utf8(key, i);
      if (i == key.size()) bpe.char_ids[cp] = id;
    }
    bpe.vocab.emplace(key, id);
  }

  void add_merge(const std::string& a, const std::string& b, uint32_t rank,
                 const std::string& what) {
    auto id_of = [&](const std::string& token) {
      const auto it = by_text_.find(token);
      PSTAR_CHECK(it != by_text_.end(), FormatError, origin_, ": ", what, " ('", a, "' '", b,
                  "') uses '", token, "', which is not in the vocabulary");
      return it->second;
    };
    const uint32_t left = id_of(a), right = id_of(b), merged = id_of(a + b);
    // A later duplicate replaces an earlier one, as Hugging Face's map of merges does.
    impl_->bpe.merges[(uint64_t{left} << 32) | right] = (uint64_t{rank} << 32) | merged;
  }

  void add_added_token(const AddedToken& token) {
    impl_->added.push_back(token);
    (token.normalized ? impl_->normalized_added : impl_->raw_added).add(token.content, token.id);
    impl_->token_ids[token.content] = token.id;
    set_text(token.id, token.content);
    max_id_ = std::max<int64_t>(max_id_, token.id);
  }

  void hash(std::string_view bytes) { fnv1a_field(hash_, bytes); }

  std::optional<uint32_t> id_of_text(const std::string& text) const {
    const auto it = impl_->token_ids.find(text);
    if (it == impl_->token_ids.end()) return std::nullopt;
    return it->second;
  }

  std::shared_ptr<TokenizerImpl> finish(const std::string& form, const std::string& path,
                                        const std::string& config_text) {
    impl_->vocab_size = max_id_ + 1;
    if (!config_text.empty()) read_config(config_text);
    if (!impl_->bos || !impl_->eos) {
      // Without a tokenizer_config.json: the special tokens the common families use.
      auto special = [&](const char* content) -> std::optional<uint32_t> {
        for (const auto& t : impl_->added) {
          if (t.special && t.content == content) return t.id;
        }
        return std::nullopt;
      };
      for (const auto& [bos, eos] :
           {std::pair{"<|endoftext|>", "<|endoftext|>"},
            std::pair{"<|begin_of_text|>", "<|end_of_text|>"}, std::pair{"<s>", "</s>"}}) {
        if (!impl_->bos && special(bos)) impl_->bos = special(bos);
        if (!impl_->eos && special(eos)) impl_->eos = special(eos);
      }
    }
    impl_->texts.assign(static_cast<size_t>(impl_->vocab_size), std::string());
    impl_->special.assign(static_cast<size_t>(impl_->vocab_size), false);
    for (auto& [id, text] : impl_->id_texts) impl_->texts[id] = std::move(text);
    impl_->id_texts.clear();
    for (const auto& t : impl_->added) impl_->special[t.id] = impl_->special[t.id] || t.special;
    impl_->fingerprint = hex64(hash_);
    std::string pipeline;
    for (const auto& n : impl_->normalizers) {
      pipeline += pipeline.empty() ? "" : ", ";
      pipeline += n.kind == Normalizer::Kind::kNfc ? "NFC" : "Replace";
    }
    if (pipeline.empty()) pipeline = "no normalizer";
    for (const auto& p : impl_->pre) {
      pipeline += p.kind == PreTokenizer::Kind::kByteLevel
                      ? std::string(", ByteLevel") + (p.regex ? " (GPT-2 regex)" : "")
                      : ", Split";
    }
    impl_->description =
        str_cat(form, " ", path, ": vocabulary ", impl_->vocab_size, ", ", impl_->bpe.merges.size(),
                " merges, ", impl_->added.size(), " added tokens; ", pipeline, ", BPE",
                impl_->bpe.byte_level ? "" : " over code points",
                impl_->bpe.byte_fallback ? " with byte fallback" : "",
                impl_->bpe.ignore_merges ? " (ignore_merges)" : "");
    return impl_;
  }

 private:
  void set_text(uint32_t id, const std::string& text) { impl_->id_texts[id] = text; }

  void read_config(const std::string& text) {
    const std::string where = "tokenizer_config.json beside " + origin_;
    const Json config = parse_json(text, where);
    PSTAR_CHECK(config.is_object(), FormatError, where, " is not a JSON object");
    auto read = [&](const char* key, std::optional<uint32_t>& slot) {
      const auto it = config.find(key);
      if (it == config.end() || it->is_null()) return;
      std::string content;
      if (it->is_string()) {
        content = it->get<std::string>();
      } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
        content = (*it)["content"].get<std::string>();
      } else {
        PSTAR_THROW(FormatError, where, ": ", key, " must be a string or {\"content\": ...}, not ",
                    it->dump());
      }
      const auto found = impl_->token_ids.find(content);
      PSTAR_CHECK(found != impl_->token_ids.end(), FormatError, where, ": ", key, " '", content,
                  "' is not a token of the tokenizer");
      slot = found->second;
    };
    read("bos_token", impl_->bos);
    read("eos_token", impl_->eos);
  }

  std::string origin_;
  std::shared_ptr<TokenizerImpl> impl_;
  std::unordered_map<std::string, uint32_t> by_text_;
  int64_t max_id_ = -1;
  uint64_t hash_ = kFnvOffset;
};

void read_model(const Json& m, bool byte_level, Builder& b) {
  const std::string& origin = b.origin();
  PSTAR_CHECK(m.is_object(), FormatError, origin, ": model must be an object");
  const auto type_it = m.find("type");
  // Older files leave out the type; a BPE model is the one with merges.
  const std::string type = type_it != m.end() && type_it->is_string()
                               ? type_it->get<std::string>()
                               : (m.contains("merges") ? "BPE" : "(none)");
  PSTAR_CHECK(type == "BPE", FormatError, origin, ": model has type '", type,
              "', which pstar does not support (it supports BPE, byte-level or over code points)");
  auto& bpe = b.impl().bpe;
  bpe.byte_level = byte_level;
  // byte_fallback: a character without an entry becomes its bytes' <0xNN> entries (code-point
  // models; a byte-level model has an entry for every byte and ignores it, as Hugging Face does).
  const bool byte_fallback = optional_bool(m, "byte_fallback", false, "model", origin);
  b.set_vocab(field(m, "vocab", "model", origin), "model.vocab", byte_fallback && !byte_level);
  const auto dropout = m.find("dropout");
  PSTAR_CHECK(dropout == m.end() || dropout->is_null() ||
                  (dropout->is_number() && dropout->get<double>() == 0.0),
              FormatError, origin, ": model.dropout is ", dropout->dump(),
              ", which pstar does not support (BPE dropout makes the ids random; use null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = m.find(key);
    PSTAR_CHECK(
        it == m.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()),
        FormatError, origin, ": model.", key, " is ", it->dump(),
        ", which pstar does not support (the tokenizers it reads use none)");
  }
  bpe.ignore_merges = optional_bool(m, "ignore_merges", false, "model", origin);
  bpe.fuse_unk = optional_bool(m, "fuse_unk", false, "model", origin);
  const auto unk = m.find("unk_token");
  if (unk != m.end() && !unk->is_null()) {
    PSTAR_CHECK(unk->is_string(), FormatError, origin, ": model.unk_token must be a string");
    const auto id = b.impl().token_ids.find(unk->get<std::string>());
    PSTAR_CHECK(id != b.impl().token_ids.end(), FormatError, origin, ": model.unk_token '",
                unk->get<std::string>(), "' is not in model.vocab");
    bpe.unk = id->second;
  }
  const Json& merges = field(m, "merges", "model", origin);
  PSTAR_CHECK(merges.is_array(), FormatError, origin, ": model.merges must be an array");
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& merge = merges[i];
    const std::string what = str_cat("model.merges[", i, "]");
    if (merge.is_string()) {
      // "a b": exactly one space, as Hugging Face reads it.
      const std::string s = merge.get<std::string>();
      const size_t space = s.find(' ');
      PSTAR_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                  FormatError, origin, ": ", what, " '", s,
                  "' is not two tokens separated by one space");
      b.add_merge(s.substr(0, space), s.substr(space + 1), static_cast<uint32_t>(i), what);
    } else {
      PSTAR_CHECK(
          merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
          FormatError, origin, ": ", what, " must be \"a b\" or [\"a\", \"b\"], not ",
          merge.dump());
      b.add_merge(merge[0].get<std::string>(), merge[1].get<std::string>(),
                  static_cast<uint32_t>(i), what);
    }
  }
}

void read_added_tokens(const Json& list, Builder& b) {
  if (list.is_null()) return;
  const std::string& origin = b.origin();
  PSTAR_CHECK(list.is_array(), FormatError, origin, ": added_tokens must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& t = list[i];
    const std::string what = str_cat("added_tokens[", i, "]");
    PSTAR_CHECK(t.is_object(), FormatError, origin, ": ", what, " must be an object");
    const Json& content = field(t, "content", what, origin);
    const Json& id = field(t, "id", what, origin);
    PSTAR_CHECK(content.is_string() && !content.get<std::string>().empty(), FormatError, origin,
                ": ", what, ".content must be a non-empty string");
    PSTAR_CHECK(id.is_number_unsigned() && id.get<uint64_t>() <= kMaxId, FormatError, origin, ": ",
                what, ".id must be an id from 0 to ", kMaxId, ", not ", id.dump());
    AddedToken token;
    token.content = content.get<std::string>();
    token.id = id.get<uint32_t>();
    token.special = optional_bool(t, "special", false, what, origin);
    token.normalized = optional_bool(t, "normalized", !token.special, what, origin);
    for (const char* key : {"single_word", "lstrip", "rstrip"}) {
      PSTAR_CHECK(!optional_bool(t, key, false, what, origin), FormatError, origin, ": ", what,
                  " ('", token.content, "') sets ", key, ": true, which pstar does not support");
    }
    b.add_added_token(token);
  }
}

// The special token a TemplateProcessing post-processor (alone or in a Sequence) puts first in
// its "single" template, by its id in the tokenizer; anything else adds no prefix. Only read for
// prefix_id(): encode() itself is add_special_tokens=False and runs no post-processor.
std::optional<uint32_t> template_prefix(const Json& p, Builder& b) {
  if (!p.is_object()) return std::nullopt;
  const std::string type = p.value("type", "");
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const Json& inner : p["processors"])
      if (auto id = template_prefix(inner, b)) return id;
    return std::nullopt;
  }
  if (type != "TemplateProcessing" || !p.contains("single") || !p["single"].is_array() ||
      p["single"].empty())
    return std::nullopt;
  const Json& first = p["single"][0];
  if (!first.is_object() || !first.contains("SpecialToken")) return std::nullopt;
  const Json& special = first["SpecialToken"];
  if (!special.is_object() || !special.contains("id") || !special["id"].is_string())
    return std::nullopt;
  return b.id_of_text(special["id"].get<std::string>());
}

std::shared_ptr<TokenizerImpl> from_tokenizer_json(const std::string& text,
                                                   const std::string& origin,
                                                   const std::string& config_text) {
  Builder b(origin);
  b.hash(text);
  b.hash(config_text);
  const Json j = parse_json(text, origin);
  PSTAR_CHECK(j.is_object(), FormatError, origin, " is not a JSON object");
  // The pre-tokenizer decides how the model's entries are read (Note [code-point BPE]).
  const bool byte_level = j.contains("pre_tokenizer") && has_byte_level(j["pre_tokenizer"]);
  read_model(field(j, "model", "the tokenizer", origin), byte_level, b);
  // Added tokens after the model: their ids win over vocabulary entries of the same text.
  if (j.contains("added_tokens")) read_added_tokens(j["added_tokens"], b);
  if (j.contains("normalizer")) read_normalizer(j["normalizer"], "normalizer", origin, b.impl());
  if (j.contains("pre_tokenizer"))
    read_pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer", origin, b.impl());
  if (j.contains("post_processor")) b.impl().prefix = template_prefix(j["post_processor"], b);
  if (j.contains("decoder")) read_decoder(j["decoder"], origin, b.impl());
  return b.finish("tokenizer.json", origin, config_text);
}

std::shared_ptr<TokenizerImpl> from_gpt2_folder(const std::string& dir) {
  const std::string vocab_path = dir + "/vocab.json", merges_path = dir + "/merges.txt";
  const std::string vocab_text = read_file(vocab_path), merges_text = read_file(merges_path);
  const std::string config_path = dir + "/tokenizer_config.json";
  const std::string config_text = exists(config_path) ? read_file(config_path) : "";
  Builder b(vocab_path);
  b.hash(vocab_text);
  b.hash(merges_text);
  b.hash(config_text);
  b.set_vocab(parse_json(vocab_text, vocab_path), "vocab.json");
  // merges.txt: one "a b" per line after an optional "#version" line, as Hugging Face reads it.
  size_t line_no = 0, rank = 0;
  for (size_t pos = 0; pos < merges_text.size();) {
    size_t eol = merges_text.find('\n', pos);
    if (eol == std::string::npos) eol = merges_text.size();
    std::string line = merges_text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("#version", 0) == 0) continue;
    if (line.empty() && pos >= merges_text.size()) break;  // the final newline
    const size_t space = line.find(' ');
    PSTAR_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
                FormatError, merges_path, ": line ", line_no, " '", line,
                "' is not two tokens separated by one space");
    b.add_merge(line.substr(0, space), line.substr(space + 1), static_cast<uint32_t>(rank++),
                str_cat(merges_path, " line ", line_no));
  }
  // What Hugging Face's GPT2TokenizerFast builds from these files: ByteLevel without a prefix
  // space, and <|endoftext|> as a special token.
  PreTokenizer t;
  t.kind = PreTokenizer::Kind::kByteLevel;
  t.regex = std::make_unique<Regex>(kGpt2Regex, false, "GPT-2's regex");
  b.impl().pre.push_back(std::move(t));
  use_byte_level_decoder(b.impl());
  const auto eot = b.impl().token_ids.find("<|endoftext|>");
  if (eot != b.impl().token_ids.end())
    b.add_added_token({"<|endoftext|>", eot->second, true, false});
  return b.finish("GPT-2 vocab.json + merges.txt", dir, config_text);
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  PSTAR_CHECK(exists(path), IoError, "tokenizer '", path, "' does not exist");
  if (!is_directory(path)) {
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    const std::string config = dir + "/tokenizer_config.json";
    return Tokenizer(
        from_tokenizer_json(read_file(path), path, exists(config) ? read_file(config) : ""));
  }
  const std::string json_path = path + "/tokenizer.json";
  if (exists(json_path)) return load(json_path);
  PSTAR_CHECK(exists(path + "/vocab.json") && exists(path + "/merges.txt"), IoError,
              "tokenizer folder '", path,
              "' holds neither tokenizer.json nor GPT-2's vocab.json and merges.txt");
  return Tokenizer(from_gpt2_folder(path));
}

Tokenizer Tokenizer::from_json(std::string_view json, const std::string& origin) {
  return Tokenizer(from_tokenizer_json(std::string(json), origin, ""));
}

Tokenizer Tokenizer::bytes() {
  // A byte-level BPE without merges whose entry for byte b (its character in GPT-2's alphabet)
  // has id b: a whole text is one word, every byte one symbol.
  Json vocab = Json::object();
  for (const auto& [cp, b] : byte_level_decoder()) {
    std::string key;
    append_utf8(key, cp);
    vocab[key] = b;
  }
  const Json j = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  return Tokenizer(from_tokenizer_json(j.dump(), "bytes (no tokenizer)", ""));
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<uint32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<uint32_t> Tokenizer::eos_id() const { return impl_->eos; }
const std::string& Tokenizer::fingerprint() const { return impl_->fingerprint; }
const std::string& Tokenizer::description() const { return impl_->description; }

std::optional<uint32_t> Tokenizer::token_id(std::string_view token) const {
  const auto it = impl_->token_ids.find(std::string(token));
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> Tokenizer::prefix_id() const { return impl_->prefix; }

bool Tokenizer::is_special(uint32_t id) const {
  return id < impl_->special.size() && impl_->special[id];
}

const std::string& Tokenizer::token_text(uint32_t id) const {
  static const std::string kNone;
  return id < impl_->texts.size() ? impl_->texts[id] : kNone;
}

}  // namespace pstar::text
