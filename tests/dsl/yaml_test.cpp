#include "dsl/yaml.hpp"

#include <gtest/gtest.h>

namespace dynrt::dsl::yaml {
namespace {

struct Parsed {
  SourceFile file;
  DiagnosticSink sink{file};
  std::optional<Node> root;
  explicit Parsed(std::string text, Limits limits = {}) : file("t.yaml", std::move(text)) {
    root = parse_yaml(file, limits, sink);
  }
  std::string text_of(Span s) const { return file.text().substr(s.begin, s.end - s.begin); }
  std::vector<Rule> rules() const {
    std::vector<Rule> out;
    for (const auto& d : sink.diagnostics())
      out.push_back(d.rule);
    return out;
  }
};

TEST(Yaml, NodesCarryExactSpans) {
  Parsed p("a: 1\nb: \"two\"\nc: 'th''ree'\nd:\n  - x\n  - {k: v}\n");
  ASSERT_TRUE(p.root);
  ASSERT_TRUE(p.sink.diagnostics().empty());
  const Node& r = *p.root;
  EXPECT_EQ(p.text_of(r.find("a")->key.span), "a");
  EXPECT_EQ(p.text_of(r.get("a")->span), "1");
  EXPECT_EQ(p.text_of(r.get("b")->span), "\"two\"");
  EXPECT_EQ(r.get("b")->style, Style::double_quoted);
  EXPECT_EQ(p.text_of(r.get("c")->span), "'th''ree'");
  EXPECT_EQ(r.get("c")->value, "th'ree");
  const Node& d = *r.get("d");
  ASSERT_TRUE(d.is_sequence());
  EXPECT_EQ(p.text_of(d.items[0].span), "x");
  EXPECT_EQ(p.text_of(d.items[1].span), "{k: v}");
  EXPECT_EQ(p.file.position(d.items[1].span.begin), (Position{6, 5}));
}

TEST(Yaml, ColumnsCountCodePoints) {
  Parsed p("é€: [ü, x]\n");
  ASSERT_TRUE(p.root);
  const Node& seq = p.root->entries[0].value;
  EXPECT_EQ(p.file.position(seq.items[1].span.begin), (Position{1, 9}));
}

TEST(Yaml, BlockScalarsSpanTheirContent) {
  Parsed p("a: |\n  line one\n  {{x}}\n\nb: >-\n  folded\n  text\nc: 1\n");
  ASSERT_TRUE(p.root);
  const Node& a = *p.root->get("a");
  EXPECT_EQ(a.style, Style::literal);
  EXPECT_EQ(a.value, "line one\n{{x}}\n");
  EXPECT_EQ(p.text_of(a.span), "|\n  line one\n  {{x}}");
  EXPECT_EQ(p.root->get("b")->value, "folded text");
  EXPECT_EQ(p.text_of(p.root->get("b")->span), ">-\n  folded\n  text");
}

TEST(Yaml, EmptyValuesPointAtTheirKey) {
  Parsed p("a:\nb: 2\n");
  ASSERT_TRUE(p.root);
  const Node& a = *p.root->get("a");
  EXPECT_TRUE(a.is_null());
  EXPECT_EQ(p.file.position(a.span.begin), (Position{1, 2}));
}

TEST(Yaml, ResolvesScalarsByTheCoreSchema) {
  Parsed p(
      "i: 42\nneg: -7\nhex: 0x1F\nf: 0.5\ne: 1e3\nb: true\nn: null\nt: ~\ns: yes\nq: \"42\"\n"
      "tagged: !!str 42\nv: 1.2.3\ninf: .inf\n");
  ASSERT_TRUE(p.root);
  const Node& r = *p.root;
  EXPECT_EQ(resolve(*r.get("i")), ScalarType::integer);
  EXPECT_EQ(resolve(*r.get("neg")), ScalarType::integer);
  EXPECT_EQ(resolve(*r.get("hex")), ScalarType::integer);
  EXPECT_EQ(resolve(*r.get("f")), ScalarType::floating);
  EXPECT_EQ(resolve(*r.get("e")), ScalarType::floating);
  EXPECT_EQ(resolve(*r.get("b")), ScalarType::boolean);
  EXPECT_EQ(resolve(*r.get("n")), ScalarType::null);
  EXPECT_EQ(resolve(*r.get("t")), ScalarType::null);
  EXPECT_EQ(resolve(*r.get("s")), ScalarType::string);  // YAML 1.2: yes is a string
  EXPECT_TRUE(is_yaml11_boolean(*r.get("s")));
  EXPECT_EQ(resolve(*r.get("q")), ScalarType::string);
  EXPECT_EQ(resolve(*r.get("tagged")), ScalarType::string);
  EXPECT_EQ(resolve(*r.get("v")), ScalarType::string);
  EXPECT_EQ(resolve(*r.get("inf")), ScalarType::floating);
}

TEST(Yaml, DuplicateKeysAreFoundAndTheFirstIsKept) {
  Parsed p("a: 1\nb: 2\na: 3\n");
  ASSERT_TRUE(p.root);
  EXPECT_EQ(p.rules(), (std::vector<Rule>{Rule::duplicate_key}));
  EXPECT_EQ(p.root->get("a")->value, "1");
  EXPECT_EQ(p.sink.diagnostics()[0].begin, (Position{3, 1}));
}

TEST(Yaml, AliasesAreExpandedAsCopies) {
  Parsed p("base: &b {temperature: 0}\nstage: *b\n");
  ASSERT_TRUE(p.root);
  EXPECT_TRUE(p.sink.diagnostics().empty());
  const Node& copy = *p.root->get("stage");
  ASSERT_TRUE(copy.is_mapping());
  EXPECT_EQ(copy.get("temperature")->value, "0");
  EXPECT_EQ(p.text_of(copy.span), "*b");
}

TEST(Yaml, AnAliasInsideItsOwnAnchorIsACycle) {
  Parsed p("a: &x [1, *x]\n");
  EXPECT_FALSE(p.root);
  EXPECT_EQ(p.rules(), (std::vector<Rule>{Rule::alias_cycle}));
}

TEST(Yaml, AliasBombsHitTheNodeBudget) {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    const char prev = static_cast<char>(c - 1);
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i)
      bomb += std::string(i ? ", *" : "*") + prev;
    bomb += "]\n";
  }
  Parsed p(bomb);
  EXPECT_FALSE(p.root);
  EXPECT_EQ(p.rules(), (std::vector<Rule>{Rule::resource_limit}));
}

TEST(Yaml, NestingIsCapped) {
  Limits limits;
  limits.max_depth = 8;
  Parsed ok("a: [[[[[[1]]]]]]\n", limits);
  EXPECT_TRUE(ok.root);
  Parsed deep("a: [[[[[[[[[[1]]]]]]]]]]\n", limits);
  EXPECT_FALSE(deep.root);
  EXPECT_EQ(deep.rules(), (std::vector<Rule>{Rule::resource_limit}));
  EXPECT_EQ(deep.sink.diagnostics()[0].begin, (Position{1, 11}));
}

TEST(Yaml, LongScalarsAreCapped) {
  Limits limits;
  limits.max_scalar_bytes = 16;
  Parsed p("a: " + std::string(17, 'x') + "\n", limits);
  EXPECT_FALSE(p.root);
  EXPECT_EQ(p.rules(), (std::vector<Rule>{Rule::resource_limit}));
}

TEST(Yaml, ASecondDocumentIsReportedAndTheFirstKept) {
  Parsed p("a: 1\n---\nb: 2\n");
  ASSERT_TRUE(p.root);
  EXPECT_EQ(p.root->get("a")->value, "1");
  EXPECT_EQ(p.rules(), (std::vector<Rule>{Rule::multi_document}));
  EXPECT_EQ(p.sink.diagnostics()[0].begin, (Position{2, 1}));
}

TEST(Yaml, NothingToParseIsAnEmptyFile) {
  for (const char* text : {"", "\n\n", "# only a comment\n"}) {
    Parsed p(text);
    EXPECT_FALSE(p.root) << text;
    EXPECT_EQ(p.rules(), (std::vector<Rule>{Rule::empty_file})) << text;
  }
}

TEST(Yaml, SyntaxErrorsArePositioned) {
  Parsed p("a: [1, 2\nb: 3\n");
  EXPECT_FALSE(p.root);
  ASSERT_EQ(p.rules(), (std::vector<Rule>{Rule::invalid_yaml}));
  EXPECT_GE(p.sink.diagnostics()[0].begin.line, 1);
}

TEST(Yaml, MergeKeysCustomTagsAndComplexKeysAreUnsupported) {
  Parsed p("x: &x {a: 1}\ny:\n  <<: *x\nz: !foo bar\n? [k]\n: v\n");
  EXPECT_EQ(p.rules(), (std::vector<Rule>{Rule::unsupported_yaml, Rule::unsupported_yaml,
                                          Rule::unsupported_yaml}));
}

TEST(Yaml, AnUnquotedTagIsNamedAsTheMappingYamlReadsItAs) {
  Parsed p("messages:\n  - content: {{query}}\n  - [{{a.b}}, x]\n");
  ASSERT_EQ(p.rules(), (std::vector<Rule>{Rule::unsupported_yaml, Rule::unsupported_yaml}));
  const auto& d = p.sink.diagnostics();
  EXPECT_EQ(d[0].message,
            "YAML reads an unquoted {{query}} as a mapping, not as text; quote it: \"{{query}}\"");
  EXPECT_EQ(d[0].begin.line, 2);
  EXPECT_EQ(d[0].begin.column, 14);
  EXPECT_NE(d[1].message.find("quote it: \"{{a.b}}\""), std::string::npos) << d[1].message;
  // A mapping key that is no tag keeps the general wording.
  Parsed q("{{a: {b: 1}}: v}\n");
  ASSERT_EQ(q.rules(), (std::vector<Rule>{Rule::unsupported_yaml}));
  EXPECT_NE(q.sink.diagnostics()[0].message.find("mapping keys must be plain scalars"),
            std::string::npos);
}

TEST(Encoding, AcceptsUtf8Text) {
  EXPECT_FALSE(check_encoding("a: \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\n\ttab\r\n"));
}

TEST(Encoding, FindsTheFirstBadByte) {
  struct Case {
    std::string text;
    std::size_t offset;
  } cases[] = {
      {"ab\xFF", 2},                // never valid
      {"a\xC3(", 1},                // missing continuation
      {"\xC0\xAF", 0},              // overlong
      {"\xE0\x80\xAF", 0},          // overlong
      {"\xED\xA0\x80", 0},          // surrogate
      {"\xF4\x90\x80\x80", 0},      // beyond U+10FFFF
      {"abc\xE2\x82", 3},           // truncated
      {std::string("a\0b", 3), 1},  // NUL
      {"a\x1B[31m", 1},             // escape
      {"\xC2\x80", 0},              // C1 control
  };
  for (const Case& c : cases) {
    const auto bad = check_encoding(c.text);
    ASSERT_TRUE(bad) << c.offset;
    EXPECT_EQ(bad->offset, c.offset);
  }
}

}  // namespace
}  // namespace dynrt::dsl::yaml
