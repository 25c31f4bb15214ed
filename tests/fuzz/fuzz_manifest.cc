// A step's COMMITTED manifest, strict and partial (run-state base) modes.
#include <string>

#include "shard/ckpt/manifest.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool partial : {false, true}) {
    auto m = shard::Manifest::FromJson(text, "COMMITTED", partial);
    shard::fuzz::CheckRefusal(m.status());
    if (m.ok()) (void)m->ToJson();
  }
  return 0;
}
