#include "coordinator/ctl/job_commands.h"
#include "coordinator/ctl/job_commands_state.h"

#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <thread>

#include "coordinator/ctl/coordinator_address.h"
#include "coordinator/ctl/job_queries.h"
#include "coordinator/ctl/json_schema.h"
#include "coordinator/ctl/report_command.h"
#include "coordinator/daemon/coordinator.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/state/auth.h"
#include "proto/codec/resume_plan_codec.h"
#include "proto/rpc/grpc_credentials.h"
#include "proto/rpc/grpc_status.h"
#include "shard/common/file_util.h"
#include "shard/common/yaml_config.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace fs = std::filesystem;
namespace v1 = shardd::v1;
using namespace std::chrono_literals;

namespace shardctl {
namespace jobcmd {

std::atomic<bool> g_interrupted{false};

// --json output: one schema per object (json_schema.h).
std::string Json(const v1::JobStatus& js) { return Dump(JobObject(js)); }
std::string Json(const v1::ListJobsResponse& resp) { return Dump(JobListObject(resp)); }
std::string Json(const v1::ListCheckpointsResponse& resp) { return Dump(CheckpointListObject(resp)); }

std::string Duration(double s) {
  if (s < 0) return "?";
  char buf[32];
  if (s < 90) std::snprintf(buf, sizeof(buf), "%.0fs", s);
  else if (s < 5400) std::snprintf(buf, sizeof(buf), "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
  else std::snprintf(buf, sizeof(buf), "%.0fh%02.0fm", std::floor(s / 3600), std::fmod(s / 60, 60));
  return buf;
}

std::string ProgressLine(const std::string& id, const v1::Progress& p, int attempt) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "[%s] step %lld/%lld  loss %.4f  %.0f tokens/s  ETA %s  attempt %d", id.c_str(),
                static_cast<long long>(p.step()), static_cast<long long>(p.total_steps()), p.loss(),
                p.tokens_per_s(), Duration(p.eta_s()).c_str(), attempt);
  std::string line = buf;
  if (p.pairs() > 0) {  // a preference: step (TRL's rewards/accuracies and rewards/margins)
    std::snprintf(buf, sizeof(buf), "  reward_acc %.3f margin %.4f", p.rewards_accuracies(), p.rewards_margins());
    line += buf;
  }
  if (p.eval_step() > 0) {  // the last held-out evaluation (job file eval:)
    std::snprintf(buf, sizeof(buf), "  eval_loss %.4f", p.eval_loss());
    line += buf;
    if (p.eval_exact_match() >= 0) {
      std::snprintf(buf, sizeof(buf), " exact %.1f%%", 100 * p.eval_exact_match());
      line += buf;
    }
    std::snprintf(buf, sizeof(buf), " @%lld", static_cast<long long>(p.eval_step()));
    line += buf;
  }
  return line;
}

}  // namespace jobcmd

using namespace jobcmd;

namespace {


void OnSigint(int) { g_interrupted = true; }

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string Clock(int64_t unix_ms) {
  std::time_t t = unix_ms / 1000;
  std::tm tm;
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

// Whether anything accepts TCP connections at host:port (a coordinator that
// failed our handshake, say), as opposed to nothing listening at all.
bool SomethingListens(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), address.substr(colon + 1).c_str(), &hints, &res) != 0) return false;
  bool open = false;
  for (addrinfo* a = res; a && !open; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    open = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(res);
  return open;
}

// `run` and `watch` exit 0 only for a job that succeeded.
shard::Status EndedStatus(const v1::JobStatus& js) {
  return js.state() == v1::SUCCEEDED ? shard::OkStatus()
                                     : shard::Aborted("job " + js.id() + " ended " + shardd::JobStateName(js.state()));
}

}  // namespace


shard::Status JobCommands::State::Connect(bool allow_embed, bool allow_offline) {
  if (client.coordinator.empty()) client.coordinator = Env("SHARDD_COORDINATOR", "127.0.0.1:7070");
  RETURN_IF_ERROR(CheckCoordinatorAddress(client.coordinator));
  if (client.state_dir.empty()) client.state_dir = Env("SHARDD_STATE_DIR", ".shardd");
  if (client.token.empty()) client.token = Env("SHARDD_TOKEN", "");
  if (client.tls_ca.empty()) client.tls_ca = Env("SHARDD_TLS_CA", "");
  if (client.tls_cert.empty()) client.tls_cert = Env("SHARDD_TLS_CERT", "");
  if (client.tls_key.empty()) client.tls_key = Env("SHARDD_TLS_KEY", "");
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds,
                   shardd::ClientCredentials({client.tls_ca, client.tls_cert, client.tls_key}));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  auto channel = grpc::CreateCustomChannel(client.coordinator, creds, args);
  const bool up = channel->WaitForConnected(std::chrono::system_clock::now() + 1500ms);
  if (!up) {
    // Over TLS a refused handshake looks the same as no coordinator; an
    // embedded one would serve plaintext, which these credentials cannot reach.
    if (!client.tls_ca.empty())
      return shard::Unavailable("no coordinator completes a TLS handshake at " + client.coordinator +
                                " (is one running there with TLS? does --tls-ca verify its certificate? with "
                                "--tls-client-ca it also needs --tls-cert/--tls-key that CA signed)");
    if (allow_offline && !allow_embed && shardd::IsLoopbackAddress(client.coordinator) &&
        fs::exists(fs::path(client.state_dir) / "shardd.db") && !SomethingListens(client.coordinator)) {
      // The coordinator is gone but its database and logs are here: serve
      // this one command from them, read-only, on a private loopback port.
      shardd::CoordinatorOptions co;
      co.state_dir = client.state_dir;
      co.server.listen = "127.0.0.1:0";
      co.read_only = true;
      auto c = shardd::Coordinator::Start(co);
      if (!c.ok()) return c.status().WithContext("reading " + client.state_dir + " offline");
      embedded = std::move(*c);
      client.token = embedded->admin_token();
      follow = false;  // nothing will be written any more
      std::fprintf(stderr, "shardctl: no coordinator answers at %s; showing the state in %s (read-only)\n",
                   client.coordinator.c_str(), client.state_dir.c_str());
      channel = grpc::CreateCustomChannel(embedded->address(), creds, args);
      stub = v1::JobService::NewStub(channel);
      return shard::OkStatus();
    }
    if (!allow_embed || !shardd::IsLoopbackAddress(client.coordinator))
      return shard::Unavailable("no coordinator answers at " + client.coordinator +
                                " (start one with `shardd`, or use `shardctl run` to start one here)");
    shardd::CoordinatorOptions co;
    co.state_dir = client.state_dir;
    co.server.listen = client.coordinator;
    // The dashboard and /metrics while the run lasts: shardd's default port,
    // or any free one when that is taken.
    co.http_listen = "127.0.0.1:7080";
    auto c = shardd::Coordinator::Start(co);
    if (!c.ok() && c.status().message().find("for HTTP") != std::string::npos) {
      co.http_listen = "127.0.0.1:0";
      c = shardd::Coordinator::Start(co);
    }
    if (!c.ok()) return c.status().WithContext("starting a local coordinator");
    embedded = std::move(*c);
    client.token = embedded->admin_token();
    // The dashboard as a one-time login link: printed only here, and dead
    // with this coordinator when the run ends.
    auto link = embedded->dashboard_login_url(shardd::LoginNonces::kMaxTtl);
    std::printf("shardctl: no coordinator at %s; started one here (state in %s); dashboard %s\n",
                client.coordinator.c_str(), client.state_dir.c_str(),
                link.ok() ? link->c_str() : embedded->dashboard_url().c_str());
    channel = grpc::CreateCustomChannel(embedded->address(), creds, args);
  }
  if (client.token.empty()) {
    auto t = shardd::ReadAdminToken(client.state_dir);
    if (!t.ok())
      return shard::Unauthenticated("no token: pass --token, set SHARDD_TOKEN, or point --state-dir at the "
                                    "coordinator's state dir (" + t.status().message() + ")");
    client.token = *t;
  }
  stub = v1::JobService::NewStub(channel);
  return shard::OkStatus();
}

shard::StatusOr<v1::JobStatus> JobCommands::State::Submit() {
  v1::SubmitJobRequest req;
  auto text = shard::ReadFileToString(job_file);
  if (!text.ok()) return text.status();
  // Protobuf strings are UTF-8: checked here, one line naming the file, not
  // a libprotobuf serialization error and an empty answer.
  RETURN_IF_ERROR(shard::CheckUtf8(*text, job_file));
  req.mutable_spec()->set_yaml(*text);
  for (const auto& s : sets) {
    RETURN_IF_ERROR(shard::CheckUtf8(s, "--set " + s.substr(0, s.find('='))));
    req.mutable_spec()->add_overrides(s);
  }
  req.mutable_spec()->set_source_path(job_file);
  req.mutable_spec()->set_workdir(fs::current_path().string());
  v1::JobStatus resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  RETURN_IF_ERROR(shardd::FromGrpc(stub->SubmitJob(&ctx, req, &resp), "submit"));
  return resp;
}

shard::StatusOr<v1::JobStatus> JobCommands::State::Watch(const std::string& id, bool quiet_past, bool as_json) {
  const bool tty = ::isatty(STDOUT_FILENO);
  int64_t after = 0;
  auto last_print = std::chrono::steady_clock::now() - 1h;
  bool line_open = false;
  auto end_line = [&] {
    if (line_open) std::printf("\n");
    line_open = false;
  };
  while (true) {
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_after_seq(after);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + client.token);
    std::atomic<bool> done{false};
    std::thread canceller([&] {
      while (!done) {
        if (g_interrupted) {
          ctx.TryCancel();
          return;
        }
        std::this_thread::sleep_for(50ms);
      }
    });
    auto reader = stub->WatchJob(&ctx, req);
    v1::JobEvent ev;
    int attempt = 0;
    while (reader->Read(&ev)) {
      attempt = ev.attempt();
      if (as_json) {  // one object a line; progress is `status --json`'s, not an event
        if (ev.kind() == "progress") continue;
        after = ev.seq();
        std::printf("%s\n", Dump(EventObject(ev)).c_str());
        std::fflush(stdout);
        continue;
      }
      if (ev.kind() == "progress") {
        auto now = std::chrono::steady_clock::now();
        if (tty) {
          std::printf("\r%s\033[K", ProgressLine(id, ev.progress(), attempt).c_str());
          line_open = true;
        } else if (now - last_print > 5s) {
          std::printf("%s\n", ProgressLine(id, ev.progress(), attempt).c_str());
          last_print = now;
        }
        std::fflush(stdout);
        continue;
      }
      after = ev.seq();
      if (quiet_past && ev.unix_ms() < 0) continue;
      end_line();
      std::printf("[%s] %s %-10s attempt %d: %s%s%s\n", id.c_str(), Clock(ev.unix_ms()).c_str(),
                  shardd::JobStateName(ev.state()).c_str(), ev.attempt(), ev.kind().c_str(),
                  ev.message().empty() ? "" : ": ", ev.message().c_str());
      std::fflush(stdout);
    }
    grpc::Status st = reader->Finish();
    done = true;
    canceller.join();
    end_line();
    if (g_interrupted) return shard::Aborted("interrupted");
    // The stream ends when the job does; anything else (a coordinator
    // restart) is retried from the last event seen.
    v1::GetJobRequest greq;
    greq.set_job_id(id);
    v1::JobStatus js;
    grpc::ClientContext gctx;
    Prepare(&gctx, 10s);
    grpc::Status gs = stub->GetJob(&gctx, greq, &js);
    if (gs.ok() && shardd::IsTerminal(js.state())) return js;
    if (!gs.ok() && gs.error_code() != grpc::StatusCode::UNAVAILABLE) return shardd::FromGrpc(gs, "watch " + id);
    if (!st.ok() && st.error_code() != grpc::StatusCode::UNAVAILABLE && st.error_code() != grpc::StatusCode::CANCELLED)
      return shardd::FromGrpc(st, "watch " + id);
    std::this_thread::sleep_for(1s);
  }
}

shard::Status JobCommands::State::Cancel() {
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  req.set_reason(reason);
  v1::JobStatus js;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  RETURN_IF_ERROR(shardd::FromGrpc(stub->CancelJob(&ctx, req, &js), "cancel " + job_id));
  if (json) std::printf("%s\n", Json(js).c_str());
  else std::printf("%s: %s\n", js.id().c_str(), shardd::JobStateName(js.state()).c_str());
  return shard::OkStatus();
}

JobCommands::JobCommands(CLI::App& app) : s_(std::make_unique<State>()) {
  State& s = *s_;
  app.add_option("--coordinator", s.client.coordinator, "Coordinator host:port (default $SHARDD_COORDINATOR or 127.0.0.1:7070)");
  app.add_option("--token", s.client.token, "Admin token (default $SHARDD_TOKEN, else <state dir>/admin.token)");
  app.add_option("--state-dir", s.client.state_dir,
                 "Coordinator state dir: where the token is read, and where `run` keeps an embedded coordinator's "
                 "state (default $SHARDD_STATE_DIR or .shardd)");
  app.add_option("--tls-ca", s.client.tls_ca,
                 "PEM CA to verify the coordinator's TLS certificate (default $SHARDD_TLS_CA)");
  app.add_option("--tls-cert", s.client.tls_cert,
                 "PEM client certificate for a coordinator with mutual TLS, with --tls-key (default $SHARDD_TLS_CERT)");
  app.add_option("--tls-key", s.client.tls_key, "PEM private key of --tls-cert (default $SHARDD_TLS_KEY)");

  s.run = app.add_subcommand("run", "Submit a job and watch it to the end (starts a local coordinator if none answers)");
  s.run->add_option("job_file", s.job_file, "Job file (YAML)")->required()->check(CLI::ExistingFile);
  s.run->add_option("--set", s.sets, "Override a job-file key: --set train.steps=100 (repeatable)");

  s.submit = app.add_subcommand("submit", "Submit a job to the coordinator");
  s.submit->add_option("job_file", s.job_file, "Job file (YAML)")->required()->check(CLI::ExistingFile);
  s.submit->add_option("--set", s.sets, "Override a job-file key (repeatable)");
  s.submit->add_flag("--watch", s.and_watch, "Watch it until it ends");
  s.submit->add_flag("--json", s.json, "Print the job status as JSON");

  s.status = app.add_subcommand("status", "A job's state, progress and workers");
  s.status->add_option("job", s.job_id, "Job id")->required();
  s.status->add_flag("--json", s.json, "Print JSON");

  s.metrics = app.add_subcommand("metrics", "A job's per-step loss, learning rate, gradient norm, throughput and loss scale");
  s.metrics->add_option("job", s.job_id, "Job id")->required();
  s.metrics->add_option("--last", s.last, "Only the last N steps")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  s.metrics->add_flag("--json", s.json, "Print one JSON object per step (JSON lines)");

  s.list = app.add_subcommand("list", "Jobs (active ones; --all for finished too)");
  s.list->add_flag("--all", s.all, "Include finished jobs");
  s.list->add_flag("--json", s.json, "Print JSON");

  s.queue = app.add_subcommand("queue", "The local host's queue: who holds which GPUs and CPU slots, who waits and why");
  s.queue->add_flag("--json", s.json, "Print the job list as JSON (priority, placement, queue_position, demand)");

  s.cancel = app.add_subcommand("cancel", "Cancel a job: its workers are stopped");
  s.cancel->add_option("job", s.job_id, "Job id")->required();
  s.cancel->add_option("--reason", s.reason, "Recorded with the cancellation");
  s.cancel->add_flag("--json", s.json, "Print JSON");

  s.watch = app.add_subcommand("watch", "Follow a job's events and progress until it ends");
  s.watch->add_option("job", s.job_id, "Job id")->required();
  s.watch->add_flag("--json", s.json,
                    "One JSON object a line per event: seq, job_id, unix_ms, time, attempt, kind, state, message");

  s.report = app.add_subcommand("report", "Write a job's run report (HTML: curves, events, plan, final figures)");
  s.report->add_option("job", s.report_opts.job_id, "Job id")->required();
  s.report->add_option("--out", s.report_opts.out, "Write it here (default: <run dir>/report.html)");
  s.report->add_flag("--json", s.report_opts.json, "Print {\"job_id\", \"path\", ...} as JSON");

  s.dashboard = app.add_subcommand("dashboard", "Print a one-time login link for the web dashboard (valid 2 minutes)");
  s.dashboard->add_option("job", s.dashboard_opts.job, "Open this job's page (default: the job list)");
  s.dashboard->add_option("--url", s.dashboard_opts.url, "The dashboard (what shardd printed as \"dashboard http://...\")")
      ->capture_default_str();

  s.logs = app.add_subcommand("logs", "A worker's log");
  s.logs->add_option("job", s.job_id, "Job id")->required();
  s.logs->add_option("--rank", s.rank, "Rank")->capture_default_str();
  s.logs->add_option("--attempt", s.attempt, "Attempt (default: the current one)");
  s.logs->add_flag("--follow,-f", s.follow, "Keep printing as the log grows, until the attempt ends");
  s.logs->add_option("--tail,-n", s.tail, "Only the last N lines (then on, with --follow)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  s.logs->add_flag("--all-ranks", s.all_ranks, "Every rank's log in one time-ordered view, lines prefixed [rank R]");
}

JobCommands::~JobCommands() = default;

bool JobCommands::Selected() const {
  const State& s = *s_;
  for (CLI::App* c : {s.run, s.submit, s.status, s.metrics, s.list, s.queue, s.cancel, s.watch, s.logs, s.report, s.dashboard})
    if (c->parsed()) return true;
  return false;
}

shard::Status JobCommands::Run() {
  State& s = *s_;
  struct sigaction sa{};
  sa.sa_handler = OnSigint;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (s.dashboard->parsed()) return RunDashboard(s.client, s.dashboard_opts);
  const bool reads = s.status->parsed() || s.list->parsed() || s.queue->parsed() || s.logs->parsed() ||
                     s.metrics->parsed() || s.report->parsed();
  RETURN_IF_ERROR(s.Connect(/*allow_embed=*/s.run->parsed(), /*allow_offline=*/reads));
  if (s.run->parsed() || s.submit->parsed()) {
    ASSIGN_OR_RETURN(v1::JobStatus js, s.Submit());
    if (js.launcher() == "external" && !s.json)
      std::fprintf(stderr,
                   "shardctl: %s waits for its %d worker(s): start them with your own launcher "
                   "(deploy/slurm/external-job.sbatch); `shardctl status %s` shows the join token\n",
                   js.id().c_str(), js.world_size(), js.id().c_str());
    if (s.submit->parsed() && !s.and_watch) {
      if (s.json) std::printf("%s\n", Json(js).c_str());
      else std::printf("%s\n", js.id().c_str());
      return shard::OkStatus();
    }
    std::printf("submitted %s (logs: shardctl logs %s --rank R)\n", js.id().c_str(), js.id().c_str());
    auto end = s.Watch(js.id(), false);
    if (!end.ok()) {
      if (end.status().code() == shard::StatusCode::kAborted && s.embedded) {
        // The coordinator lives in this process: take the job down with it.
        auto c = s.embedded->jobs()->Cancel(js.id(), "shardctl run interrupted");
        (void)c;
        for (int i = 0; i < 150 && !s.embedded->jobs()->Drained(js.id()); ++i) std::this_thread::sleep_for(100ms);
        return shard::Aborted("interrupted; job " + js.id() + " cancelled");
      }
      if (end.status().code() == shard::StatusCode::kAborted)
        return shard::Aborted("stopped watching; job " + js.id() + " keeps running (shardctl watch " + js.id() + ")");
      return end.status();
    }
    std::printf("job %s %s%s%s\n", end->id().c_str(), shardd::JobStateName(end->state()).c_str(),
                end->reason().empty() ? "" : ": ", end->reason().c_str());
    if (s.embedded) {
      // Let the finished workers exit before the coordinator goes.
      for (int i = 0; i < 150 && !s.embedded->jobs()->Drained(js.id()); ++i) std::this_thread::sleep_for(100ms);
      s.embedded->Stop();
    }
    return EndedStatus(*end);
  }
  if (s.status->parsed()) return s.Status();
  if (s.list->parsed()) return s.List();
  if (s.queue->parsed()) return s.List(/*queue=*/true);
  if (s.cancel->parsed()) return s.Cancel();
  if (s.logs->parsed()) return s.Logs();
  if (s.metrics->parsed()) return s.Metrics();
  if (s.report->parsed()) return RunReport(s.stub.get(), s.Preparer(), s.report_opts);
  if (s.watch->parsed()) {
    ASSIGN_OR_RETURN(v1::JobStatus js, s.Watch(s.job_id, false, s.json));
    if (!s.json)  // under --json the terminal event said it; the exit code says it too
      std::printf("job %s %s%s%s\n", js.id().c_str(), shardd::JobStateName(js.state()).c_str(),
                  js.reason().empty() ? "" : ": ", js.reason().c_str());
    return EndedStatus(js);
  }
  return shard::InvalidArgument("no command");
}

shard::Status JobCommands::Checkpoints(const std::string& job_id, bool json) {
  State& s = *s_;
  RETURN_IF_ERROR(s.Connect(/*allow_embed=*/false, /*allow_offline=*/true));
  v1::ListCheckpointsRequest req;
  req.set_job_id(job_id);
  v1::ListCheckpointsResponse resp;
  grpc::ClientContext ctx;
  s.Prepare(&ctx);
  RETURN_IF_ERROR(shardd::FromGrpc(s.stub->ListCheckpoints(&ctx, req, &resp), "checkpoints " + job_id));
  for (const auto& c : resp.checkpoints())  // a tier this shardctl does not know: one line, not a guess
    RETURN_IF_ERROR(shardd::FromCheckpointTierProto(c.checkpoint_tier(), "checkpoint " + c.path()).status());
  if (json) {
    std::printf("%s\n", Json(resp).c_str());
    return shard::OkStatus();
  }
  std::printf("%-10s %-8s %-7s %-6s %-6s %-12s %s\n", "STEP", "STATE", "TIER", "WORLD", "FILES", "MB", "PATH");
  for (const auto& c : resp.checkpoints()) {
    const bool valid = c.problem().empty();
    std::printf("%-10lld %-8s %-7s %-6d %-6d %-12.1f %s%s\n", static_cast<long long>(c.step()),
                valid ? "valid" : "invalid", c.checkpoint_tier() == v1::CHECKPOINT_TIER_MEMORY ? "memory" : "disk",
                c.world(), c.files(),
                c.bytes() / 1e6, c.path().c_str(), valid ? "" : ("  (" + c.problem() + ")").c_str());
  }
  return shard::OkStatus();
}

}  // namespace shardctl
