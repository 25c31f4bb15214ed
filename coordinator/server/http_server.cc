#include "coordinator/server/http_server.h"

#include <httplib.h>

#include <algorithm>

#include "coordinator/auth.h"
#include "coordinator/server/coordinator_server.h"
#include "coordinator/server/dashboard_api.h"
#include "coordinator/server/metrics_page.h"
#include "coordinator/web/web_assets.h"
#include "shard/common/logging.h"

namespace shardd {
namespace {

constexpr const char* kCookie = "shardd_token";

// The cookie's value, or "".
std::string CookieToken(const std::string& cookies) {
  const std::string key = std::string(kCookie) + "=";
  for (size_t at = 0; at < cookies.size();) {
    while (at < cookies.size() && (cookies[at] == ' ' || cookies[at] == ';')) ++at;
    const size_t end = std::min(cookies.find(';', at), cookies.size());
    if (cookies.compare(at, key.size(), key) == 0) return cookies.substr(at + key.size(), end - at - key.size());
    at = end;
  }
  return "";
}

void Json(httplib::Response& res, const nlohmann::json& j) {
  res.set_header("Cache-Control", "no-store");
  res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void Error(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  Json(res, {{"error", message}});
}

const char* kLoginPage =
    "<!doctype html><meta charset=utf-8><title>shardd login</title>"
    "<body style='font-family:sans-serif;margin:4em'><h1>shardd</h1>"
    "<form method=post action=/login><label>Admin token <input name=token type=password autofocus></label> "
    "<button>Log in</button></form><p>The token is in the coordinator's state directory (admin.token).</p>";

}  // namespace

bool HttpAuthorized(const std::string& remote_addr, const std::string& authorization, const std::string& cookies,
                    const std::string& token) {
  if (remote_addr.rfind("127.", 0) == 0 || remote_addr == "::1" || remote_addr.rfind("::ffff:127.", 0) == 0)
    return true;
  if (token.empty()) return false;
  if (authorization.rfind("Bearer ", 0) == 0 && TokensEqual(authorization.substr(7), token)) return true;
  const std::string cookie = CookieToken(cookies);
  return !cookie.empty() && TokensEqual(cookie, token);
}

shard::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& opts, JobManager* jobs) {
  const std::string& listen = opts.listen;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return shard::InvalidArgument("--http-listen " + listen + ": expected host:port");
  const std::string host = listen.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
    return shard::InvalidArgument("--http-listen " + listen + ": the port is not a number");
  }
  if (!IsLoopbackAddress(listen) && !opts.allow_insecure)
    return shard::FailedPrecondition("--http-listen " + listen +
                                     " is not a loopback address (plain HTTP; /metrics is unauthenticated); use "
                                     "--allow-insecure if the network is trusted");
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->opts_ = opts;
  s->jobs_ = jobs;
  s->server_ = std::make_unique<httplib::Server>();
  const size_t threads = static_cast<size_t>(std::max(4, opts.threads));
  s->server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s->server_->set_read_timeout(opts.read_timeout_s, 0);
  s->server_->set_write_timeout(opts.read_timeout_s, 0);
  s->server_->set_keep_alive_timeout(opts.keep_alive_timeout_s);
  s->server_->set_keep_alive_max_count(100);
  // cpp-httplib's default sets SO_REUSEPORT, which lets a second daemon
  // share this port (coordinator/server/listen_check.h): SO_REUSEADDR only.
  s->server_->set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s->Routes();
  s->port_ = port == 0 ? s->server_->bind_to_any_port(host) : (s->server_->bind_to_port(host, port) ? port : -1);
  if (s->port_ <= 0) return shard::Unavailable("cannot listen on " + listen + " for HTTP (address in use?)");
  httplib::Server* raw = s->server_.get();
  s->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  // stop() before the thread listens is a no-op and Stop() would then join forever: wait until it listens.
  for (int i = 0; i < 5000 && !raw->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  LOG_INFO("shardd HTTP (dashboard /, /metrics, /healthz) on http://{}:{}/", host, s->port_);
  return s;
}

void HttpServer::Routes() {
  httplib::Server& srv = *server_;
  JobManager* jobs = jobs_;
  const HttpServerOptions o = opts_;
  srv.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  srv.Get("/metrics", [jobs, o](const httplib::Request&, httplib::Response& res) {
    const int64_t grace_ms = o.finished_grace_s < 0 ? -1 : static_cast<int64_t>(o.finished_grace_s * 1000);
    res.set_content(RenderMetrics(jobs->Telemetry(grace_ms), o.version), "text/plain; version=0.0.4");
  });
  srv.Get("/login", [](const httplib::Request&, httplib::Response& res) { res.set_content(kLoginPage, "text/html"); });
  srv.Post("/login", [o](const httplib::Request& req, httplib::Response& res) {
    const std::string token = req.get_param_value("token");
    if (o.admin_token.empty() || !TokensEqual(token, o.admin_token)) {
      res.status = 401;
      res.set_content(std::string(kLoginPage) + "<p style='color:#b00'>Wrong token.</p>", "text/html");
      return;
    }
    res.set_header("Set-Cookie", std::string(kCookie) + "=" + token + "; HttpOnly; SameSite=Strict; Path=/");
    res.set_redirect("/");
  });
  // Everything below needs a loopback peer or the admin token.
  srv.set_pre_routing_handler([o](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/healthz" || req.path == "/metrics" || req.path == "/login") return httplib::Server::HandlerResponse::Unhandled;
    if (HttpAuthorized(req.remote_addr, req.get_header_value("Authorization"), req.get_header_value("Cookie"),
                       o.admin_token))
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.path.rfind("/api/", 0) == 0) Error(res, 401, "unauthenticated: send Authorization: Bearer <admin token>");
    else res.set_redirect("/login");
    return httplib::Server::HandlerResponse::Handled;
  });
  srv.Get("/api/jobs", [jobs](const httplib::Request&, httplib::Response& res) {
    Json(res, JobListJson(jobs->List(/*include_finished=*/true)));
  });
  srv.Get(R"(/api/jobs/([^/]+))", [jobs](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    auto st = jobs->Get(id);
    if (!st.ok()) return Error(res, 404, st.status().message());
    auto events = jobs->Events(id, 0);
    auto ckpts = jobs->Checkpoints(id);
    Json(res, JobJson(*st, events.ok() ? *events : std::vector<v1::JobEvent>{},
                      ckpts.ok() ? *ckpts : std::vector<v1::CheckpointInfo>{}));
  });
  srv.Get(R"(/api/jobs/([^/]+)/metrics)", [jobs](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    int max_points = 2000;
    if (req.has_param("max_points")) {
      try {
        max_points = std::clamp(std::stoi(req.get_param_value("max_points")), 10, 20000);
      } catch (...) {
        return Error(res, 400, "max_points: not a number");
      }
    }
    auto m = jobs->Metrics(id, 0, 0, /*max_bytes=*/int64_t{1} << 40);
    if (!m.ok()) return Error(res, 404, m.status().message());
    auto ckpts = jobs->Checkpoints(id);
    std::vector<v1::MetricRow> rows(m->rows().begin(), m->rows().end());
    Json(res, MetricsJson(rows, ckpts.ok() ? *ckpts : std::vector<v1::CheckpointInfo>{}, max_points));
  });
  srv.Get(R"(/(|index\.html|app\.js|style\.css))", [](const httplib::Request& req, httplib::Response& res) {
    const WebAsset* a = FindWebAsset(req.path == "/" ? "/index.html" : req.path);
    if (!a) return Error(res, 404, "no such page");
    res.set_content(std::string(a->body), a->content_type);
  });
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shardd
