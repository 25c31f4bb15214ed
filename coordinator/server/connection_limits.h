// What the coordinator's HTTP server grants a connection (http_connections.h
// explains each limit). Apart from the server so that its options can be
// declared without cpp-httplib's header.
#pragma once

namespace shardd {

struct ConnectionLimits {
  int threads = 64;                   // requests served at once
  // Connections open from one peer (all of 127/8 and ::1 are one peer); at
  // the cap its oldest connection still in headers makes room.
  int per_peer = 16;
  // Connections open in all (waiting, ready or served): a connection in the
  // waiting room costs an fd and no thread; 512 stays far below a default
  // RLIMIT_NOFILE of 1024 beside gRPC's and the state store's files.
  int max_connections = 512;
  int reserve = 4;                    // threads kept turning over quickly; < threads
  // Whole request headers must arrive within this of the accept (or of the
  // first byte of a kept-alive connection's next request). A browser or curl
  // sends them in one packet: 5 s is generous and still sheds idle sockets.
  double header_timeout_s = 5;
  double busy_header_timeout_s = 1;   // ... within this while fewer than `reserve` threads are free
};

}  // namespace shardd
