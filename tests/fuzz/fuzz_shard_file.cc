// A checkpoint shard file: magic, version, JSON header and the size it
// promises; then a few elements of every unit read through the bounds checks.
#include <algorithm>
#include <vector>

#include "shard/ckpt/shard_file.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = shard::fuzz::WriteScratch("rank_00000-of-00001.shard", data, size);
  auto r = shard::ShardFileReader::Open(path);
  shard::fuzz::CheckRefusal(r.status());
  if (!r.ok()) return 0;
  std::vector<float> buf(64);
  const auto& units = r->header().units;
  for (size_t u = 0; u < units.size(); ++u) {
    const int64_t n = std::min<int64_t>(units[u].count, 64);
    for (int which = 0; which < 3; ++which)
      shard::fuzz::CheckRefusal(r->Read(static_cast<int>(u), which, units[u].begin, n, buf.data()));
  }
  return 0;
}
