#include "shard/common/kv_stores.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

namespace shard {
namespace {

using Clock = std::chrono::steady_clock;

std::string Errno() { return std::strerror(errno); }

std::string JoinKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ", ";
    out += "'" + keys[i] + "'";
  }
  return out;
}

Status TimedOut(const std::string& store, std::chrono::milliseconds timeout,
                const std::vector<std::string>& missing) {
  return DeadlineExceeded(store + ": timed out after " + std::to_string(timeout.count()) +
                          " ms waiting for key" + (missing.size() == 1 ? " " : "s ") +
                          JoinKeys(missing) +
                          " (a peer has not reached this point; check that every rank "
                          "started with the same rendezvous prefix)");
}

// Parses the decimal int64 an Add stored; absent keys count as 0.
StatusOr<int64_t> ParseCounter(const std::string& store, const std::string& key,
                               const std::string& value) {
  int64_t v = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (ec != std::errc() || ptr != end) {
    return InvalidArgument(store + ": Add on key '" + key + "' whose value '" + value +
                           "' is not an integer");
  }
  return v;
}

// 64-bit FNV-1a: stable across processes and builds (std::hash is not promised to be).
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

// ---- InMemoryKvStore -------------------------------------------------------

Status InMemoryKvStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  cv_.notify_all();
  return OkStatus();
}

StatusOr<std::string> InMemoryKvStore::Get(const std::string& key,
                                           std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool found = cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; });
  if (!found) return TimedOut("InMemoryKvStore", timeout, {key});
  return values_.at(key);
}

Status InMemoryKvStore::Wait(const std::vector<std::string>& keys,
                             std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto all_present = [&] {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return values_.count(k) > 0; });
  };
  if (cv_.wait_for(lock, timeout, all_present)) return OkStatus();
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (!values_.count(k)) missing.push_back(k);
  }
  return TimedOut("InMemoryKvStore", timeout, missing);
}

StatusOr<int64_t> InMemoryKvStore::Add(const std::string& key, int64_t delta) {
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    int64_t current = 0;
    if (it != values_.end()) {
      ASSIGN_OR_RETURN(current, ParseCounter("InMemoryKvStore", key, it->second));
    }
    result = current + delta;
    values_[key] = std::to_string(result);
  }
  cv_.notify_all();
  return result;
}

StatusOr<bool> InMemoryKvStore::Check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.count(key) > 0;
}

// ---- FileKvStore -----------------------------------------------------------

FileKvStore::FileKvStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_)) {
    init_status_ = Unavailable("FileKvStore: cannot create directory '" + dir_ +
                               "': " + (ec ? ec.message() : "not a directory"));
  }
}

std::string FileKvStore::FileNameForKey(const std::string& key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string name = "k_";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      name.push_back(static_cast<char>(c));
    } else {
      name.push_back('%');
      name.push_back(kHex[c >> 4]);
      name.push_back(kHex[c & 15]);
    }
  }
  // NAME_MAX is 255 on Linux; '~' never appears in an escaped name, so a shortened
  // name cannot collide with a full one.
  constexpr size_t kMaxName = 200;
  if (name.size() > kMaxName) {
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(Fnv1a(key)));
    name = name.substr(0, kMaxName - 17) + "~" + hash;
  }
  return name;
}

std::string FileKvStore::PathFor(const std::string& key) const {
  return dir_ + "/" + FileNameForKey(key);
}

StatusOr<std::string> FileKvStore::TryRead(const std::string& key) const {
  const std::string path = PathFor(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("FileKvStore: no key '" + key + "'");
    return Unavailable("FileKvStore: cannot open " + path + " (key '" + key + "'): " + Errno());
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = Errno();
      ::close(fd);
      return Unavailable("FileKvStore: read error on " + path + ": " + err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status FileKvStore::WriteAtomically(const std::string& key, const std::string& value) const {
  static std::atomic<uint64_t> counter{0};
  // Temp names start with '.', which no key file does, and are unique per process,
  // thread and call.
  const std::string tmp =
      dir_ + "/.tmp." + std::to_string(::getpid()) + "." +
      std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()) % 1000000) + "." +
      std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Unavailable("FileKvStore: cannot create " + tmp + " (key '" + key + "'): " + Errno());
  }
  const char* p = value.data();
  size_t left = value.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = Errno();
      ::close(fd);
      ::unlink(tmp.c_str());
      return Unavailable("FileKvStore: write to " + tmp + " failed: " + err);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(fd);
  const std::string path = PathFor(key);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = Errno();
    ::unlink(tmp.c_str());
    return Unavailable("FileKvStore: rename " + tmp + " -> " + path + " failed: " + err);
  }
  return OkStatus();
}

Status FileKvStore::Set(const std::string& key, const std::string& value) {
  RETURN_IF_ERROR(init_status_);
  return WriteAtomically(key, value);
}

StatusOr<std::string> FileKvStore::Get(const std::string& key,
                                       std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(init_status_);
  const auto deadline = Clock::now() + timeout;
  auto backoff = std::chrono::milliseconds(1);
  for (;;) {
    StatusOr<std::string> v = TryRead(key);
    if (v.ok() || v.status().code() != StatusCode::kNotFound) return v;
    const auto now = Clock::now();
    if (now >= deadline) return TimedOut("FileKvStore(" + dir_ + ")", timeout, {key});
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(20));
  }
}

Status FileKvStore::Wait(const std::vector<std::string>& keys,
                         std::chrono::milliseconds timeout) {
  RETURN_IF_ERROR(init_status_);
  const auto deadline = Clock::now() + timeout;
  auto backoff = std::chrono::milliseconds(1);
  for (;;) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      struct stat st;
      if (::stat(PathFor(k).c_str(), &st) != 0) missing.push_back(k);
    }
    if (missing.empty()) return OkStatus();
    const auto now = Clock::now();
    if (now >= deadline) return TimedOut("FileKvStore(" + dir_ + ")", timeout, missing);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(20));
  }
}

StatusOr<int64_t> FileKvStore::Add(const std::string& key, int64_t delta) {
  RETURN_IF_ERROR(init_status_);
  // Lock files are named "L_..." and key files "k_...", so they never collide.
  const std::string lock_path = dir_ + "/L_" + FileNameForKey(key).substr(2);
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return Unavailable("FileKvStore: cannot open lock file " + lock_path + ": " + Errno());
  }
  // flock locks belong to the open file description, so this excludes other threads
  // of this process (each opens its own description) as well as other processes.
  while (::flock(lock_fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      std::string err = Errno();
      ::close(lock_fd);
      return Unavailable("FileKvStore: flock " + lock_path + " failed: " + err);
    }
  }
  StatusOr<int64_t> result = [&]() -> StatusOr<int64_t> {
    int64_t current = 0;
    StatusOr<std::string> v = TryRead(key);
    if (v.ok()) {
      ASSIGN_OR_RETURN(current, ParseCounter("FileKvStore(" + dir_ + ")", key, *v));
    } else if (v.status().code() != StatusCode::kNotFound) {
      return v.status();
    }
    const int64_t next = current + delta;
    RETURN_IF_ERROR(WriteAtomically(key, std::to_string(next)));
    return next;
  }();
  ::flock(lock_fd, LOCK_UN);
  ::close(lock_fd);
  return result;
}

StatusOr<bool> FileKvStore::Check(const std::string& key) {
  RETURN_IF_ERROR(init_status_);
  struct stat st;
  if (::stat(PathFor(key).c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return Unavailable("FileKvStore: stat " + PathFor(key) + " failed: " + Errno());
}

// ---- PrefixKvStore ---------------------------------------------------------

PrefixKvStore::PrefixKvStore(std::shared_ptr<KvStore> base, std::string prefix)
    : base_(std::move(base)), prefix_(std::move(prefix)) {
  SHARD_CHECK_MSG(base_ != nullptr, "PrefixKvStore needs a base store");
}

Status PrefixKvStore::Set(const std::string& key, const std::string& value) {
  return base_->Set(prefix_ + key, value);
}

StatusOr<std::string> PrefixKvStore::Get(const std::string& key,
                                         std::chrono::milliseconds timeout) {
  return base_->Get(prefix_ + key, timeout);
}

Status PrefixKvStore::Wait(const std::vector<std::string>& keys,
                           std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(prefix_ + k);
  return base_->Wait(full, timeout);
}

StatusOr<int64_t> PrefixKvStore::Add(const std::string& key, int64_t delta) {
  return base_->Add(prefix_ + key, delta);
}

StatusOr<bool> PrefixKvStore::Check(const std::string& key) {
  return base_->Check(prefix_ + key);
}

}  // namespace shard
