// What a worker makes of the coordinator's answer to one of its calls. Only
// an answer that names the attempt as ended ends a worker (exit code 3): the
// coordinator marks those (proto/codec/attempt_ended.h). A coordinator that
// stops (the call is CANCELLED), is away (UNAVAILABLE), is slow
// (DEADLINE_EXCEEDED) or cuts a call off (an unmarked ABORTED, or INTERNAL /
// UNKNOWN from a broken stream) is unreachable: the worker trains on and
// retries until its reconnect window ends. Anything else is a refusal of
// that call (a bad report, a wrong token), which the caller handles.
#pragma once

#include "shard/common/status.h"

namespace shardd {

enum class CoordinatorAnswer {
  kOk,
  kAttemptEnded,  // the coordinator said this attempt is over: exit 3
  kUnreachable,   // no answer of the coordinator's own: keep training, retry
  kRefused,       // the coordinator refused this call
};

CoordinatorAnswer ClassifyAnswer(const shard::Status& st);

}  // namespace shardd
