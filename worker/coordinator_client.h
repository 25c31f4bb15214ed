// The worker's side of WorkerService: one channel to the coordinator, every
// call stamped with this worker's identity and attempt token, and the
// rendezvous KvStore over it (gloo's store and the NCCL unique id use it).
//
// Thread-safety: all methods are thread-safe (gRPC stubs are).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proto/rpc/tls_files.h"
#include "shard/common/kv_store.h"
#include "shard/common/status.h"
#include "shardd/v1/worker.grpc.pb.h"

namespace shardd {

struct ClientIdentity {
  std::string address;  // host:port of the coordinator
  TlsClientFiles tls;   // CA to trust ("" = plaintext) and the client certificate to present (mutual TLS)
  std::string token;    // the attempt's worker token
  v1::WorkerId id;
};

class CoordinatorClient {
 public:
  static shard::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const ClientIdentity& who);

  // launcher: external: joins the job's current attempt with the join token
  // this client was made with; from then on it speaks as that attempt.
  shard::Status Join(int world_size, const std::string& hostname);
  shard::StatusOr<v1::RegisterResponse> Register(const std::string& hostname, int pid, const std::string& launcher_id,
                                                 const std::string& devices);
  // timeout: the call's deadline (a failing rank's last heartbeat gets what
  // is left of its last words' budget, agent.cc). A `stoppable` one (the
  // heartbeat loop's) is cut short by StopHeartbeats.
  shard::StatusOr<v1::HeartbeatResponse> Heartbeat(v1::HeartbeatRequest req,
                                                   std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                                   bool stoppable = false);
  // Cancels the stoppable heartbeat in flight, if any, and every later one
  // (they fail at once with CANCELLED): a failing rank does not wait out a
  // heartbeat to a coordinator it cannot reach. Thread-safe.
  void StopHeartbeats();
  shard::StatusOr<bool> ReportCheckpoint(v1::ReportCheckpointRequest req);
  // nothing_trained: the attempt resumed at or past total_steps (train.steps).
  shard::Status ReportDone(int64_t step, double final_loss, bool nothing_trained = false, int64_t total_steps = 0,
                           const std::string& resumed_from = "");
  shard::Status ReportFailure(const std::string& error, bool retryable,
                              std::chrono::milliseconds timeout = std::chrono::seconds(3));
  // Stopped on the launcher's signal after checkpointing `step`.
  shard::Status ReportPreempted(const std::string& why, int64_t step);

  // The rendezvous store (keys are namespaced by the coordinator per attempt).
  std::shared_ptr<shard::KvStore> kv_store();
  const v1::WorkerId& id() const { return who_.id; }

 private:
  explicit CoordinatorClient(ClientIdentity who) : who_(std::move(who)) {}
  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const;
  friend class GrpcKvStore;

  ClientIdentity who_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::mutex hb_mu_;
  grpc::ClientContext* hb_in_flight_ = nullptr;  // guarded by hb_mu_: the stoppable heartbeat being sent
  bool hb_stopped_ = false;                      // guarded by hb_mu_: StopHeartbeats was called
};

}  // namespace shardd
