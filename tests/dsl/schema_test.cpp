#include "dsl/schema.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

namespace dynrt::dsl::schema {
namespace {

TEST(JsonSchema, DocsHoldTheSchemaTheLinterUses) {
  const nlohmann::json published =
      nlohmann::json::parse(testing::read_file("docs/template.schema.json"), nullptr, false);
  ASSERT_FALSE(published.is_discarded()) << "docs/template.schema.json is not JSON";
  EXPECT_EQ(published, json_schema())
      << "regenerate it: ./build/dynrt schema > docs/template.schema.json";
}

TEST(JsonSchema, DescribesEveryObjectOfTheLanguage) {
  const nlohmann::json s = json_schema();
  for (const char* def : {"Stage", "ModelStage", "ToolStage", "UserStage", "Decision", "Candidates",
                          "StaticCandidates", "ExtractCandidates", "Selection", "Loop", "Limits",
                          "Params", "Extract", "Input"}) {
    EXPECT_TRUE(s["$defs"].contains(def)) << def;
  }
  EXPECT_EQ(s["required"], nlohmann::json({"version", "workflow", "stages"}));
  EXPECT_FALSE(s["additionalProperties"].get<bool>());
  EXPECT_TRUE(s["$defs"]["Params"]["additionalProperties"].get<bool>());
}

TEST(Names, FollowTheirSyntax) {
  EXPECT_TRUE(valid_name(NameKind::identifier, "query_2"));
  EXPECT_FALSE(valid_name(NameKind::identifier, "2query"));
  EXPECT_FALSE(valid_name(NameKind::identifier, "a-b"));
  EXPECT_FALSE(valid_name(NameKind::identifier, "a.b"));
  EXPECT_TRUE(valid_name(NameKind::stage, "read-passage"));
  EXPECT_FALSE(valid_name(NameKind::stage, "-x"));
  EXPECT_TRUE(valid_name(NameKind::workflow, "routing.v2"));
  EXPECT_FALSE(valid_name(NameKind::workflow, "a b"));
  EXPECT_FALSE(valid_name(NameKind::stage, std::string(129, 'a')));
}

TEST(PointerToken, EscapesTildeAndSlash) {
  EXPECT_EQ(pointer_token("a/b~c"), "a~1b~0c");
}

}  // namespace
}  // namespace dynrt::dsl::schema

namespace dynrt::dsl {
namespace {

// docs/templates.md quotes the shipped templates; this keeps the quotes current.
TEST(Docs, TemplateReferenceQuotesTheShippedTemplatesVerbatim) {
  const std::string doc = testing::read_file("docs/templates.md");
  for (const char* name : {"routing", "react", "subagent", "hci", "coding-agent"}) {
    const std::string text = testing::read_file(std::string("templates/") + name + ".yaml");
    ASSERT_FALSE(text.empty()) << name;
    EXPECT_NE(doc.find("```yaml\n" + text + "```"), std::string::npos)
        << "docs/templates.md does not quote templates/" << name << ".yaml as it is now";
  }
}

}  // namespace
}  // namespace dynrt::dsl
