// CRC32C (Castagnoli), which TensorBoard's TFRecord framing uses.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shard {

// CRC32C of a byte range (reflected polynomial 0x82F63B78; "123456789" -> 0xE3069283).
uint32_t Crc32c(const void* data, size_t size);

}  // namespace shard
