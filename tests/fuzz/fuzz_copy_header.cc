// The memory tier's partner-copy request header (shard/ckpt/copy_header.h),
// what any host that reaches a worker's copy port can send before its key is
// checked. A parsed header encodes back to exactly the bytes it used; a
// header still incomplete is never longer than the cap.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "shard/ckpt/copy_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const shard::CopyHeaderParse p = shard::ParseCopyHeader(bytes);
  switch (p.state) {
    case shard::CopyHeaderParse::kDone:
      if (p.used > size || shard::EncodeCopyHeader(p.header) != bytes.substr(0, p.used) ||
          p.header.key.size() > shard::kMaxCopyKey || p.used > shard::kMaxCopyHeader) {
        std::fprintf(stderr, "a parsed header does not encode back to its bytes\n");
        std::abort();
      }
      (void)shard::ValidCopyStepName(p.header.step);
      (void)shard::ValidCopyFileName(p.header.name);
      break;
    case shard::CopyHeaderParse::kNeedMore:
      if (size >= shard::kMaxCopyHeader) {
        std::fprintf(stderr, "%zu bytes still need more: past the header cap\n", size);
        std::abort();
      }
      break;
    case shard::CopyHeaderParse::kBad:
      if (p.error.empty()) {
        std::fprintf(stderr, "refused without a reason\n");
        std::abort();
      }
      break;
  }
  return 0;
}
