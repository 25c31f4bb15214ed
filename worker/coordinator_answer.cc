#include "worker/coordinator_answer.h"

#include "proto/codec/attempt_ended.h"

namespace shardd {

CoordinatorAnswer ClassifyAnswer(const shard::Status& st) {
  using C = shard::StatusCode;
  if (st.ok()) return CoordinatorAnswer::kOk;
  if (NamesAttemptEnded(st)) return CoordinatorAnswer::kAttemptEnded;
  switch (st.code()) {
    case C::kUnavailable:
    case C::kDeadlineExceeded:
    case C::kAborted:   // CANCELLED maps here too (proto/rpc/grpc_status.h)
    case C::kInternal:  // and UNKNOWN: a stream the coordinator's end broke
      return CoordinatorAnswer::kUnreachable;
    default:
      return CoordinatorAnswer::kRefused;
  }
}

}  // namespace shardd
