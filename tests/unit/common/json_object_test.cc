// ParseJsonObject names what is wrong with a JSON file that must hold an
// object: a number too large to read (eos_token_id: 1e400) is a parse error
// with the parser's reason, not "not a JSON object"; other JSON is named by
// its type; and the finite scan behind the weight loaders finds the first
// inf/NaN wherever it sits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "shard/common/finite_scan.h"
#include "shard/common/json_object.h"

namespace shard {
namespace {

TEST(JsonObjectTest, SaysWhatIsWrong) {
  auto big = ParseJsonObject(R"({"eos_token_id": 1e400})", "generation_config.json");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("generation_config.json: not valid JSON: number overflow parsing '1e400'"),
            std::string::npos)
      << big.status().ToString();
  auto cut = ParseJsonObject(R"({"a": )", "config.json");
  EXPECT_NE(cut.status().message().find("config.json: not valid JSON: parse error at line 1"), std::string::npos)
      << cut.status().ToString();
  auto list = ParseJsonObject<nlohmann::ordered_json>("[1]", "config.json");
  EXPECT_NE(list.status().message().find("config.json: not a JSON object (a array)"), std::string::npos)
      << list.status().ToString();
  auto ok = ParseJsonObject(R"({"eos_token_id": 2})", "generation_config.json");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["eos_token_id"], 2);
}

TEST(FiniteScanTest, FindsTheFirstNonFinite) {
  std::vector<float> v(10000, 0.5f);
  EXPECT_EQ(FirstNonFinite(v.data(), static_cast<int64_t>(v.size())), -1);
  EXPECT_EQ(FirstNonFinite(v.data(), 0), -1);
  v[9999] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FirstNonFinite(v.data(), static_cast<int64_t>(v.size())), 9999);
  v[4097] = -std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FirstNonFinite(v.data(), static_cast<int64_t>(v.size())), 4097);
  v[0] = std::numeric_limits<float>::max();  // finite
  v[1] = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(FirstNonFinite(v.data(), static_cast<int64_t>(v.size())), 4097);
}

}  // namespace
}  // namespace shard
