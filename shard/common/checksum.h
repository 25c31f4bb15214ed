// xxh64 checksums of byte ranges and whole files (checkpoint integrity).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shard/common/status.h"

namespace shard {

uint64_t Xxh64(const void* data, size_t size, uint64_t seed = 0);
// Streams the file; NOT_FOUND/DATA_LOSS name the path.
StatusOr<uint64_t> Xxh64File(const std::string& path);
std::string HashToHex(uint64_t h);                    // 16 lowercase hex digits
StatusOr<uint64_t> HashFromHex(const std::string& s);  // inverse; names the bad text
// Two lowercase hex digits per byte, in order (tokens, keys, digests).
std::string BytesToHex(const void* data, size_t n);

// An incremental xxh64 (not copyable).
class Xxh64Stream {
 public:
  Xxh64Stream();
  ~Xxh64Stream();
  Xxh64Stream(const Xxh64Stream&) = delete;
  Xxh64Stream& operator=(const Xxh64Stream&) = delete;
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  void* state_;
};

}  // namespace shard
