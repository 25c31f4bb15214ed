// What a worker makes of a call's end (issue 39 item 1): only an answer the
// coordinator gave ends an attempt; a call nobody answered is "unreachable",
// retried within the reconnect window.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "worker/coordinator_client.h"

namespace shardd {
namespace {

using shard::StatusCode;

TEST(WorkerCallStatusTest, ACallCancelledByAStoppingCoordinatorIsUnreachableNotTheEnd) {
  // A coordinator that stops cancels the calls in flight: before this rule the
  // worker read CANCELLED as ABORTED ("the attempt is over") and exited 3.
  const shard::Status st = FromWorkerCall(grpc::Status(grpc::StatusCode::CANCELLED, "Cancelled"), "heartbeat", true);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("heartbeat: no answer from the coordinator (call cancelled"), std::string::npos)
      << st.message();
}

TEST(WorkerCallStatusTest, APassedDeadlineIsSilenceExceptForARendezvousWait) {
  const grpc::Status late(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");
  EXPECT_EQ(FromWorkerCall(late, "report checkpoint", true).code(), StatusCode::kUnavailable);
  EXPECT_EQ(FromWorkerCall(late, "rendezvous wait", false).code(), StatusCode::kDeadlineExceeded);
}

TEST(WorkerCallStatusTest, TheCoordinatorsOwnAnswersKeepTheirCodes) {
  EXPECT_EQ(FromWorkerCall(grpc::Status(grpc::StatusCode::ABORTED, "job j-1 attempt 1 is over"), "heartbeat", true)
                .code(),
            StatusCode::kAborted);
  EXPECT_EQ(FromWorkerCall(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong token"), "heartbeat", true).code(),
            StatusCode::kUnauthenticated);
  EXPECT_EQ(FromWorkerCall(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connect failed"), "heartbeat", true).code(),
            StatusCode::kUnavailable);
  EXPECT_TRUE(FromWorkerCall(grpc::Status::OK, "heartbeat", true).ok());
}

}  // namespace
}  // namespace shardd
