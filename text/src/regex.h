// PCRE2 (Debian's libpcre2-8) behind RAII owners: the pre-tokenizers' regular expressions,
// compiled with UTF and UCP (so \s, \w, \d and \p{..} are Unicode-aware, as in Oniguruma, which
// Hugging Face uses) and JIT-compiled where the library supports it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace pstar::text {

class Regex {
 public:
  // FormatError naming `what` (e.g. "pre_tokenizer.pretokenizers[0].pattern.Regex"), PCRE2's
  // message and the offset in the pattern when it does not compile. `literal`: the pattern is a
  // plain string (Split's {"String": ...}).
  Regex(const std::string& pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  pcre2_real_code_8* code() const { return code_; }
  // The longest lookbehind, in characters (PCRE2_INFO_MAXLOOKBEHIND; \b counts 1).
  uint32_t max_lookbehind() const { return max_lookbehind_; }
  bool jit() const { return jit_; }
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
  uint32_t max_lookbehind_ = 0;
  bool jit_ = false;
};

// Per-thread match state: match data sized for one pair, a JIT stack that grows to 4 MiB.
class Matcher {
 public:
  Matcher();
  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  enum class Result { kMatch, kNoMatch, kPartial };
  // Searches `subject` (valid UTF-8, already checked) from `start`. `partial`: PCRE2's hard
  // partial matching (Note [whole-text equivalence] in tokenizer.h): kPartial when the end of the
  // subject was reached and more text could change the result. `notbol`: the subject does not
  // start where the text starts (^ must not match there). `notempty_atstart`+`anchored`: the retry
  // after an empty match. On kMatch and kPartial, [*begin, *end) is what was found.
  Result find(const Regex& regex, std::string_view subject, size_t start, bool partial, bool notbol,
              bool retry_after_empty, size_t* begin, size_t* end);

 private:
  pcre2_real_match_data_8* data_ = nullptr;
  pcre2_real_match_context_8* context_ = nullptr;
  pcre2_real_jit_stack_8* stack_ = nullptr;
};

// One piece of a split: [begin, end) and whether the pattern matched it.
struct Span {
  size_t begin, end;
  bool is_match;
};

// Appends the matches of `regex` in subject[from, size) and the gaps between them to `spans`, in
// order; empty matches are reported as empty spans. With `partial`, stops before anything whose
// extent depends on text after the subject and returns where the spans end (the end of the last
// match that is final); without it, the spans cover [from, size) and the return is size.
size_t find_spans(const Regex& regex, Matcher& matcher, std::string_view subject, size_t from,
                  bool partial, bool notbol, std::vector<Span>& spans);

}  // namespace pstar::text
