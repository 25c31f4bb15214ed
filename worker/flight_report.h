// The worker's side of the flight recorder (shard/comm/flight_recorder.h):
// what each heartbeat says of this rank's collectives, and the ring's tail in
// the rank's log when it fails.
//
// Thread-safety: as the recorder's (every call is thread-safe).
#pragma once

#include <cstddef>

#include "shard/comm/flight_recorder.h"
#include "shardd/v1/worker.pb.h"

namespace shardd {

// The recorder's Summary() as HeartbeatRequest.collectives, times as ages now.
void AddCollectives(const shard::FlightRecorder& recorder, v1::HeartbeatRequest* req);

// Logs the newest `n` collectives, one line each (oldest first), after a failure.
void LogFlightTail(const shard::FlightRecorder& recorder, size_t n);

}  // namespace shardd
