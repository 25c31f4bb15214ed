#include "shard/ckpt/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "shard/common/checksum.h"
#include "shard/common/fault.h"
#include "shard/common/file_util.h"
#include "shard/common/json_int.h"
#include "shard/common/owned_dir.h"

namespace shard {
namespace {

constexpr uint64_t kMaxHeader = 64ull << 20;
constexpr uint64_t kAlign = 64;

std::string Errno() { return std::strerror(errno); }

// Writes fully or returns an error naming the file; feeds the checksum.
Status WriteAll(int fd, const void* p, size_t n, Xxh64Stream* hash, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  hash->Update(p, n);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return DataLoss("writing checkpoint shard " + path + " failed: " + Errno());
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return OkStatus();
}

}  // namespace

std::string ShardFileName(int shard_rank, int shard_count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "rank_%05d-of-%05d.shard", shard_rank, shard_count);
  return buf;
}

StatusOr<WrittenFile> WriteShardFile(const std::string& step_dir, const ShardHeader& h,
                                     const std::vector<ShardUnitData>& data) {
  if (data.size() != h.units.size()) return Internal("WriteShardFile: unit data does not match the header");
  nlohmann::json j;
  j["step"] = h.step;
  j["world"] = h.world;
  j["rank"] = h.rank;
  j["shard_rank"] = h.shard_rank;
  j["shard_count"] = h.shard_count;
  j["model_hash"] = HashToHex(h.model_hash);
  uint64_t offset = 0;
  bool any_bf16 = false;
  j["units"] = nlohmann::json::array();
  for (const auto& u : h.units) {
    if (u.dtype != DType::kF32 && u.dtype != DType::kBF16)
      return Internal(std::string("WriteShardFile: unit ") + u.name + " has state dtype " + DTypeName(u.dtype) +
                      " (fp32 or bf16 only)");
    nlohmann::json ju = {{"name", u.name}, {"numel", u.numel}, {"begin", u.begin}, {"count", u.count},
                         {"offset", offset}};
    // fp32 units carry no dtype key: their files stay byte for byte version 1.
    if (u.dtype == DType::kBF16) ju["dtype"] = DTypeName(u.dtype);
    any_bf16 |= u.dtype == DType::kBF16;
    j["units"].push_back(std::move(ju));
    offset += static_cast<uint64_t>(u.count) * 3 * DTypeSize(u.dtype);
  }
  std::string json = j.dump();
  uint64_t header_len = json.size();
  uint64_t data_start = (24 + header_len + kAlign - 1) / kAlign * kAlign;

  WrittenFile out;
  out.name = ShardFileName(h.shard_rank, h.shard_count);
  const std::string path = step_dir + "/" + out.name;
  const std::string tmp = path + ".tmp";
  MaybeFault("ckpt_before_write", h.step);
  // 0600 in the memory tier's private folders (owned_dir.h), 0644 elsewhere.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, NewFileMode(step_dir));
  if (fd < 0) return DataLoss("cannot create checkpoint shard " + tmp + ": " + Errno());
  Xxh64Stream hash;
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  char fixed[24] = {};
  std::memcpy(fixed, kShardMagic, 8);
  uint32_t version = any_bf16 ? kShardFormatVersionBf16 : kShardFormatVersion;
  std::memcpy(fixed + 8, &version, 4);
  std::memcpy(fixed + 16, &header_len, 8);
  Status st = WriteAll(fd, fixed, 24, &hash, tmp);
  if (st.ok()) st = WriteAll(fd, json.data(), json.size(), &hash, tmp);
  std::string pad(data_start - 24 - header_len, '\0');
  if (st.ok()) st = WriteAll(fd, pad.data(), pad.size(), &hash, tmp);
  for (size_t u = 0; st.ok() && u < data.size(); ++u) {
    const size_t bytes = static_cast<size_t>(h.units[u].count) * DTypeSize(h.units[u].dtype);
    st = WriteAll(fd, data[u].params, bytes, &hash, tmp);
    if (st.ok() && u == data.size() / 2) MaybeFault("ckpt_mid_write", h.step);
    if (st.ok()) st = WriteAll(fd, data[u].m, bytes, &hash, tmp);
    if (st.ok()) st = WriteAll(fd, data[u].v, bytes, &hash, tmp);
  }
  if (!st.ok()) return fail(st);
  if (::fsync(fd) != 0) return fail(DataLoss("fsync of checkpoint shard " + tmp + " failed: " + Errno()));
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = Errno();
    ::unlink(tmp.c_str());
    return DataLoss("rename " + tmp + " -> " + path + " failed: " + err);
  }
  RETURN_IF_ERROR(FsyncDir(step_dir));
  MaybeFault("ckpt_after_rename", h.step);
  out.size = data_start + offset;
  out.xxh64 = hash.Digest();
  return out;
}

namespace {

// One entry of the header's "units" (nlohmann's exceptions for a missing key
// or a wrong type go to the caller, which names the file).
StatusOr<ShardUnit> ParseShardUnit(const nlohmann::json& u, uint32_t version, const std::string& path) {
  ShardUnit su;
  su.name = u.at("name").get<std::string>();
  su.numel = JsonInt<int64_t>(u.at("numel"));
  su.begin = JsonInt<int64_t>(u.at("begin"));
  su.count = JsonInt<int64_t>(u.at("count"));
  su.offset = JsonInt<uint64_t>(u.at("offset"));
  if (u.contains("dtype")) {
    const std::string dt = u.at("dtype").get<std::string>();
    if (dt != "bf16" || version != kShardFormatVersionBf16)
      return DataLoss("checkpoint shard " + path + ": unit " + su.name + " has state dtype '" + dt +
                      "' (format version " + std::to_string(version) + " holds fp32" +
                      (version == kShardFormatVersionBf16 ? " or bf16)" : " only)"));
    su.dtype = DType::kBF16;
  }
  if (su.begin < 0 || su.count < 0 || su.begin + su.count > su.numel)
    return DataLoss("checkpoint shard " + path + ": unit " + su.name + " range is outside the unit");
  return su;
}

}  // namespace

StatusOr<ShardFileReader> ShardFileReader::Open(const std::string& path) {
  ShardFileReader r;
  r.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("checkpoint shard " + path + " cannot be opened: " + Errno());
  struct stat st {};
  ::fstat(fd, &st);
  r.file_size_ = static_cast<uint64_t>(st.st_size);
  char fixed[24];
  ssize_t n = ::pread(fd, fixed, 24, 0);
  if (n != 24) {
    ::close(fd);
    return DataLoss("checkpoint shard " + path + " is truncated (no header)");
  }
  if (std::memcmp(fixed, kShardMagic, 8) != 0) {
    ::close(fd);
    return DataLoss("checkpoint shard " + path + " has a bad magic (not a shardd shard file)");
  }
  uint32_t version;
  uint64_t header_len;
  std::memcpy(&version, fixed + 8, 4);
  std::memcpy(&header_len, fixed + 16, 8);
  if (version != kShardFormatVersion && version != kShardFormatVersionBf16) {
    ::close(fd);
    return DataLoss("checkpoint shard " + path + " has format version " + std::to_string(version) +
                    "; this shardd reads versions " + std::to_string(kShardFormatVersion) + " and " +
                    std::to_string(kShardFormatVersionBf16));
  }
  if (header_len > kMaxHeader || 24 + header_len > r.file_size_) {
    ::close(fd);
    return DataLoss("checkpoint shard " + path + ": header length " + std::to_string(header_len) +
                    " exceeds the file size " + std::to_string(r.file_size_));
  }
  std::string json(header_len, '\0');
  n = ::pread(fd, json.data(), header_len, 24);
  ::close(fd);
  if (n != static_cast<ssize_t>(header_len)) return DataLoss("checkpoint shard " + path + ": short header read");
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return DataLoss("checkpoint shard " + path + ": header is not JSON");
  try {
    ShardHeader& h = r.header_;
    h.step = JsonInt<int64_t>(j.at("step"));
    h.world = JsonInt<int>(j.at("world"));
    h.rank = JsonInt<int>(j.at("rank"));
    h.shard_rank = JsonInt<int>(j.at("shard_rank"));
    h.shard_count = JsonInt<int>(j.at("shard_count"));
    auto hash = HashFromHex(j.at("model_hash").get<std::string>());
    if (!hash.ok()) return hash.status().WithContext("checkpoint shard " + path + ": model_hash");
    h.model_hash = *hash;
    for (const auto& u : j.at("units")) {
      ASSIGN_OR_RETURN(ShardUnit su, ParseShardUnit(u, version, path));
      h.units.push_back(std::move(su));
    }
  } catch (const nlohmann::json::exception& e) {
    return DataLoss("checkpoint shard " + path + ": malformed header: " + e.what());
  }
  // Version 2 exists to mark bf16 state: one without a bf16 unit was not written by shardd.
  if (version == kShardFormatVersionBf16 &&
      std::none_of(r.header_.units.begin(), r.header_.units.end(),
                   [](const ShardUnit& u) { return u.dtype == DType::kBF16; }))
    return DataLoss("checkpoint shard " + path + " has format version 2 but no bf16 unit (version 2 marks bf16 "
                    "optimizer state; fp32 shards are version 1)");
  r.data_start_ = (24 + header_len + kAlign - 1) / kAlign * kAlign;
  for (const auto& u : r.header_.units) {
    const uint64_t need = r.data_start_ + u.offset + static_cast<uint64_t>(u.count) * 3 * DTypeSize(u.dtype);
    if (need > r.file_size_)
      return DataLoss("checkpoint shard " + path + " is truncated: unit " + u.name + " needs bytes up to " +
                      std::to_string(need) + ", the file has " +
                      std::to_string(r.file_size_));
  }
  return r;
}

Status ShardFileReader::Read(int u, int which, int64_t from, int64_t n, float* dst) const {
  const ShardUnit& su = header_.units.at(u);
  if (from < su.begin || from + n > su.begin + su.count || which < 0 || which > 2)
    return OutOfRange("checkpoint shard " + path_ + ": read outside unit " + su.name);
  const uint64_t es = DTypeSize(su.dtype);
  uint64_t off = data_start_ + su.offset + static_cast<uint64_t>(which) * su.count * es +
                 static_cast<uint64_t>(from - su.begin) * es;
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("checkpoint shard " + path_ + " cannot be opened: " + Errno());
  size_t want = static_cast<size_t>(n) * es;
  // bf16: read into the back half of dst, then widen front to back (element
  // i's fp32 lands at or before byte 4i, past nothing still unread).
  char* p = reinterpret_cast<char*>(dst) + (es == 2 ? static_cast<size_t>(n) * 2 : 0);
  const char* narrow = p;
  while (want > 0) {
    ssize_t got = ::pread(fd, p, want, static_cast<off_t>(off));
    if (got <= 0) {
      ::close(fd);
      return DataLoss("checkpoint shard " + path_ + ": short read at byte " + std::to_string(off));
    }
    p += got;
    off += static_cast<uint64_t>(got);
    want -= static_cast<size_t>(got);
  }
  ::close(fd);
  if (es == 2) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, narrow + 2 * i, 2);
      dst[i] = BF16ToF32(h);
    }
  }
  return OkStatus();
}

}  // namespace shard
