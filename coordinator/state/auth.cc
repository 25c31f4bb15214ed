#include "coordinator/state/auth.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "coordinator/state/state_dir.h"
#include "shard/common/checksum.h"
#include "shard/common/file_util.h"

namespace shardd {
namespace {

std::string TokenPath(const std::string& state_dir) {
  return (std::filesystem::path(state_dir) / "admin.token").string();
}

}  // namespace

shard::StatusOr<std::string> ReadAdminToken(const std::string& state_dir) {
  const std::string path = TokenPath(state_dir);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return shard::NotFound("no admin token at " + path);
  if (st.st_mode & 077)
    return shard::PermissionDenied(path + " is readable by others (mode " + std::to_string(st.st_mode & 0777) +
                                   "); chmod 600 it");
  ASSIGN_OR_RETURN(std::string token, shard::ReadFileToString(path));
  while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
  if (token.size() < 32) return shard::DataLoss(path + " does not hold a token (too short)");
  return token;
}

shard::StatusOr<std::string> LoadOrCreateAdminToken(const std::string& state_dir) {
  auto existing = ReadAdminToken(state_dir);
  if (existing.ok() || existing.status().code() != shard::StatusCode::kNotFound) return existing;
  RETURN_IF_ERROR(SecureStateDir(state_dir));
  ASSIGN_OR_RETURN(std::string token, RandomHex(24));
  const std::string path = TokenPath(state_dir);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return ReadAdminToken(state_dir);  // another process won the race
    return shard::Internal("cannot create " + path + ": " + std::strerror(errno));
  }
  std::string line = token + "\n";
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return shard::Internal("cannot write " + path);
  return token;
}

shard::StatusOr<std::string> RandomHex(int bytes) {
  std::string raw(bytes, '\0');
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, raw.data(), bytes) != bytes) {
    if (fd >= 0) ::close(fd);
    return shard::Internal("cannot read /dev/urandom for a token");
  }
  ::close(fd);
  return shard::BytesToHex(raw.data(), raw.size());
}

bool TokensEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

namespace {

std::string Sha256Hex(const std::string& s) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), md);
  return shard::BytesToHex(md, sizeof(md));
}

constexpr const char* kHashPrefix = "sha256:";

}  // namespace

std::string HashToken(const std::string& token) { return kHashPrefix + Sha256Hex(token); }

bool IsTokenHash(const std::string& s) {
  return s.size() == 7 + 64 && s.rfind(kHashPrefix, 0) == 0 &&
         s.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
}

bool TokenMatchesHash(const std::string& token, const std::string& hash) {
  return !token.empty() && IsTokenHash(hash) && TokensEqual(HashToken(token), hash);
}

std::string ExternalWorkerToken(const std::string& join_token, int attempt) {
  return Sha256Hex("shardd-external-worker|" + join_token + "|" + std::to_string(attempt)).substr(0, 48);
}

}  // namespace shardd
