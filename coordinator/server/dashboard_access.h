// Who may use the coordinator's HTTP side (docs/observability.md, "Access"):
//  * The Host header must name this server: an IP address literal, localhost,
//    or a name the operator configured (--dashboard-host, and the host part of
//    --http-listen). A DNS-rebinding page (evil.example re-resolved to
//    127.0.0.1) cannot change the Host its browser sends, so it is refused.
//  * The admin token, as "Authorization: Bearer <token>" or the shardd_token
//    cookie, from every peer: a reverse proxy, TLS terminator or other user on
//    the same host connects from loopback too. trust_loopback (the daemon's
//    --dashboard-trust-loopback) waives it for loopback peers, for a
//    single-user machine only.
//  * One-time login links: a token holder asks for a nonce (shardctl
//    dashboard; `shardctl run` for its embedded coordinator), and
//    GET /login?nonce=N exchanges it once, before it expires, for the cookie.
// The checks are pure functions; LoginNonces is the one stateful piece.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardd {

// The cookie the login form and login links set (HttpOnly, SameSite=Strict).
inline constexpr const char* kDashboardCookie = "shardd_token";

// The host part of a Host header ("h:80" -> "h", "[::1]:80" -> "::1"),
// lower-cased, without a trailing dot.
std::string HostHeaderName(const std::string& host_header);

// Whether a request whose Host header is `host_header` may be answered: none
// given (not a browser), an IP literal, "localhost", or one of `names`
// (compared without case).
bool HostAllowed(const std::string& host_header, const std::vector<std::string>& names);

// 127.0.0.0/8, ::1 and their IPv4-mapped forms.
bool IsLoopbackPeer(const std::string& remote_addr);

// The shardd_token cookie's value in a Cookie header, or "".
std::string CookieToken(const std::string& cookies);

// The access rule: the admin token as a bearer header or the cookie; a
// loopback peer without it only when trust_loopback. An empty token never
// matches.
bool HttpAuthorized(const std::string& remote_addr, const std::string& authorization, const std::string& cookies,
                    const std::string& token, bool trust_loopback);

// Where a login may send the browser afterwards: a path on this server ("/",
// "/#/job/ID"), never another origin ("//evil", "/\evil", "http:..."); else "/".
std::string SafeNextPath(const std::string& next);

// Single-use login nonces, each valid until its expiry. Only hashes are kept
// (a lookup's timing says nothing about a live nonce). Bounded: Issue refuses
// once `capacity` unexpired nonces are outstanding. Thread-safe (one mutex).
class LoginNonces {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kMaxTtl{24 * 3600};

  explicit LoginNonces(size_t capacity = 256) : capacity_(capacity) {}
  // A fresh nonce (32 hex digits) valid for ttl (at most kMaxTtl).
  shard::StatusOr<std::string> Issue(std::chrono::seconds ttl, Clock::time_point now = Clock::now());
  // True once for an issued, unexpired nonce; it is gone afterwards.
  bool Redeem(const std::string& nonce, Clock::time_point now = Clock::now());
  size_t outstanding() const;

 private:
  void PruneLocked(Clock::time_point now);
  const size_t capacity_;
  mutable std::mutex mu_;
  std::map<std::string, Clock::time_point> expiry_by_hash_;  // guarded by mu_
};

}  // namespace shardd
