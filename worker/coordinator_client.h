// The worker's side of WorkerService: one channel to the coordinator, every
// call stamped with this worker's identity and attempt token, and the
// rendezvous KvStore over it (gloo's store and the NCCL unique id use it).
//
// Thread-safety: all methods are thread-safe (gRPC stubs are).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
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

// What a worker makes of a call's end. An answer the coordinator gave keeps
// its code (ABORTED "the attempt is over" among them: only such an answer
// ends an attempt). A call nobody answered is "unreachable" (UNAVAILABLE,
// retried within the reconnect window): CANCELLED (a coordinator that stops
// cancels the calls in flight) and, where `deadline_is_silence`, a deadline
// that passed (a coordinator stopped or gone mid-call). The rendezvous
// store's waits pass false: there a deadline is the wait's own answer.
shard::Status FromWorkerCall(const grpc::Status& s, const std::string& what, bool deadline_is_silence);

class CoordinatorClient {
 public:
  static shard::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const ClientIdentity& who);

  // launcher: external: joins the job's current attempt with the join token
  // this client was made with; from then on it speaks as that attempt.
  shard::Status Join(int world_size, const std::string& hostname);
  shard::StatusOr<v1::RegisterResponse> Register(const std::string& hostname, int pid, const std::string& launcher_id,
                                                 const std::string& devices);
  shard::StatusOr<v1::HeartbeatResponse> Heartbeat(v1::HeartbeatRequest req);
  shard::StatusOr<bool> ReportCheckpoint(v1::ReportCheckpointRequest req);
  // nothing_trained: the attempt resumed at or past total_steps (train.steps).
  shard::Status ReportDone(int64_t step, double final_loss, bool nothing_trained = false, int64_t total_steps = 0,
                           const std::string& resumed_from = "");
  shard::Status ReportFailure(const std::string& error, bool retryable);
  // Stopped on the launcher's signal after checkpointing `step`.
  shard::Status ReportPreempted(const std::string& why, int64_t step);

  // A failing rank's last words (its final heartbeat and failure report)
  // end by one deadline: every call from now on ends by `budget` from now at
  // the latest, so a rank cut off from the coordinator leaves promptly.
  void BoundLastWords(std::chrono::milliseconds budget);
  // Seconds left of that bound (`otherwise` when none is set).
  double LastWordsLeftS(double otherwise) const;

  // The rendezvous store (keys are namespaced by the coordinator per attempt).
  std::shared_ptr<shard::KvStore> kv_store();
  const v1::WorkerId& id() const { return who_.id; }

 private:
  explicit CoordinatorClient(ClientIdentity who) : who_(std::move(who)) {}
  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const;
  friend class GrpcKvStore;

  ClientIdentity who_;
  // system_clock ticks of the last-words deadline; 0 = none (any thread).
  std::atomic<int64_t> last_words_until_{0};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
};

}  // namespace shardd
