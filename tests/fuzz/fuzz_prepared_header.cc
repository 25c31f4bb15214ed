// The prepared SFT cache's header (PREFIX.json).
#include <string>

#include "shard/data/prepared_dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto h = shard::PreparedHeader::FromJson(text, "prepared.json");
  shard::fuzz::CheckRefusal(h.status());
  if (h.ok()) (void)h->ToJson();
  return 0;
}
