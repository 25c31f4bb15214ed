#include "coordinator/server/dashboard_access.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include "coordinator/state/auth.h"

namespace shardd {

std::string HostHeaderName(const std::string& host_header) {
  std::string h = host_header;
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    h = close == std::string::npos ? h.substr(1) : h.substr(1, close - 1);
  } else if (const size_t colon = h.find(':'); colon != std::string::npos && h.find(':', colon + 1) == std::string::npos) {
    h = h.substr(0, colon);  // one colon: name:port (several: a bare IPv6 literal)
  }
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  if (!h.empty() && h.back() == '.') h.pop_back();
  return h;
}

bool HostAllowed(const std::string& host_header, const std::vector<std::string>& names) {
  if (host_header.empty()) return true;
  const std::string host = HostHeaderName(host_header);
  if (host.empty()) return false;
  unsigned char addr[16];
  if (inet_pton(AF_INET, host.c_str(), addr) == 1 || inet_pton(AF_INET6, host.c_str(), addr) == 1) return true;
  if (host == "localhost") return true;
  for (const std::string& name : names)
    if (HostHeaderName(name) == host) return true;
  return false;
}

bool IsLoopbackPeer(const std::string& remote_addr) {
  return remote_addr.rfind("127.", 0) == 0 || remote_addr == "::1" || remote_addr.rfind("::ffff:127.", 0) == 0;
}

std::string CookieToken(const std::string& cookies) {
  const std::string key = std::string(kDashboardCookie) + "=";
  for (size_t at = 0; at < cookies.size();) {
    while (at < cookies.size() && (cookies[at] == ' ' || cookies[at] == ';')) ++at;
    const size_t end = std::min(cookies.find(';', at), cookies.size());
    if (cookies.compare(at, key.size(), key) == 0) return cookies.substr(at + key.size(), end - at - key.size());
    at = end;
  }
  return "";
}

bool HttpAuthorized(const std::string& remote_addr, const std::string& authorization, const std::string& cookies,
                    const std::string& token, bool trust_loopback) {
  if (trust_loopback && IsLoopbackPeer(remote_addr)) return true;
  if (token.empty()) return false;
  if (authorization.rfind("Bearer ", 0) == 0 && TokensEqual(authorization.substr(7), token)) return true;
  const std::string cookie = CookieToken(cookies);
  return !cookie.empty() && TokensEqual(cookie, token);
}

std::string SafeNextPath(const std::string& next) {
  if (next.empty() || next[0] != '/' || next.size() > 512) return "/";
  if (next.size() > 1 && (next[1] == '/' || next[1] == '\\')) return "/";
  for (unsigned char c : next)
    if (c < 0x20 || c == 0x7f || c == '\\') return "/";
  return next;
}

shard::StatusOr<std::string> LoginNonces::Issue(std::chrono::seconds ttl, Clock::time_point now) {
  if (ttl.count() <= 0 || ttl > kMaxTtl)
    return shard::InvalidArgument("a login link's lifetime must be 1 s to 24 h, not " + std::to_string(ttl.count()) +
                                  " s");
  ASSIGN_OR_RETURN(std::string nonce, RandomHex(16));
  std::lock_guard<std::mutex> lock(mu_);
  PruneLocked(now);
  if (expiry_by_hash_.size() >= capacity_)
    return shard::ResourceExhausted(std::to_string(capacity_) +
                                    " login links are outstanding; use one, wait for them to expire, or log in with "
                                    "the admin token at /login");
  expiry_by_hash_[HashToken(nonce)] = now + ttl;
  return nonce;
}

bool LoginNonces::Redeem(const std::string& nonce, Clock::time_point now) {
  if (nonce.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  PruneLocked(now);
  return expiry_by_hash_.erase(HashToken(nonce)) == 1;
}

size_t LoginNonces::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return expiry_by_hash_.size();
}

void LoginNonces::PruneLocked(Clock::time_point now) {
  for (auto it = expiry_by_hash_.begin(); it != expiry_by_hash_.end();)
    it = it->second <= now ? expiry_by_hash_.erase(it) : std::next(it);
}

}  // namespace shardd
