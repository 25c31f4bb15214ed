// One JSONL row → SFT messages, and the same bytes as a preference pair.
#include <string_view>

#include "shard/data/preference_jsonl.h"
#include "shard/data/sft_jsonl.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto row = shard::ParseSftRow(std::string_view(reinterpret_cast<const char*>(data), size));
  shard::fuzz::CheckRefusal(row.status());
  auto pair = shard::ParsePreferenceRow(std::string_view(reinterpret_cast<const char*>(data), size));
  shard::fuzz::CheckRefusal(pair.status());
  return 0;
}
