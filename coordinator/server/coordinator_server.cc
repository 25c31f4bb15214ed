#include "coordinator/server/coordinator_server.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <fstream>
#include <new>
#include <sstream>

#include "coordinator/server/listen_check.h"
#include "coordinator/state/auth.h"
#include "proto/rpc/grpc_status.h"
#include "proto/rpc/tls_files.h"
#include "shard/common/logging.h"
#include "shardd/v1/coordinator.grpc.pb.h"
#include "shardd/v1/worker.grpc.pb.h"

namespace shardd {
namespace {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;

// Finishes a unary call with a StatusOr's value copied into *resp.
template <typename T>
ServerUnaryReactor* Reply(CallbackServerContext* ctx, const shard::StatusOr<T>& r, T* resp) {
  auto* reactor = ctx->DefaultReactor();
  if (r.ok()) *resp = *r;
  reactor->Finish(ToGrpc(r.status()));
  return reactor;
}

ServerUnaryReactor* Reply(CallbackServerContext* ctx, const shard::Status& st) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(st));
  return reactor;
}

// Runs a unary handler; an exception escaping it (bad_alloc from a huge
// request, a bug) becomes an error the caller can read. Without this gRPC
// answers an empty "UNIMPLEMENTED" (issue 18 item 5). Only for handlers that
// finish through Reply: the default reactor must not have been taken yet.
template <typename F>
ServerUnaryReactor* Guarded(CallbackServerContext* ctx, const char* rpc, F&& handler) {
  try {
    return handler();
  } catch (const std::bad_alloc&) {
    LOG_ERROR("{}: out of memory while handling the request", rpc);
    return Reply(ctx, shard::ResourceExhausted(std::string(rpc) + ": the coordinator ran out of memory handling "
                                                                  "this request (is something in it far too large?)"));
  } catch (const std::exception& e) {
    LOG_ERROR("{}: unexpected exception: {}", rpc, e.what());
    return Reply(ctx, shard::Internal(std::string(rpc) + ": internal error: " + e.what()));
  }
}

bool IsTerminalEvent(const v1::JobEvent& e) { return e.kind() != "progress" && IsTerminal(e.state()); }

// WatchJob: past events, then live ones, until the job ends or the client leaves.
class WatchReactor : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  WatchReactor(JobManager* jobs, const v1::WatchJobRequest& req) : jobs_(jobs) {
    std::vector<v1::JobEvent> past;
    auto id = jobs_->Watch(req.job_id(), req.after_seq(), [this](const v1::JobEvent& e) { Push(e); }, &past);
    std::lock_guard<std::mutex> lock(mu_);
    if (!id.ok()) {
      finished_ = true;
      Finish(ToGrpc(id.status()));
      return;
    }
    watch_id_ = *id;
    for (auto& e : past) {
      if (IsTerminalEvent(e)) end_ = true;
      queue_.push_back(std::move(e));
    }
    auto st = jobs_->Get(req.job_id());
    if (st.ok() && IsTerminal(st->state()) && !end_) end_ = true;  // nothing more will come
    MaybeWriteLocked();
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      if (!finished_) {
        finished_ = true;
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away"));
      }
      return;
    }
    queue_.pop_front();
    MaybeWriteLocked();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_ && !writing_) {
      finished_ = true;
      Finish(grpc::Status::CANCELLED);
    }
    cancelled_ = true;
  }
  void OnDone() override {
    if (watch_id_ > 0) jobs_->Unwatch(watch_id_);
    delete this;
  }

 private:
  void Push(const v1::JobEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (end_ || finished_) return;
    // Progress is a gauge: a slow watcher needs only the newest one.
    if (e.kind() == "progress" && queue_.size() > 1 && queue_.back().kind() == "progress") queue_.pop_back();
    if (queue_.size() > 10000) return;  // a watcher that never reads cannot grow us without bound
    if (IsTerminalEvent(e)) end_ = true;
    queue_.push_back(e);
    MaybeWriteLocked();
  }
  void MaybeWriteLocked() {
    if (writing_ || finished_) return;
    if (cancelled_) {
      finished_ = true;
      Finish(grpc::Status::CANCELLED);
      return;
    }
    if (queue_.empty()) {
      if (end_) {
        finished_ = true;
        Finish(grpc::Status::OK);
      }
      return;
    }
    writing_ = true;
    StartWrite(&queue_.front());
  }

  JobManager* jobs_;
  int64_t watch_id_ = 0;
  std::mutex mu_;
  std::deque<v1::JobEvent> queue_;  // guarded by mu_; front() is being written while writing_
  bool writing_ = false, finished_ = false, end_ = false, cancelled_ = false;
};

class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  JobServiceImpl(JobManager* jobs, std::string token, int max_message_bytes)
      : jobs_(jobs), token_(std::move(token)), max_message_bytes_(max_message_bytes) {}

  ServerUnaryReactor* SubmitJob(CallbackServerContext* ctx, const v1::SubmitJobRequest* req,
                                v1::JobStatus* resp) override {
    return Guarded(ctx, "SubmitJob", [&]() -> ServerUnaryReactor* {
      if (auto st = Auth(ctx); !st.ok()) return Reply(ctx, st);
      return Reply(ctx, jobs_->Submit(req->spec()), resp);
    });
  }
  ServerUnaryReactor* GetJob(CallbackServerContext* ctx, const v1::GetJobRequest* req, v1::JobStatus* resp) override {
    return Guarded(ctx, "GetJob", [&]() -> ServerUnaryReactor* {
      if (auto st = Auth(ctx); !st.ok()) return Reply(ctx, st);
      return Reply(ctx, jobs_->Get(req->job_id()), resp);
    });
  }
  ServerUnaryReactor* ListJobs(CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                               v1::ListJobsResponse* resp) override {
    return Guarded(ctx, "ListJobs", [&]() -> ServerUnaryReactor* {
      if (auto st = Auth(ctx); !st.ok()) return Reply(ctx, st);
      for (auto& j : jobs_->List(req->include_finished())) *resp->add_jobs() = std::move(j);
      return Reply(ctx, shard::OkStatus());
    });
  }
  ServerUnaryReactor* CancelJob(CallbackServerContext* ctx, const v1::CancelJobRequest* req,
                                v1::JobStatus* resp) override {
    return Guarded(ctx, "CancelJob", [&]() -> ServerUnaryReactor* {
      if (auto st = Auth(ctx); !st.ok()) return Reply(ctx, st);
      return Reply(ctx, jobs_->Cancel(req->job_id(), req->reason()), resp);
    });
  }
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(CallbackServerContext* ctx,
                                                   const v1::WatchJobRequest* req) override {
    if (auto st = Auth(ctx); !st.ok()) {
      struct Refuse : grpc::ServerWriteReactor<v1::JobEvent> {
        explicit Refuse(const grpc::Status& s) { Finish(s); }
        void OnDone() override { delete this; }
      };
      return new Refuse(ToGrpc(st));
    }
    return new WatchReactor(jobs_, *req);
  }
  ServerUnaryReactor* GetLogs(CallbackServerContext* ctx, const v1::GetLogsRequest* req,
                              v1::GetLogsResponse* resp) override {
    return Guarded(ctx, "GetLogs", [&]() -> ServerUnaryReactor* {
      if (auto st = Auth(ctx); !st.ok()) return Reply(ctx, st);
      auto chunk = jobs_->Logs(req->job_id(), req->rank(), req->attempt(), req->offset(), req->max_bytes());
      if (chunk.ok()) {
        resp->set_data(chunk->data);
        resp->set_next_offset(chunk->next_offset);
        resp->set_attempt(chunk->attempt);
        resp->set_finished(chunk->finished);
      }
      return Reply(ctx, chunk.status());
    });
  }
  ServerUnaryReactor* ListCheckpoints(CallbackServerContext* ctx, const v1::ListCheckpointsRequest* req,
                                      v1::ListCheckpointsResponse* resp) override {
    return Guarded(ctx, "ListCheckpoints", [&]() -> ServerUnaryReactor* {
      if (auto st = Auth(ctx); !st.ok()) return Reply(ctx, st);
      auto list = jobs_->Checkpoints(req->job_id());
      if (list.ok())
        for (auto& c : *list) *resp->add_checkpoints() = std::move(c);
      return Reply(ctx, list.status());
    });
  }
  ServerUnaryReactor* GetMetrics(CallbackServerContext* ctx, const v1::GetMetricsRequest* req,
                                 v1::GetMetricsResponse* resp) override {
    return Guarded(ctx, "GetMetrics", [&]() -> ServerUnaryReactor* {
      if (auto st = Auth(ctx); !st.ok()) return Reply(ctx, st);
      // A response over the send limit would fail the call; a truncated one
      // tells the client to ask for the rest.
      const int64_t budget = max_message_bytes_ - std::min(1024, max_message_bytes_ / 2);
      return Reply(ctx, jobs_->Metrics(req->job_id(), req->after_step(), req->limit(), budget), resp);
    });
  }

 private:
  shard::Status Auth(CallbackServerContext* ctx) const {
    const std::string t = BearerToken(ctx);
    if (t.empty())
      return shard::Unauthenticated("no token: pass --token, set SHARDD_TOKEN, or run on the coordinator's host");
    if (!TokensEqual(t, token_)) return shard::Unauthenticated("wrong token for this coordinator");
    return shard::OkStatus();
  }
  JobManager* jobs_;
  std::string token_;
  int max_message_bytes_;
};

class WorkerServiceImpl final : public v1::WorkerService::CallbackService {
 public:
  explicit WorkerServiceImpl(JobManager* jobs) : jobs_(jobs) {}

  ServerUnaryReactor* Join(CallbackServerContext* ctx, const v1::JoinRequest* req, v1::JoinResponse* resp) override {
    return Guarded(ctx, "Join", [&]() -> ServerUnaryReactor* {
      return Reply(ctx, jobs_->Join(*req, BearerToken(ctx)), resp);
    });
  }
  ServerUnaryReactor* Register(CallbackServerContext* ctx, const v1::RegisterRequest* req,
                               v1::RegisterResponse* resp) override {
    return Guarded(ctx, "Register", [&]() -> ServerUnaryReactor* {
      return Reply(ctx, jobs_->Register(*req, BearerToken(ctx)), resp);
    });
  }
  ServerUnaryReactor* Heartbeat(CallbackServerContext* ctx, const v1::HeartbeatRequest* req,
                                v1::HeartbeatResponse* resp) override {
    return Guarded(ctx, "Heartbeat", [&]() -> ServerUnaryReactor* {
      return Reply(ctx, jobs_->Heartbeat(*req, BearerToken(ctx)), resp);
    });
  }
  ServerUnaryReactor* ReportCheckpoint(CallbackServerContext* ctx, const v1::ReportCheckpointRequest* req,
                                       v1::ReportCheckpointResponse* resp) override {
    return Guarded(ctx, "ReportCheckpoint", [&]() -> ServerUnaryReactor* {
      return Reply(ctx, jobs_->ReportCheckpoint(*req, BearerToken(ctx)), resp);
    });
  }
  ServerUnaryReactor* ReportDone(CallbackServerContext* ctx, const v1::ReportDoneRequest* req, v1::Ack*) override {
    return Guarded(ctx, "ReportDone", [&]() -> ServerUnaryReactor* {
      return Reply(ctx, jobs_->ReportDone(*req, BearerToken(ctx)));
    });
  }
  ServerUnaryReactor* ReportFailure(CallbackServerContext* ctx, const v1::ReportFailureRequest* req,
                                    v1::Ack*) override {
    return Guarded(ctx, "ReportFailure", [&]() -> ServerUnaryReactor* {
      return Reply(ctx, jobs_->ReportFailure(*req, BearerToken(ctx)));
    });
  }
  // The rendezvous calls: fenced and bounded per attempt by the JobManager
  // (RendezvousLimits; RESOURCE_EXHAUSTED names the cap).
  ServerUnaryReactor* KvSet(CallbackServerContext* ctx, const v1::KvSetRequest* req, v1::Ack*) override {
    return Guarded(ctx, "KvSet", [&]() -> ServerUnaryReactor* {
      return Reply(ctx, jobs_->KvSet(req->id(), BearerToken(ctx), req->key(), req->value()));
    });
  }
  ServerUnaryReactor* KvGet(CallbackServerContext* ctx, const v1::KvGetRequest* req,
                            v1::KvGetResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    // Parked until the key is set or the deadline passes: no thread waits.
    jobs_->KvGet(req->id(), BearerToken(ctx), req->key(), Deadline(req->timeout_ms()),
                 [reactor, resp](shard::StatusOr<std::string> v) {
                   if (v.ok()) resp->set_value(*v);
                   reactor->Finish(ToGrpc(v.status()));
                 });
    return reactor;
  }
  ServerUnaryReactor* KvWait(CallbackServerContext* ctx, const v1::KvWaitRequest* req, v1::Ack*) override {
    auto* reactor = ctx->DefaultReactor();
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    jobs_->KvWait(req->id(), BearerToken(ctx), keys, Deadline(req->timeout_ms()),
                  [reactor](shard::Status st) { reactor->Finish(ToGrpc(st)); });
    return reactor;
  }
  ServerUnaryReactor* KvAdd(CallbackServerContext* ctx, const v1::KvAddRequest* req,
                            v1::KvAddResponse* resp) override {
    return Guarded(ctx, "KvAdd", [&]() -> ServerUnaryReactor* {
      auto v = jobs_->KvAdd(req->id(), BearerToken(ctx), req->key(), req->delta());
      if (v.ok()) resp->set_value(*v);
      return Reply(ctx, v.status());
    });
  }
  ServerUnaryReactor* KvCheck(CallbackServerContext* ctx, const v1::KvCheckRequest* req,
                              v1::KvCheckResponse* resp) override {
    return Guarded(ctx, "KvCheck", [&]() -> ServerUnaryReactor* {
      auto v = jobs_->KvCheck(req->id(), BearerToken(ctx), req->key());
      if (v.ok()) resp->set_exists(*v);
      return Reply(ctx, v.status());
    });
  }

 private:
  int64_t Deadline(int64_t timeout_ms) const {
    timeout_ms = std::clamp<int64_t>(timeout_ms, 0, 3600 * 1000);
    return jobs_->now_ms() + timeout_ms;
  }
  JobManager* jobs_;
};

}  // namespace

bool IsLoopbackAddress(const std::string& a) {
  if (a.rfind("unix:", 0) == 0) return true;
  std::string host = a;
  if (!host.empty() && host[0] == '[') {
    host = host.substr(1, host.find(']') - 1);
  } else if (auto colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

struct CoordinatorServer::Services {
  Services(JobManager* jobs, const std::string& token, int max_message_bytes)
      : job(jobs, token, max_message_bytes), worker(jobs) {}
  JobServiceImpl job;
  WorkerServiceImpl worker;
};

shard::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(const ServerOptions& opts,
                                                                             JobManager* jobs,
                                                                             const std::string& admin_token) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  RETURN_IF_ERROR(CheckCertKeyPair(opts.tls_cert, opts.tls_key, "--tls-cert", "--tls-key"));
  const bool tls = !opts.tls_cert.empty();
  if (!tls && !opts.tls_client_ca.empty())
    return shard::InvalidArgument("--tls-client-ca needs --tls-cert/--tls-key: client certificates are checked "
                                  "only over TLS");
  if (tls) {
    grpc::SslServerCredentialsOptions ssl;
    ASSIGN_OR_RETURN(std::string cert, ReadPem(opts.tls_cert, kPemCertificate, "--tls-cert"));
    ASSIGN_OR_RETURN(std::string key, ReadPem(opts.tls_key, kPemPrivateKey, "--tls-key"));
    ssl.pem_key_cert_pairs.push_back({key, cert});
    if (!opts.tls_client_ca.empty()) {
      // Mutual TLS: a client without a certificate this CA signed never gets
      // past the handshake, whatever token it holds.
      ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(opts.tls_client_ca, kPemCertificate, "--tls-client-ca"));
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  } else {
    if (!IsLoopbackAddress(opts.listen) && !opts.allow_insecure)
      return shard::InvalidArgument("--listen " + opts.listen +
                                       " is not a loopback address: give --tls-cert/--tls-key, or "
                                       "--allow-insecure if the network is trusted");
    creds = grpc::InsecureServerCredentials();
  }
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->services_ = std::make_unique<Services>(jobs, admin_token, opts.max_message_bytes);
  // A taken port is one clear line here, before gRPC logs its own failure.
  RETURN_IF_ERROR(CheckPortFree(opts.listen, "", "--listen"));
  grpc::ServerBuilder b;
  // gRPC sets SO_REUSEPORT on Linux by default: a second daemon could bind
  // this port too and the kernel would split the clients between the two.
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  b.AddListeningPort(opts.listen, creds, &s->port_);
  b.SetMaxReceiveMessageSize(opts.max_message_bytes);
  b.SetMaxSendMessageSize(opts.max_message_bytes);
  b.RegisterService(&s->services_->job);
  b.RegisterService(&s->services_->worker);
  s->server_ = b.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    RETURN_IF_ERROR(CheckPortFree(opts.listen, "", "--listen"));  // taken since the check above
    return shard::Unavailable("cannot listen on " + opts.listen + " (address in use or not valid)");
  }
  LOG_INFO("shardd listening on {} (port {}){}", opts.listen, s->port_,
           !tls ? "" : opts.tls_client_ca.empty() ? " with TLS" : " with mutual TLS");
  return s;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

void CoordinatorServer::Shutdown() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

void CoordinatorServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace shardd
