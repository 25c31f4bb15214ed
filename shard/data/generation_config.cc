#include "shard/data/generation_config.h"

#include <limits>
#include <nlohmann/json.hpp>

namespace shard {

StatusOr<std::vector<int32_t>> GenerationEosIds(const std::string& text, const std::string& path, int64_t vocab_size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(path + ": not valid JSON: " + e.what());  // e.g. a number overflow (1e400)
  }
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  std::vector<int32_t> ids;
  const nlohmann::json e = j.value("eos_token_id", nlohmann::json());
  for (const auto& v : e.is_array() ? e : nlohmann::json::array({e})) {
    if (v.is_null()) continue;
    if (!v.is_number_integer())
      return InvalidArgument(path + ": eos_token_id must be an id or a list of ids, got " + v.dump());
    // Unsigned values past int64 compare as such; signed ones may be negative.
    const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
    const uint64_t u = negative ? 0 : v.get<uint64_t>();
    const uint64_t bound = vocab_size > 0 ? static_cast<uint64_t>(vocab_size)
                                          : static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) + 1;
    if (negative || u >= bound || u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      return InvalidArgument(path + ": eos_token_id " + v.dump() +
                             (vocab_size > 0 ? " is outside the vocabulary of " + std::to_string(vocab_size) + " ids"
                                             : " is not a token id (0 to 2147483647)"));
    ids.push_back(static_cast<int32_t>(u));
  }
  return ids;
}

}  // namespace shard
