// Which coordinator answers end a worker: only those that name the attempt as
// ended (the coordinator's mark, through the gRPC conversions both ways).
// A stopping coordinator's CANCELLED, an absent one's UNAVAILABLE, a slow
// one's DEADLINE_EXCEEDED and an unmarked ABORTED mean "unreachable": train
// on and retry (issue 39 item 1: SIGTERM to shardd made every worker exit 3).
#include <gtest/gtest.h>

#include "proto/codec/attempt_ended.h"
#include "proto/rpc/grpc_status.h"
#include "worker/coordinator_answer.h"

namespace shardd {
namespace {

// The status a worker's call sees when the coordinator answered `s`.
shard::Status OverTheWire(const shard::Status& s, const std::string& call = "heartbeat") {
  return FromGrpc(ToGrpc(s), call);
}

TEST(CoordinatorAnswerTest, OnlyAMarkedAnswerEndsTheAttempt) {
  for (const shard::Status& s :
       {AttemptEnded("job j-1 attempt 1 is over (RESTARTING); exit"),
        shard::FailedPrecondition(AttemptEndedMessage("stale attempt 1 of job j-1 (current attempt 2); exit")),
        AttemptEnded("rendezvous: the attempt is over")}) {
    EXPECT_EQ(ClassifyAnswer(s), CoordinatorAnswer::kAttemptEnded) << s.ToString();
    EXPECT_EQ(ClassifyAnswer(OverTheWire(s)), CoordinatorAnswer::kAttemptEnded) << OverTheWire(s).ToString();
    EXPECT_EQ(ClassifyAnswer(OverTheWire(s).WithContext("report checkpoint")), CoordinatorAnswer::kAttemptEnded);
  }
}

TEST(CoordinatorAnswerTest, AStoppingOrAbsentCoordinatorIsUnreachable) {
  // What gRPC itself reports: shardd's Shutdown cancels calls in flight, a
  // killed or absent one leaves UNAVAILABLE, a stalled one a deadline, a cut
  // stream UNKNOWN.
  for (const grpc::Status& g : {grpc::Status(grpc::StatusCode::CANCELLED, "Cancelled"),
                                grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed"),
                                grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect to all addresses"),
                                grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"),
                                grpc::Status(grpc::StatusCode::UNKNOWN, "Stream removed"),
                                grpc::Status(grpc::StatusCode::ABORTED, "the call was aborted")}) {
    const shard::Status st = FromGrpc(g, "heartbeat");
    EXPECT_EQ(ClassifyAnswer(st), CoordinatorAnswer::kUnreachable) << st.ToString();
  }
  EXPECT_EQ(ClassifyAnswer(shard::Aborted("job j-1 attempt 1 is over; exit")), CoordinatorAnswer::kUnreachable)
      << "an ABORTED without the mark does not end a worker";
}

TEST(CoordinatorAnswerTest, OtherRefusalsAreTheCallersToHandle) {
  for (const shard::Status& s :
       {shard::Unauthenticated("worker call for job j-1: missing or wrong worker token"),
        shard::NotFound("no job j-1"), shard::FailedPrecondition("worker protocol version 1 does not match"),
        shard::InvalidArgument("checkpoint report names /x, outside the job's /y"),
        shard::PermissionDenied("outside the allowed roots"), shard::ResourceExhausted("message too large")}) {
    EXPECT_EQ(ClassifyAnswer(OverTheWire(s)), CoordinatorAnswer::kRefused) << s.ToString();
  }
  EXPECT_EQ(ClassifyAnswer(shard::OkStatus()), CoordinatorAnswer::kOk);
}

}  // namespace
}  // namespace shardd
