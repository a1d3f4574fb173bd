#define PCRE2_CODE_UNIT_WIDTH 8
#include "regex.h"

#include <pcre2.h>

#include "pstar/base/error.h"

namespace pstar::text {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, const std::string& what)
    : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL takes no UCP (a literal has no classes for it to change).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                        &error, &offset, nullptr);
  PSTAR_CHECK(code_ != nullptr, FormatError, what, " '", pattern,
              "' is not a regular expression PCRE2 accepts: ", pcre2_message(error), " at offset ",
              offset);
  uint32_t lookbehind = 0;
  pcre2_pattern_info(code_, PCRE2_INFO_MAXLOOKBEHIND, &lookbehind);
  max_lookbehind_ = lookbehind;
  // JIT is an optimisation: where the library or the CPU lacks it, the interpreter gives the same
  // matches.
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

Matcher::Matcher() {
  data_ = pcre2_match_data_create(1, nullptr);
  context_ = pcre2_match_context_create(nullptr);
  stack_ = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  PSTAR_INTERNAL_ASSERT(data_ && context_ && stack_, "out of memory creating PCRE2 match state");
  pcre2_jit_stack_assign(context_, nullptr, stack_);
}

Matcher::~Matcher() {
  pcre2_jit_stack_free(stack_);
  pcre2_match_context_free(context_);
  pcre2_match_data_free(data_);
}

Matcher::Result Matcher::find(const Regex& regex, std::string_view subject, size_t start,
                              bool partial, bool notbol, bool retry_after_empty, size_t* begin,
                              size_t* end) {
  // The subject was checked once (check_utf8), so PCRE2 need not check it on every call.
  uint32_t options = PCRE2_NO_UTF_CHECK;
  if (partial) options |= PCRE2_PARTIAL_HARD;
  if (notbol) options |= PCRE2_NOTBOL;
  if (retry_after_empty) options |= PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
  const int rc = pcre2_match(regex.code(), reinterpret_cast<PCRE2_SPTR>(subject.data()),
                             subject.size(), start, options, data_, context_);
  if (rc == PCRE2_ERROR_NOMATCH) return Result::kNoMatch;
  PSTAR_CHECK(rc >= 0 || rc == PCRE2_ERROR_PARTIAL, FormatError, "regular expression '",
              regex.pattern(), "' failed on the text: ", pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data_);
  *begin = ovector[0];
  *end = ovector[1];
  return rc == PCRE2_ERROR_PARTIAL ? Result::kPartial : Result::kMatch;
}

size_t find_spans(const Regex& regex, Matcher& matcher, std::string_view subject, size_t from,
                  bool partial, bool notbol, std::vector<Span>& spans) {
  size_t pos = from;       // where the next search starts
  size_t last_end = from;  // the end of the last match (or `from`)
  bool after_empty = false;
  while (pos <= subject.size()) {
    size_t b = 0, e = 0;
    Matcher::Result r = matcher.find(regex, subject, pos, partial, notbol, after_empty, &b, &e);
    if (after_empty && r == Matcher::Result::kNoMatch) {
      // After an empty match, the next search starts one character later (as Perl and
      // Oniguruma iterate).
      after_empty = false;
      if (pos >= subject.size()) break;
      size_t next = pos + 1;
      while (next < subject.size() && (static_cast<unsigned char>(subject[next]) & 0xc0) == 0x80)
        ++next;
      pos = next;
      continue;
    }
    if (r != Matcher::Result::kMatch) {
      if (r == Matcher::Result::kPartial || partial) return last_end;
      break;
    }
    if (b > last_end) spans.push_back({last_end, b, false});
    spans.push_back({b, e, true});
    last_end = e;
    pos = e;
    after_empty = (b == e);
  }
  if (subject.size() > last_end) spans.push_back({last_end, subject.size(), false});
  return subject.size();
}

}  // namespace pstar::text
