// What the coordinator's HTTP server grants a connection (http_connections.h
// explains each limit). Apart from the server so that its options can be
// declared without cpp-httplib's header.
#pragma once

namespace shardd {

struct ConnectionLimits {
  int threads = 64;                   // connections served at once
  int per_peer = 16;                  // concurrent connections (served or queued) from one IP
  int max_queued = 256;               // admitted connections waiting for a thread, all peers together
  int reserve = 4;                    // threads kept turning over quickly; < threads
  double header_timeout_s = 10;       // a request must arrive whole within this
  double busy_header_timeout_s = 1;   // ... within this while fewer than `reserve` threads are free
};

}  // namespace shardd
