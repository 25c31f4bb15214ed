#include "coordinator/server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>

#include "coordinator/server/coordinator_server.h"
#include "coordinator/server/dashboard_api.h"
#include "coordinator/server/http_connections.h"
#include "coordinator/server/metrics_page.h"
#include "coordinator/state/auth.h"
#include "coordinator/web/web_assets.h"
#include "shard/common/logging.h"

namespace shardd {
namespace {

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
    "<button>Log in</button></form><p>The token is in the coordinator's state directory (admin.token); "
    "<code>shardctl dashboard</code> prints a one-time login link.</p>";

std::string SessionCookie(const std::string& token) {
  return std::string(kDashboardCookie) + "=" + token + "; HttpOnly; SameSite=Strict; Path=/";
}

}  // namespace

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
    return shard::InvalidArgument("--http-listen " + listen +
                                     " is not a loopback address (plain HTTP: the admin token would cross the network "
                                     "in clear); use --allow-insecure if the network is trusted");
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->opts_ = opts;
  s->jobs_ = jobs;
  if (opts.limits.threads < 2 || opts.limits.per_peer < 1 || opts.limits.max_connections < opts.limits.per_peer ||
      opts.limits.reserve < 0 || opts.limits.reserve >= opts.limits.threads || !(opts.limits.header_timeout_s > 0) ||
      !(opts.limits.busy_header_timeout_s > 0))
    return shard::InvalidArgument("HTTP connection limits: need threads >= 2, 1 <= per_peer <= max_connections, "
                                  "0 <= reserve < threads and positive request deadlines");
  // A name in --http-listen is one of this server's names.
  if (!host.empty() && host != "0.0.0.0" && host.front() != '[') s->opts_.hosts.push_back(host);
  s->server_ = std::make_unique<GuardedHttpServer>(opts.limits);
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
  if (!s->server_->RaiseListenBacklog(SOMAXCONN)) LOG_WARN("shardd HTTP: cannot raise the listen backlog on {}", listen);
  httplib::Server* raw = s->server_.get();
  s->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  // Until the accept loop runs, httplib's stop() would not end it (Stop() would hang).
  for (int i = 0; i < 5000 && !raw->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  LOG_INFO("shardd HTTP (dashboard /, /metrics, /healthz) on http://{}:{}/", host, s->port_);
  return s;
}

void HttpServer::Routes() {
  httplib::Server& srv = *server_;
  JobManager* jobs = jobs_;
  const HttpServerOptions o = opts_;
  std::shared_ptr<LoginNonces> nonces = nonces_;
  srv.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  srv.Get("/metrics", [jobs, o](const httplib::Request&, httplib::Response& res) {
    const int64_t grace_ms = o.finished_grace_s < 0 ? -1 : static_cast<int64_t>(o.finished_grace_s * 1000);
    res.set_content(RenderMetrics(jobs->Telemetry(grace_ms), o.version), "text/plain; version=0.0.4");
  });
  srv.Get("/login", [o, nonces](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    if (!req.has_param("nonce")) return res.set_content(kLoginPage, "text/html");
    if (!nonces->Redeem(req.get_param_value("nonce"))) {
      res.status = 401;
      return res.set_content(std::string(kLoginPage) +
                                 "<p style='color:#b00'>This login link was used already or has expired: run "
                                 "<code>shardctl dashboard</code> for a new one, or log in with the token.</p>",
                             "text/html");
    }
    res.set_header("Set-Cookie", SessionCookie(o.admin_token));
    res.set_redirect(SafeNextPath(req.get_param_value("next")));
  });
  srv.Post("/login", [o](const httplib::Request& req, httplib::Response& res) {
    const std::string token = req.get_param_value("token");
    if (o.admin_token.empty() || !TokensEqual(token, o.admin_token)) {
      res.status = 401;
      res.set_content(std::string(kLoginPage) + "<p style='color:#b00'>Wrong token.</p>", "text/html");
      return;
    }
    res.set_header("Set-Cookie", SessionCookie(token));
    res.set_redirect("/");
  });
  // Host check for all but /healthz; then the token for all but the login page.
  srv.set_pre_routing_handler([o](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/healthz") return httplib::Server::HandlerResponse::Unhandled;
    const std::string host = req.get_header_value("Host");
    if (!HostAllowed(host, o.hosts)) {
      res.status = 421;
      res.set_content("Host \"" + HostHeaderName(host) +
                          "\" is not a name of this server: shardd answers its IP addresses, localhost and the names "
                          "given with --dashboard-host (a guard against DNS rebinding)\n",
                      "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/login" || (req.path == "/metrics" && o.metrics_without_token))
      return httplib::Server::HandlerResponse::Unhandled;
    if (HttpAuthorized(req.remote_addr, req.get_header_value("Authorization"), req.get_header_value("Cookie"),
                       o.admin_token, o.trust_loopback))
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.path.rfind("/api/", 0) == 0 || req.path == "/metrics")
      Error(res, 401,
            "unauthenticated: send Authorization: Bearer <admin token> (in <state dir>/admin.token), or log in "
            "with the link `shardctl dashboard` prints");
    else
      res.set_redirect("/login");
    return httplib::Server::HandlerResponse::Handled;
  });
  srv.Post("/api/login-link", [nonces](const httplib::Request&, httplib::Response& res) {
    auto nonce = nonces->Issue(kLoginLinkTtl);
    if (!nonce.ok()) return Error(res, 503, nonce.status().message());
    Json(res, {{"path", "/login?nonce=" + *nonce}, {"expires_in_s", kLoginLinkTtl.count()}});
  });
  srv.Get("/api/metric_fields", [](const httplib::Request&, httplib::Response& res) { Json(res, MetricFieldsJson()); });
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

shard::StatusOr<std::string> HttpServer::IssueLoginPath(std::chrono::seconds ttl, const std::string& next) {
  ASSIGN_OR_RETURN(std::string nonce, nonces_->Issue(ttl));
  std::string path = "/login?nonce=" + nonce;
  const std::string safe = SafeNextPath(next);
  if (safe != "/") path += "&next=" + httplib::detail::encode_query_param(safe);
  return path;
}

size_t HttpServer::refused_connections() const { return server_ ? server_->refused() : 0; }
size_t HttpServer::evicted_connections() const { return server_ ? server_->evicted() : 0; }

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shardd
