// A Communicator that forwards every call to another and adds the time the
// caller spent in it to the caller's wait clock (comm_wait_clock.h). The
// trainer wraps each communicator it creates in one, whatever the backend, so
// no backend and no loop above the seam carries timing code.
//
// Thread-safety: as the wrapped communicator's (the clock is per thread).
#pragma once

#include <memory>

#include "shard/comm/communicator.h"

namespace shard {

// Null in, null out (a group of one has no communicator).
std::unique_ptr<Communicator> WithWaitClock(std::unique_ptr<Communicator> inner);

}  // namespace shard
