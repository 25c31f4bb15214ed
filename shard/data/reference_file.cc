#include "shard/data/reference_file.h"

#include <cstring>

#include "shard/common/checksum.h"
#include "shard/common/file_util.h"

namespace shard {
namespace {
constexpr char kRefMagic[8] = {'S', 'H', 'D', 'R', 'E', 'F', '0', '1'};
constexpr uint64_t kMaxValues = uint64_t{1} << 40;  // beyond: no prepared set has that many pairs
}  // namespace

uint64_t ReferenceFileSize(uint64_t count) { return sizeof(kRefMagic) + 8 + count * sizeof(double) + 8; }

std::string EncodeReferenceFile(const std::vector<double>& v) {
  std::string out(kRefMagic, sizeof(kRefMagic));
  const uint64_t n = v.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof(n));
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
  const uint64_t h = Xxh64(v.data(), v.size() * sizeof(double));
  out.append(reinterpret_cast<const char*>(&h), sizeof(h));
  return out;
}

StatusOr<std::vector<double>> DecodeReferenceFile(std::string_view bytes, uint64_t count, const std::string& path) {
  if (count > kMaxValues || bytes.size() != ReferenceFileSize(count) ||
      std::memcmp(bytes.data(), kRefMagic, sizeof(kRefMagic)) != 0)
    return DataLoss(path + ": not a reference log-prob file of " + std::to_string(count) + " values");
  uint64_t n = 0, h = 0;
  std::memcpy(&n, bytes.data() + sizeof(kRefMagic), 8);
  std::vector<double> v(count);
  if (count > 0) std::memcpy(v.data(), bytes.data() + sizeof(kRefMagic) + 8, count * sizeof(double));
  std::memcpy(&h, bytes.data() + bytes.size() - 8, 8);
  if (n != count || h != Xxh64(v.data(), v.size() * sizeof(double)))
    return DataLoss(path + ": checksum or count mismatch");
  return v;
}

StatusOr<std::vector<double>> ReadReferenceFile(const std::string& path, uint64_t count) {
  if (count > kMaxValues) return DataLoss(path + ": " + std::to_string(count) + " values is past any prepared set");
  ReadFileOptions o;
  o.follow_links = false;
  o.expected_size = static_cast<int64_t>(ReferenceFileSize(count));
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path, o));
  return DecodeReferenceFile(bytes, count, path);
}

}  // namespace shard
