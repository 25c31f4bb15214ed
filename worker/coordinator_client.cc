#include "worker/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include "proto/rpc/grpc_credentials.h"
#include "proto/rpc/grpc_status.h"

namespace shardd {

using namespace std::chrono_literals;

class GrpcKvStore : public shard::KvStore {
 public:
  explicit GrpcKvStore(CoordinatorClient* c) : c_(c) {}
  shard::Status Set(const std::string& key, const std::string& value) override {
    v1::KvSetRequest req;
    req.set_key(key);
    req.set_value(value);
    v1::Ack ack;
    return Call(&v1::WorkerService::Stub::KvSet, &req, &ack, 30s, "rendezvous set " + key);
  }
  shard::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    v1::KvGetRequest req;
    req.set_key(key);
    req.set_timeout_ms(timeout.count());
    v1::KvGetResponse resp;
    RETURN_IF_ERROR(Call(&v1::WorkerService::Stub::KvGet, &req, &resp, timeout + 10s, "rendezvous get " + key));
    return resp.value();
  }
  shard::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    v1::KvWaitRequest req;
    for (const auto& k : keys) req.add_keys(k);
    req.set_timeout_ms(timeout.count());
    v1::Ack ack;
    return Call(&v1::WorkerService::Stub::KvWait, &req, &ack, timeout + 10s, "rendezvous wait");
  }
  shard::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    v1::KvAddRequest req;
    req.set_key(key);
    req.set_delta(delta);
    v1::KvAddResponse resp;
    RETURN_IF_ERROR(Call(&v1::WorkerService::Stub::KvAdd, &req, &resp, 30s, "rendezvous add " + key));
    return resp.value();
  }
  shard::StatusOr<bool> Check(const std::string& key) override {
    v1::KvCheckRequest req;
    req.set_key(key);
    v1::KvCheckResponse resp;
    RETURN_IF_ERROR(Call(&v1::WorkerService::Stub::KvCheck, &req, &resp, 30s, "rendezvous check " + key));
    return resp.exists();
  }

 private:
  // One rendezvous RPC as this worker: stamps its id on req, bounds the call by
  // `timeout`, and names `what` in the error.
  template <typename Req, typename Resp>
  shard::Status Call(grpc::Status (v1::WorkerService::Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*), Req* req,
                     Resp* resp, std::chrono::milliseconds timeout, const std::string& what) {
    *req->mutable_id() = c_->who_.id;
    grpc::ClientContext ctx;
    c_->Prepare(&ctx, timeout);
    return FromGrpc((c_->stub_.get()->*rpc)(&ctx, *req, resp), what);
  }

  CoordinatorClient* c_;
};

shard::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(const ClientIdentity& who) {
  std::unique_ptr<CoordinatorClient> c(new CoordinatorClient(who));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds, ClientCredentials(who.tls));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(4 << 20);
  // A coordinator that comes back (restarted on its state dir) is dialled
  // again within 2 s, not after gRPC's default backoff of up to 120 s: the
  // adopted ranks must heartbeat within the job's heartbeat_timeout_s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  c->channel_ = grpc::CreateCustomChannel(who.address, creds, args);
  c->stub_ = v1::WorkerService::NewStub(c->channel_);
  return c;
}

void CoordinatorClient::Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  ctx->AddMetadata("authorization", "Bearer " + who_.token);
}

shard::Status CoordinatorClient::Join(int world_size, const std::string& hostname) {
  v1::JoinRequest req;
  req.set_job_id(who_.id.job_id());
  req.set_rank(who_.id.rank());
  req.set_world_size(world_size);
  req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
  req.set_hostname(hostname);
  v1::JoinResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, 30s);
  ctx.set_wait_for_ready(true);
  RETURN_IF_ERROR(FromGrpc(stub_->Join(&ctx, req, &resp), "join job " + who_.id.job_id() + " at " + who_.address));
  who_.id.set_attempt(resp.attempt());
  who_.id.set_rank(resp.rank());  // another one when an elastic attempt runs on fewer ranks
  who_.token = resp.token();
  return shard::OkStatus();
}

shard::StatusOr<v1::RegisterResponse> CoordinatorClient::Register(const std::string& hostname, int pid,
                                                                  const std::string& launcher_id,
                                                                  const std::string& devices) {
  v1::RegisterRequest req;
  *req.mutable_id() = who_.id;
  req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
  req.set_hostname(hostname);
  req.set_pid(pid);
  req.set_launcher_id(launcher_id);
  req.set_devices(devices);
  v1::RegisterResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, 30s);
  ctx.set_wait_for_ready(true);  // the coordinator may be starting
  RETURN_IF_ERROR(FromGrpc(stub_->Register(&ctx, req, &resp), "register with " + who_.address));
  return resp;
}

shard::StatusOr<v1::HeartbeatResponse> CoordinatorClient::Heartbeat(v1::HeartbeatRequest req,
                                                                    std::chrono::milliseconds timeout,
                                                                    bool stoppable) {
  *req.mutable_id() = who_.id;
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout);
  if (stoppable) {
    std::lock_guard<std::mutex> lock(hb_mu_);
    if (hb_stopped_) return shard::Aborted("heartbeat: CANCELLED (heartbeats stopped)");
    hb_in_flight_ = &ctx;
  }
  grpc::Status gs = stub_->Heartbeat(&ctx, req, &resp);
  if (stoppable) {
    std::lock_guard<std::mutex> lock(hb_mu_);
    hb_in_flight_ = nullptr;
  }
  RETURN_IF_ERROR(FromGrpc(gs, "heartbeat"));
  return resp;
}

void CoordinatorClient::StopHeartbeats() {
  std::lock_guard<std::mutex> lock(hb_mu_);
  hb_stopped_ = true;
  if (hb_in_flight_) hb_in_flight_->TryCancel();
}

shard::StatusOr<bool> CoordinatorClient::ReportCheckpoint(v1::ReportCheckpointRequest req) {
  *req.mutable_id() = who_.id;
  v1::ReportCheckpointResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx, 60s);
  ctx.set_wait_for_ready(true);
  RETURN_IF_ERROR(FromGrpc(stub_->ReportCheckpoint(&ctx, req, &resp), "report checkpoint"));
  return resp.committed();
}

shard::Status CoordinatorClient::ReportDone(int64_t step, double final_loss, bool nothing_trained, int64_t total_steps,
                                            const std::string& resumed_from) {
  v1::ReportDoneRequest req;
  *req.mutable_id() = who_.id;
  req.set_step(step);
  req.set_final_loss(final_loss);
  req.set_nothing_trained(nothing_trained);
  req.set_total_steps(total_steps);
  req.set_resumed_from(resumed_from);
  v1::Ack ack;
  grpc::ClientContext ctx;
  Prepare(&ctx, 60s);
  ctx.set_wait_for_ready(true);
  return FromGrpc(stub_->ReportDone(&ctx, req, &ack), "report done");
}

shard::Status CoordinatorClient::ReportFailure(const std::string& error, bool retryable,
                                               std::chrono::milliseconds timeout) {
  v1::ReportFailureRequest req;
  *req.mutable_id() = who_.id;
  req.set_error(error);
  req.set_retryable(retryable);
  v1::Ack ack;
  grpc::ClientContext ctx;
  // Short: a worker whose link to the coordinator is cut (its collectives
  // just timed out) must not linger long past comm_timeout_s; the report is
  // a courtesy (the heartbeat deadline finds the rank anyway). The agent
  // bounds it with the rest of its last words (agent.cc, kLastWords).
  Prepare(&ctx, timeout);
  return FromGrpc(stub_->ReportFailure(&ctx, req, &ack), "report failure");
}

shard::Status CoordinatorClient::ReportPreempted(const std::string& why, int64_t step) {
  v1::ReportFailureRequest req;
  *req.mutable_id() = who_.id;
  req.set_error(why);
  req.set_retryable(true);
  req.set_preempted(true);
  req.set_step(step);
  v1::Ack ack;
  grpc::ClientContext ctx;
  Prepare(&ctx, 10s);
  return FromGrpc(stub_->ReportFailure(&ctx, req, &ack), "report preemption");
}

std::shared_ptr<shard::KvStore> CoordinatorClient::kv_store() { return std::make_shared<GrpcKvStore>(this); }

}  // namespace shardd
