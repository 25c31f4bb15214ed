// An HF config.json → LlamaConfig, then the arithmetic a valid config feeds.
#include <string>

#include "shard/spec/llama_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = shard::LlamaConfigFromHfJson(text, "config.json");
  shard::fuzz::CheckRefusal(c.status());
  if (c.ok()) {
    (void)c->ToHfConfigJson();
    (void)c->ShapeHash();
  }
  return 0;
}
