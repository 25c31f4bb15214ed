// tokenizer.json → HfTokenizer, then an encode/decode of fixed text (the
// merges, normalizer and pre-tokenizer a file describes all run on it).
#include <vector>

#include "shard/data/hf_tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto tok = shard::HfTokenizer::Parse(text, "", "tokenizer.json");
  shard::fuzz::CheckRefusal(tok.status());
  if (!tok.ok()) return 0;
  std::vector<int32_t> ids;
  (*tok)->Encode("Hello, world! 123 <s> \xc3\xa9t\xc3\xa9  \n\tend", &ids);
  (void)(*tok)->Decode(ids);
  std::vector<int32_t> first;
  for (int32_t i = 0; i < 32 && i < (*tok)->vocab_size(); ++i) first.push_back(i);
  (void)(*tok)->Decode(first);
  return 0;
}
