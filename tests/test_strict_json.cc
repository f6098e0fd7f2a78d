// parse_strict_json: nlohmann's parse, and a key given twice in one object
// refused with the object's path, wherever it is; against nlohmann's own
// parse for what it accepts.
#include <gtest/gtest.h>

#include <string>

#include "runtime/core/strict_json.h"

namespace zerod {
namespace {

std::string refusal(const std::string& text) {
  absl::StatusOr<nlohmann::json> j = parse_strict_json(text, "job.json");
  EXPECT_FALSE(j.ok()) << text;
  EXPECT_TRUE(absl::IsInvalidArgument(j.status())) << j.status();
  return std::string(j.status().message());
}

TEST(StrictJson, ParsesWhatNlohmannParsesTheSame) {
  for (const std::string text : {R"({"a": 1, "b": [1, 2, {"a": 3}], "c": {"a": {"a": null}}, "d": "x"})", "[]", "5",
                                 R"([{"a": 1}, {"a": 2}])", R"({"": 1, "a": {"": 2}})"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<nlohmann::json> j = parse_strict_json(text, "job.json");
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(*j, nlohmann::json::parse(text));
  }
}

TEST(StrictJson, ADuplicateKeyIsRefusedWithItsPath) {
  EXPECT_EQ(refusal(R"({"steps": 1, "steps": 2})"),
            "job.json is not valid JSON: duplicate key 'steps' in the top level");
  EXPECT_EQ(refusal(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {}, "stage": 3}})"),
            "job.json is not valid JSON: duplicate key 'stage' in zero_optimization");
  EXPECT_EQ(refusal(R"({"run": {"checkpoint": {"dir": "a", "dir": "b"}}})"),
            "job.json is not valid JSON: duplicate key 'dir' in run.checkpoint");
  EXPECT_EQ(refusal(R"({"optimizer": {"betas": [{"x": 1, "x": 1}]}})"),
            "job.json is not valid JSON: duplicate key 'x' in optimizer.betas");
  // The empty key is a key like any other.
  EXPECT_EQ(refusal(R"({"": 1, "": 2})"), "job.json is not valid JSON: duplicate key '' in the top level");
  // After a nested object closes, its keys are not the outer object's.
  EXPECT_EQ(refusal(R"({"a": {"b": 1}, "b": 2, "a": 3})"),
            "job.json is not valid JSON: duplicate key 'a' in the top level");
}

TEST(StrictJson, SyntaxErrorsKeepTheParsersPosition) {
  const std::string why = refusal(R"({"a": 1,})");
  EXPECT_EQ(why.find("job.json is not valid JSON: "), 0u) << why;
  EXPECT_NE(why.find("column 9"), std::string::npos) << why;
  EXPECT_NE(refusal("").find("job.json is not valid JSON"), std::string::npos);
  EXPECT_NE(refusal("{\"a\": \"\xff\"}").find("job.json is not valid JSON"), std::string::npos);
}

// Found by fuzz/fuzz_job_config: nlohmann throws out_of_range, not a
// parse_error, for a number past a double's range, and it escaped.
TEST(StrictJson, ANumberPastADoublesRangeIsRefused) {
  for (const std::string text : {R"({"lr": 1e999})", R"([-66666666E66666])", "3e730"}) {
    const std::string why = refusal(text);
    EXPECT_EQ(why.find("job.json is not valid JSON: "), 0u) << why;
    EXPECT_NE(why.find("number overflow"), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace zerod
