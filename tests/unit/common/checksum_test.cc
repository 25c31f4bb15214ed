#include "shard/common/checksum.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace shard {
namespace {

// BytesToHex serves the tokens (auth), the partner-copy keys and the NCCL id:
// two lowercase digits a byte, high nibble first, nothing else.
TEST(ChecksumTest, BytesToHexIsLowercasePerByte) {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff, 0x10};
  EXPECT_EQ(BytesToHex(bytes, sizeof(bytes)), "000fa5ff10");
  EXPECT_EQ(BytesToHex(bytes, 0), "");
  const uint64_t h = 0x0123456789abcdefull;  // agrees with HashToHex on big-endian bytes
  unsigned char be[8];
  for (int i = 0; i < 8; ++i) be[i] = static_cast<unsigned char>(h >> (56 - 8 * i));
  EXPECT_EQ(BytesToHex(be, sizeof(be)), HashToHex(h));
}

}  // namespace
}  // namespace shard
