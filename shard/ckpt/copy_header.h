// The partner copy's request header (shard_copy.h has the whole wire), as a
// pure function over bytes: the server feeds it what arrived so far, and it
// says "need more", "here is the header" or "refused, and why". No socket in
// it, so tests/fuzz/fuzz_copy_header.cc drives it with arbitrary bytes.
//
// Layout (little-endian): "SHCP", u32 version, u16+bytes key, u8 op (1 PUT,
// 2 GET), u16+bytes step folder name, u16+bytes file name; a PUT then u64
// size, u64 xxh64. Each string has a small cap (key 64, names 255), so a
// header is never more than kMaxCopyHeader bytes and a stranger cannot make
// the server hold more than that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shard {

inline constexpr uint32_t kCopyVersion = 2;  // 2: the endpoint's key follows the version
inline constexpr uint8_t kCopyPut = 1, kCopyGet = 2;
inline constexpr size_t kMaxCopyKey = 64, kMaxCopyName = 255;
inline constexpr size_t kMaxCopyHeader = 4 + 4 + 2 + kMaxCopyKey + 1 + 2 * (2 + kMaxCopyName) + 16;

struct CopyHeader {
  uint32_t version = kCopyVersion;
  std::string key;
  uint8_t op = 0;
  std::string step;  // "step_NNNNNNNN"
  std::string name;  // a file of that step folder
  uint64_t size = 0, xxh64 = 0;  // PUT only
};

struct CopyHeaderParse {
  enum State { kNeedMore, kDone, kBad } state = kNeedMore;
  CopyHeader header;   // kDone
  size_t used = 0;     // kDone: the header's bytes
  std::string error;   // kBad: why (one line)
  bool answer = true;  // kBad: false when the bytes are not a partner-copy request at all (no reply)
};

// Parses the header at the start of `bytes`. kNeedMore while `bytes` is a
// proper prefix of a header that could still be valid.
CopyHeaderParse ParseCopyHeader(std::string_view bytes);

// The bytes of `h` (what ParseCopyHeader reads back).
std::string EncodeCopyHeader(const CopyHeader& h);

// The names a peer may ask for: a step folder "step_NNNNNNNN", a file of
// [A-Za-z0-9._-] not starting with '.', so a peer never reaches outside the
// served folder.
bool ValidCopyStepName(std::string_view s);
bool ValidCopyFileName(std::string_view s);

}  // namespace shard
