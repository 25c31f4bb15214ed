// A safetensors file: header validation at Open, then every small supported
// tensor converted to fp32 (the reads a bad header could steer out of bounds).
#include <vector>

#include "shard/ckpt/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = shard::fuzz::WriteScratch("model.safetensors", data, size);
  auto f = shard::SafetensorsFile::Open(path);
  shard::fuzz::CheckRefusal(f.status());
  if (!f.ok()) return 0;
  std::vector<float> buf;
  for (const auto& t : f->tensors()) {
    if (!t.supported() || t.numel > (1 << 16)) continue;
    buf.assign(static_cast<size_t>(t.numel), 0.f);
    shard::fuzz::CheckRefusal(f->ReadF32(t.name, t.shape, buf.data()));
  }
  return 0;
}
