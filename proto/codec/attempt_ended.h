// The one answer that ends a worker: "your attempt has ended". The
// coordinator marks every such refusal (a stale attempt, an attempt that is
// over or restarting, a rendezvous dropped with its attempt) with this mark;
// the worker exits with code 3 on a marked answer (or a heartbeat answered
// with `abort`) and on nothing else. A call cut off by a coordinator that
// stops (CANCELLED), is away (UNAVAILABLE) or is slow (DEADLINE_EXCEEDED),
// and any unmarked ABORTED, mean "coordinator unreachable": the worker trains
// on and retries until its reconnect window ends (docs/control-plane.md,
// "Coordinator restart").
//
// The mark travels in the status message, so it crosses shard::Status,
// grpc::Status and every hop between them unchanged, whatever code it has.
#pragma once

#include <string>
#include <string_view>

#include "shard/common/status.h"

namespace shardd {

inline constexpr std::string_view kAttemptEndedMark = "[attempt ended]";

// `why` with the mark: "stale attempt 1 of job j (current attempt 2); exit [attempt ended]".
inline std::string AttemptEndedMessage(const std::string& why) { return why + " " + std::string(kAttemptEndedMark); }

// ABORTED that names the attempt as ended.
inline shard::Status AttemptEnded(const std::string& why) { return shard::Aborted(AttemptEndedMessage(why)); }

inline bool NamesAttemptEnded(const shard::Status& st) {
  return !st.ok() && st.message().find(kAttemptEndedMark) != std::string::npos;
}

}  // namespace shardd
