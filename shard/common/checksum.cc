#include "shard/common/checksum.h"

#include <xxhash.h>

#include <cstdio>
#include <vector>

namespace shard {

uint64_t Xxh64(const void* data, size_t size, uint64_t seed) { return XXH64(data, size, seed); }

Xxh64Stream::Xxh64Stream() : state_(XXH64_createState()) { XXH64_reset(static_cast<XXH64_state_t*>(state_), 0); }
Xxh64Stream::~Xxh64Stream() { XXH64_freeState(static_cast<XXH64_state_t*>(state_)); }
void Xxh64Stream::Update(const void* data, size_t size) {
  XXH64_update(static_cast<XXH64_state_t*>(state_), data, size);
}
uint64_t Xxh64Stream::Digest() const { return XXH64_digest(static_cast<const XXH64_state_t*>(state_)); }

StatusOr<uint64_t> Xxh64File(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return NotFound("cannot open " + path);
  Xxh64Stream h;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.Update(buf.data(), n);
  bool err = std::ferror(f);
  std::fclose(f);
  if (err) return DataLoss("read error while hashing " + path);
  return h.Digest();
}

std::string HashToHex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string BytesToHex(const void* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) s += {kDigits[p[i] >> 4], kDigits[p[i] & 15]};
  return s;
}

StatusOr<uint64_t> HashFromHex(const std::string& s) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    return DataLoss("'" + s + "' is not a 16-digit hex xxh64");
  return static_cast<uint64_t>(std::stoull(s, nullptr, 16));
}

}  // namespace shard
