// A Communicator that forwards every call to another, adds the time the
// caller spent in it to the caller's wait clock (comm_wait_clock.h) and, when
// given a flight recorder, records the call there (flight_recorder.h): its
// sequence number in this group, op, unit, bytes, start and end. The trainer
// wraps each communicator it creates in one, whatever the backend, so no
// backend and no loop above the seam carries timing or recording code.
//
// Thread-safety: as the wrapped communicator's (the clock is per thread; the
// sequence counter is touched only by collectives, which are ordered).
#pragma once

#include <memory>
#include <string>

#include "shard/comm/communicator.h"
#include "shard/comm/flight_recorder.h"

namespace shard {

// Null in, null out (a group of one has no communicator). `recorder` null:
// nothing is recorded; `group` names the group in its records ("shard0").
std::unique_ptr<Communicator> WithWaitClock(std::unique_ptr<Communicator> inner,
                                            std::shared_ptr<FlightRecorder> recorder = nullptr,
                                            const std::string& group = "");

}  // namespace shard
