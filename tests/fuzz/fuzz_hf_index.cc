// model.safetensors.index.json: the fuzz input is the index, beside two small
// valid shards it may (or may not) name correctly.
#include <string>
#include <vector>

#include "shard/ckpt/hf_weights.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// A one-tensor safetensors file: `name`, F32, shape [2].
std::string TinyShard(const std::string& name) {
  const std::string header = "{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(8, '\0');
}

void Write(const std::string& name, const std::string& bytes) {
  shard::fuzz::WriteScratch("hf/" + name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::filesystem::create_directories(shard::fuzz::ScratchDir() + "/hf");
  Write("model-00001-of-00002.safetensors", TinyShard("a"));
  Write("model-00002-of-00002.safetensors", TinyShard("b"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shard::fuzz::WriteScratch("hf/model.safetensors.index.json", data, size);
  auto w = shard::HfWeights::Open(shard::fuzz::ScratchDir() + "/hf");
  shard::fuzz::CheckRefusal(w.status());
  if (!w.ok()) return 0;
  std::vector<float> buf(2);
  for (const auto& name : w->TensorNames()) {
    const shard::TensorInfo* t = w->Find(name);
    if (t && t->supported() && t->numel <= 2) shard::fuzz::CheckRefusal(w->ReadF32(name, t->shape, buf.data()));
  }
  return 0;
}
