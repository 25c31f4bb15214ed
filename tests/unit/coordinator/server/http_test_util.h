// Raw sockets for the HTTP server tests. Linux routes all of 127.0.0.0/8 to
// loopback, so a socket bound to 127.0.0.2 is another peer to the server than
// one from 127.0.0.1 (the per-peer cap counts by address).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace shardd::testing {

// A TCP connection from `src` (an address on lo) to 127.0.0.1:port; -1 on failure.
inline int ConnectFrom(const std::string& src, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, src.c_str(), &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// Reads until the peer closes or timeout_s passes; what arrived.
inline std::string ReadUntilClosed(int fd, double timeout_s, bool* closed = nullptr) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  std::string out;
  if (closed) *closed = false;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// One request from `src` with Connection: close; the whole reply ("" when none).
inline std::string RawRequest(const std::string& src, int port, const std::string& method_path,
                              const std::string& extra_headers = "", double timeout_s = 20) {
  const int fd = ConnectFrom(src, port);
  if (fd < 0) return "";
  const std::string req = method_path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers + "\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string reply = ReadUntilClosed(fd, timeout_s);
  close(fd);
  return reply;
}

// The status code of a raw reply ("HTTP/1.1 200 OK..." -> 200), 0 when none.
inline int StatusOf(const std::string& reply) {
  return reply.rfind("HTTP/1.", 0) == 0 && reply.size() > 12 ? std::atoi(reply.c_str() + 9) : 0;
}

}  // namespace shardd::testing
