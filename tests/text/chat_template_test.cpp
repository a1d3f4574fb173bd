// The chat-template interpreter (Note [chat templates]) on small templates whose output is worked
// out by hand from Jinja2's rules: whitespace control, trim_blocks/lstrip_blocks, loops, scoping,
// namespaces, Python's operators and str methods, tojson, errors; and the origins of the bytes
// (which message's content each byte is). chat_template_real_test.cpp compares the real
// templates with Hugging Face's renderer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pstar/base/error.h"
#include "pstar/text/chat_template.h"

namespace pstar::text {
namespace {

std::string render(const std::string& source, const std::vector<ChatMessage>& messages = {},
                   const ChatOptions& options = {}) {
  return ChatTemplate::parse(source, "test", "<s>", "</s>").render(messages, options).text;
}

TEST(ChatTemplateTest, OutputsTextAndExpressions) {
  EXPECT_EQ(render("a{{ 1 + 2 }}b{{ 'x' ~ 3 }}{{ bos_token }}"), "a3bx3<s>");
  EXPECT_EQ(
      render("{{ none }}|{{ true }}|{{ 2.50 }}|{{ [1, 'a'] }}|{{ {'k': 'v'} }}|{{ nothing }}"),
      "None|True|2.5|[1, 'a']|{'k': 'v'}|");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 }}"),
            "3 -4 1 3.5 8");
  EXPECT_EQ(render("{{ 'ab' * 3 }}{{ [1] + [2] }}"), "ababab[1, 2]");
}

TEST(ChatTemplateTest, WhitespaceControlAndBlockTrimming) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(render("  {% if true %}\n    yes\n  {% endif %}\nend"), "    yes\nend");
  // `-` strips every whitespace character on its side, newlines included.
  EXPECT_EQ(render("a  \n {{- 'b' -}} \n  c"), "abc");
  // An expression tag keeps the newline after it (trim_blocks is for blocks only).
  EXPECT_EQ(render("{{ 'x' }}\ny"), "x\ny");
  // Comments vanish, with the same trimming as blocks.
  EXPECT_EQ(render("a\n  {# note #}\nb"), "a\nb");
  // One final newline of the template is not output (keep_trailing_newline off).
  EXPECT_EQ(render("text\n"), "text");
  EXPECT_EQ(render("text\n\n"), "text\n");
}

TEST(ChatTemplateTest, LoopsConditionsAndScopes) {
  const std::vector<ChatMessage> m = {{"user", "u1"}, {"assistant", "a1"}, {"user", "u2"}};
  EXPECT_EQ(render("{% for x in messages %}{{ loop.index }}{{ x.role[0] }}{% if loop.first %}F"
                   "{% elif loop.last %}L{% else %}-{% endif %}{% endfor %}",
                   m),
            "1uF2a-3uL");
  EXPECT_EQ(render("{% for x in messages if x.role == 'user' %}{{ x['content'] }}{{ loop.length }}"
                   "{% endfor %}",
                   m),
            "u12u22");
  EXPECT_EQ(render("{% for x in [] %}no{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}"
                   "{% continue %}{% endif %}{{ i }}{% endfor %}"),
            "02");
  // A set inside a loop does not leak out of it; a namespace's attributes do.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = 5 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set t %}[{{ a }}]{% endset %}{{ t }}"),
            "21[1]");
  EXPECT_EQ(
      render("{{ messages[1:] | length }}{{ messages[-1].content }}{{ messages[::-1][0].role }}",
             m),
      "2u2user");
}

TEST(ChatTemplateTest, PythonOperatorsTestsAndMethods) {
  EXPECT_EQ(render("{{ 'a' in 'cat' }}{{ 'z' not in ['z'] }}{{ 'role' in {'role': 1} }}"),
            "TrueFalseTrue");
  EXPECT_EQ(render("{{ x is defined }}{{ none is none }}{{ 3 is odd }}{{ {} is mapping }}"
                   "{{ 'a' is string }}{{ [1] is iterable }}{{ 1 is not none }}"),
            "FalseTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ '  hi  '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'Hi'.upper() }}"
                   "|{{ 'abc'.startswith('ab') }}|{{ 'a b  c'.split() }}"),
            "hi|['a', 'b']|HI|True|['a', 'b', 'c']");
  EXPECT_EQ(render("{{ '  \u00a0x\u3000 ' | trim }}|{{ 'héllo' | length }}|{{ [3, 4] | first }}"
                   "|{{ ['a', 'b'] | join('-') }}|{{ y | default('d') }}"),
            "x|5|3|a-b|d");
  EXPECT_EQ(render("{{ 'yes' if 1 > 2 else 'no' }}{{ false or 'fallback' }}{{ 0 and 1 }}"),
            "nofallback0");
  EXPECT_EQ(render("{{ [{'a': 1}, {'a': 0}] | selectattr('a') | list | length }}"), "1");
}

TEST(ChatTemplateTest, StripWithCharactersIsPythons) {
  // str.strip(chars) removes any of the characters from the ends, nothing else (Qwen3's template
  // strips newlines and keeps spaces); None or nothing strips whitespace.
  EXPECT_EQ(render("[{{ '\\n\\n a \\n'.strip('\\n') }}][{{ '\\n\\n a \\n'.lstrip('\\n') }}]"
                   "[{{ '\\n\\n a \\n'.rstrip('\\n') }}]"),
            "[ a ][ a \n][\n\n a ]");
  EXPECT_EQ(render("[{{ 'xyaxbyx'.strip('xy') }}][{{ '  a  '.strip(none) }}][{{ 'aa'.strip('') }}]"
                   "[{{ '\u00e9a\u00e9'.strip('\u00e9') }}][{{ '--a--' | trim('-') }}]"),
            "[axb][a][aa][a][a]");
  // What is stripped keeps the message's origin on what is left (Note [string origins]).
  const auto t = ChatTemplate::parse("<{{ messages[0].content.strip('\\n') }}>", "test", "", "");
  const RenderedChat r = t.render({{"assistant", "\n\nHi\n"}}, {});
  EXPECT_EQ(r.text, "<Hi>");
  ASSERT_EQ(r.spans.size(), 1u);
  EXPECT_EQ(r.spans[0].begin, 1u);
  EXPECT_EQ(r.spans[0].end, 3u);
  EXPECT_THROW(render("{{ 'a'.strip(1) }}"), FormatError);
}

TEST(ChatTemplateTest, ReasoningContentAndKwargsReachTheTemplate) {
  // reasoning_content is defined only where a message has it, and its bytes are the message's.
  std::vector<ChatMessage> m = {{"user", "q"}, {"assistant", "a"}};
  m[1].reasoning_content = "why";
  const auto t = ChatTemplate::parse(
      "{% for x in messages %}{% if x.reasoning_content is defined %}<r>{{ x.reasoning_content }}"
      "</r>{% endif %}{{ x.content }}{% endfor %}{% if enable_thinking is false %}!{% endif %}"
      "{{ level | default('-') }}",
      "test", "", "");
  RenderedChat r = t.render(m, {});
  EXPECT_EQ(r.text, "q<r>why</r>a-");
  ASSERT_EQ(r.spans.size(), 3u);
  EXPECT_EQ(r.spans[1].message, 1);
  EXPECT_EQ(r.text.substr(r.spans[1].begin, r.spans[1].end - r.spans[1].begin), "why");
  // apply_chat_template's keyword arguments: JSON values as the template's variables.
  ChatOptions o;
  o.template_kwargs = R"({"enable_thinking": false, "level": [1, "two", {"k": null}]})";
  EXPECT_EQ(t.render(m, o).text, "q<r>why</r>a![1, 'two', {'k': None}]");
  // A variable pstar sets itself cannot be replaced, and the text must be a JSON object.
  o.template_kwargs = R"({"messages": []})";
  EXPECT_THROW(t.render(m, o), FormatError);
  o.template_kwargs = "[1]";
  EXPECT_THROW(t.render(m, o), FormatError);
}

TEST(ChatTemplateTest, TojsonAsHuggingFaceCallsJsonDumps) {
  EXPECT_EQ(render("{{ {'name': 'f', 'args': [1, 2.5, true, none], 'q': 'é\"\n'} | tojson }}"),
            "{\"name\": \"f\", \"args\": [1, 2.5, true, null], \"q\": \"é\\\"\\n\"}");
  EXPECT_EQ(render("{{ {'a': [1, {}]} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {}\n  ]\n}");
}

TEST(ChatTemplateTest, StrftimeNowOnlyWithAConfiguredDate) {
  const std::string t =
      "{% if strftime_now is defined %}{{ strftime_now('%d %b %Y (%A)') }}"
      "{% else %}no date{% endif %}";
  EXPECT_EQ(render(t), "no date");
  ChatOptions o;
  o.date = "2025-03-14";
  EXPECT_EQ(render(t, {}, o), "14 Mar 2025 (Friday)");
}

TEST(ChatTemplateTest, ErrorsNameTheTemplateTheLineAndWhatIsMissing) {
  auto message_of = [](const std::string& source) {
    try {
      render(source, {{"user", "u"}});
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of("a\n{% macro m() %}{% endmacro %}")
                .find("test, line 2: {% macro %} is not supported"),
            std::string::npos);
  EXPECT_NE(message_of("{{ 'x' | wordcount }}").find("unknown filter 'wordcount'"),
            std::string::npos);
  EXPECT_NE(message_of("{% if true %}open").find("expected {% endif %}"), std::string::npos);
  EXPECT_NE(message_of("{{ raise_exception('Roles must alternate') }}")
                .find("the chat template refused the conversation: Roles must alternate"),
            std::string::npos);
  EXPECT_NE(message_of("{{ 'a' + 1 }}").find("'+' between a string and a integer"),
            std::string::npos);
  EXPECT_NE(message_of("{{ missing.attr }}").find("of an undefined value"), std::string::npos);
  // What the interpreter lacks is refused by name.
  EXPECT_NE(message_of("{% call m() %}x{% endcall %}").find("{% call %} is not supported"),
            std::string::npos);
  EXPECT_NE(message_of("{% filter upper %}x{% endfilter %}").find("{% filter %} is not supported"),
            std::string::npos);
  EXPECT_NE(message_of("{% for m in messages recursive %}{% endfor %}")
                .find("recursive for loops are not supported"),
            std::string::npos);
}

TEST(ChatTemplateTest, ErrorLinesAreTheTemplatesOwnAfterTrimBlocks) {
  // trim_blocks drops the newline after each block tag before lexing; the line of an error is
  // still the template's own: here line 6, after five lines that end with a block tag.
  auto message_of = [](const std::string& source) {
    try {
      render(source, {{"user", "u"}});
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head =
      "{% set a = 1 %}\n{% if true %}\n  {% set b = 2 %}\n{% endif %}\n{# note #}\n";
  EXPECT_NE(message_of(head + "x{{ 'a' + 1 }}").find("test, line 6: "), std::string::npos)
      << message_of(head + "x{{ 'a' + 1 }}");
  EXPECT_NE(message_of(head + "{% macro m() %}{% endmacro %}").find("test, line 6: {% macro %}"),
            std::string::npos);
  // Newlines inside tags, strings and kept text count too.
  EXPECT_NE(message_of("{{ 'a'\n}}\n{{\n 'b' + 1 }}").find("test, line 4: "), std::string::npos)
      << message_of("{{ 'a'\n}}\n{{\n 'b' + 1 }}");
}

TEST(ChatTemplateTest, SpansFollowContentThroughTrimConcatenationAndSlices) {
  const std::vector<ChatMessage> m = {{"user", "  Hi \n"}, {"assistant", "Hello"}};
  const auto t = ChatTemplate::parse(
      "{% for x in messages %}<{{ x.role }}>{{ x.content | trim }}{{ ('[' + x.content[1:3] + ']') "
      "if loop.last }}{% endfor %}",
      "test", "", "");
  const RenderedChat r = t.render(m, {});
  EXPECT_EQ(r.text, "<user>Hi<assistant>Hello[el]");
  ASSERT_EQ(r.spans.size(), 3u);
  EXPECT_EQ(r.text.substr(r.spans[0].begin, r.spans[0].end - r.spans[0].begin), "Hi");
  EXPECT_EQ(r.spans[0].message, 0);
  EXPECT_EQ(r.text.substr(r.spans[1].begin, r.spans[1].end - r.spans[1].begin), "Hello");
  EXPECT_EQ(r.spans[1].message, 1);
  EXPECT_EQ(r.text.substr(r.spans[2].begin, r.spans[2].end - r.spans[2].begin), "el");
  EXPECT_EQ(r.spans[2].message, 1);
  // What a filter rewrites (upper, tojson) is the template's text, not the message's.
  const auto u = ChatTemplate::parse("{{ messages[0].content | upper }}", "test", "", "");
  EXPECT_TRUE(u.render(m, {}).spans.empty());
}

}  // namespace
}  // namespace pstar::text
