#include "shard/ckpt/copy_header.h"

#include <cstring>

namespace shard {
namespace {

constexpr char kMagic[4] = {'S', 'H', 'C', 'P'};

// Reads fixed-size fields and u16-prefixed strings from the front of a view.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (b_.size() - at_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  // 0: need more bytes; -1: longer than max; 1: read.
  int GetString(std::string* s, size_t max) {
    uint16_t n = 0;
    if (b_.size() - at_ < 2) return 0;
    std::memcpy(&n, b_.data() + at_, 2);
    if (n > max) return -1;
    if (b_.size() - at_ - 2 < n) return 0;
    s->assign(b_.data() + at_ + 2, n);
    at_ += 2 + n;
    return 1;
  }
  size_t at() const { return at_; }

 private:
  std::string_view b_;
  size_t at_ = 0;
};

CopyHeaderParse Bad(std::string why, bool answer = true) {
  CopyHeaderParse p;
  p.state = CopyHeaderParse::kBad;
  p.error = std::move(why);
  p.answer = answer;
  return p;
}

void PutString(std::string* out, const std::string& s) {
  const uint16_t n = static_cast<uint16_t>(s.size());
  out->append(reinterpret_cast<const char*>(&n), 2);
  out->append(s);
}

}  // namespace

CopyHeaderParse ParseCopyHeader(std::string_view bytes) {
  CopyHeaderParse p;
  const size_t m = std::min(bytes.size(), sizeof(kMagic));
  if (m > 0 && std::memcmp(bytes.data(), kMagic, m) != 0) return Bad("not a partner copy request", /*answer=*/false);
  Reader r(bytes);
  char magic[4];
  CopyHeader& h = p.header;
  if (!r.Get(&magic) || !r.Get(&h.version)) return p;
  if (h.version != kCopyVersion)
    return Bad("partner copy version " + std::to_string(h.version) + " not spoken (this worker: " +
               std::to_string(kCopyVersion) + ")");
  struct Field {
    std::string* s;
    size_t max;
    const char* what;
  };
  const auto string_field = [&](const Field& f) -> int {
    const int got = r.GetString(f.s, f.max);
    if (got < 0) p = Bad(std::string("the ") + f.what + " is longer than " + std::to_string(f.max) + " bytes");
    return got;
  };
  if (int got = string_field({&h.key, kMaxCopyKey, "key"}); got <= 0) return p;
  if (!r.Get(&h.op)) return p;
  if (h.op != kCopyPut && h.op != kCopyGet) return Bad("unknown operation " + std::to_string(h.op));
  if (int got = string_field({&h.step, kMaxCopyName, "step folder name"}); got <= 0) return p;
  if (int got = string_field({&h.name, kMaxCopyName, "file name"}); got <= 0) return p;
  if (h.op == kCopyPut && (!r.Get(&h.size) || !r.Get(&h.xxh64))) return p;
  p.state = CopyHeaderParse::kDone;
  p.used = r.at();
  return p;
}

std::string EncodeCopyHeader(const CopyHeader& h) {
  std::string out(kMagic, sizeof(kMagic));
  out.append(reinterpret_cast<const char*>(&h.version), 4);
  PutString(&out, h.key);
  out.push_back(static_cast<char>(h.op));
  PutString(&out, h.step);
  PutString(&out, h.name);
  if (h.op == kCopyPut) {
    out.append(reinterpret_cast<const char*>(&h.size), 8);
    out.append(reinterpret_cast<const char*>(&h.xxh64), 8);
  }
  return out;
}

bool ValidCopyStepName(std::string_view s) {
  if (s.size() != 13 || s.substr(0, 5) != "step_") return false;
  for (char c : s.substr(5))
    if (c < '0' || c > '9') return false;
  return true;
}

bool ValidCopyFileName(std::string_view s) {
  if (s.empty() || s.size() >= 200 || s[0] == '.') return false;
  for (char c : s) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace shard
