// A preference job's stored reference log-probs (shard/data/reference_file.h):
// decoded for the count the bytes' size implies and for the count they
// claim (a huge claim must be refused before anything is allocated); a
// decoded file encodes back to the same bytes. Then the same bytes as a file
// on disk through ReadReferenceFile.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "shard/data/reference_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void Decode(std::string_view bytes, uint64_t count) {
  auto v = shard::DecodeReferenceFile(bytes, count, "ref.f64");
  shard::fuzz::CheckRefusal(v.status());
  if (v.ok() && shard::EncodeReferenceFile(*v) != bytes) {
    std::fprintf(stderr, "a decoded reference does not encode back to its bytes\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const uint64_t implied = size >= 24 ? (size - 24) / 8 : 0;
  Decode(bytes, implied);
  uint64_t claimed = 0;
  if (size >= 16) std::memcpy(&claimed, data + 8, 8);
  Decode(bytes, claimed);
  const std::string path = shard::fuzz::WriteScratch("ref.f64", data, size);
  shard::fuzz::CheckRefusal(shard::ReadReferenceFile(path, implied).status());
  shard::fuzz::CheckRefusal(shard::ReadReferenceFile(path, claimed).status());
  return 0;
}
