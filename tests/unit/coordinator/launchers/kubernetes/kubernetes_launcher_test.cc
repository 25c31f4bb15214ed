// The launcher end to end with the real kubectl binary against the stand-in
// API server (tests/k8s/fake_apiserver.py) playing a scenario: apply, watch,
// exits with reasons, deletes, adoption. Skipped where kubectl is not
// installed (the renderer and status tests still run).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "coordinator/launchers/kubernetes/kubernetes_launcher.h"

namespace shardd {
namespace {

namespace fs = std::filesystem;

std::string Source() {
  const char* s = std::getenv("SHARDD_SOURCE_DIR");
  return s ? s : ".";
}

bool OnPath(const std::string& cmd) {
  return std::system(("command -v " + cmd + " > /dev/null 2>&1").c_str()) == 0;
}

class FakeApiServer {
 public:
  explicit FakeApiServer(const std::string& scenario) {
    dir_ = fs::temp_directory_path() / ("k8s_fake_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string script = Source() + "/tests/k8s/fake_apiserver.py";
    const std::string scen = Source() + "/tests/k8s/scenarios/" + scenario + ".json";
    const std::string port_file = (dir_ / "port").string(), log = (dir_ / "requests.jsonl").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("python3", "python3", script.c_str(), "--port-file", port_file.c_str(), "--log", log.c_str(),
               "--scenario", scen.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Until the server wrote its port or exited: python3's start is slow on a
    // loaded machine, and no fixed count of naps fits every load.
    while (!fs::exists(port_file)) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream pf(port_file);
    pf >> port_;
    std::ofstream kc(dir_ / "kubeconfig");
    kc << "apiVersion: v1\nkind: Config\nclusters: [{name: fake, cluster: {server: \"http://127.0.0.1:" << port_
       << "\"}}]\nusers: [{name: fake, user: {token: fake}}]\ncontexts: [{name: fake, context: {cluster: fake, "
          "user: fake}}]\ncurrent-context: fake\n";
  }
  ~FakeApiServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }
  bool up() const { return port_ > 0; }
  KubernetesLauncherOptions Options() const {
    KubernetesLauncherOptions o;
    o.kubectl_args = {"--kubeconfig", (dir_ / "kubeconfig").string()};
    o.adopt_poll_interval_s = 0.2;
    o.command_timeout_s = 90;  // a kubectl run on a loaded machine is slow, not hung
    return o;
  }
  // How many requests named a namespaced object so far (one or more per
  // kubectl run; discovery requests are not counted).
  size_t ObjectRequests() const {
    std::ifstream f(dir_ / "requests.jsonl");
    std::string line;
    size_t n = 0;
    while (std::getline(f, line)) n += line.find("/namespaces/") != std::string::npos;
    return n;
  }
  // The requests so far, one JSON object each.
  std::vector<nlohmann::json> Requests() const {
    std::vector<nlohmann::json> out;
    std::ifstream f(dir_ / "requests.jsonl");
    std::string line;
    while (std::getline(f, line))
      if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  bool Saw(const std::string& method, const std::string& path_part, const std::string& body_part = "") const {
    for (const auto& r : Requests())
      if (r["method"] == method && r["path"].get<std::string>().find(path_part) != std::string::npos &&
          r["body"].get<std::string>().find(body_part) != std::string::npos)
        return true;
    return false;
  }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

LaunchRequest Request() {
  LaunchRequest r;
  r.job_id = "demo-1";
  r.attempt = 1;
  r.world = 2;
  r.workdir = "/shardd/jobs/demo";
  r.log_dir = "/shardd/state/jobs/demo-1/attempt_1";
  r.coordinator = "shardd:7070";
  r.env["SHARDD_WORKER_TOKEN"] = "tok-123";
  r.resources.launcher = shard::Launcher::kKubernetes;
  r.resources.kubernetes.image = "registry.example/shardd-worker:0.1";
  r.resources.kubernetes.pvc = "shardd-data";
  r.resources.kubernetes.poll_interval_s = 0.2;
  return r;
}

// Waits for `done` by the launcher's progress, not by the clock: it gives up
// only once the stand-in API server has answered kRequestBudget requests for
// objects since the wait began without `done` coming true (every scenario ends
// within a few polls; the launcher polls every 0.2 s), so a slow kubectl on a
// loaded machine only makes the wait longer. The clock is a last resort for a
// launcher that stopped asking at all, below the test's 120 s timeout.
constexpr size_t kRequestBudget = 60;

template <typename F>
bool WaitFor(const FakeApiServer& api, F done) {
  const size_t limit = api.ObjectRequests() + kRequestBudget;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(100);
  while (api.ObjectRequests() < limit && std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

std::vector<RankExit> WaitForExits(const FakeApiServer& api, KubernetesLauncher& l) {
  std::vector<RankExit> exits;
  WaitFor(api, [&] {
    auto e = l.Poll();
    exits.insert(exits.end(), e.begin(), e.end());
    return !exits.empty();
  });
  return exits;
}

class KubernetesLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OnPath("kubectl")) GTEST_SKIP() << "kubectl is not installed: the launcher's kubectl runs are not tested here";
    if (!OnPath("python3")) GTEST_SKIP() << "python3 is not installed (the stand-in API server needs it)";
  }
};

TEST_F(KubernetesLauncherTest, AppliesWatchesReportsEvictionAndDeletes) {
  FakeApiServer api("evicted");
  ASSERT_TRUE(api.up());
  KubernetesLauncher l(api.Options());
  auto pids = l.Launch(Request());
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_EQ(*pids, std::vector<int>(2, 0));
  EXPECT_EQ(l.Running("demo-1", 1), 2);
  std::vector<RankExit> exits = WaitForExits(api, l);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].rank, RankExit::kAllRanks);
  EXPECT_EQ(exits[0].job_id, "demo-1");
  EXPECT_EQ(exits[0].attempt, 1);
  EXPECT_NE(exits[0].detail.find("was evicted: The node was low on resource: memory"), std::string::npos)
      << exits[0].detail;
  // Server-side apply of all three objects, strict validation, our field manager.
  for (const char* path : {"/api/v1/namespaces/default/secrets/shardd-demo-1-a1",
                           "/api/v1/namespaces/default/services/shardd-demo-1-a1",
                           "/apis/batch/v1/namespaces/default/jobs/shardd-demo-1-a1"})
    EXPECT_TRUE(api.Saw("PATCH", path)) << path;
  for (const auto& r : api.Requests())
    if (r["method"] == "PATCH") {
      EXPECT_EQ(r["content_type"], "application/apply-patch+yaml");
      EXPECT_EQ(r["query"]["fieldManager"], "shardd");
      EXPECT_EQ(r["query"]["fieldValidation"], "Strict");
    }
  EXPECT_TRUE(api.Saw("PATCH", "/secrets/", "tok-123"));
  EXPECT_FALSE(api.Saw("PATCH", "/jobs/", "tok-123"));  // the token only in the Secret
  // One pod still runs: the attempt is not over until it is gone.
  EXPECT_EQ(l.Running("demo-1", 1), 1);
  l.Terminate("demo-1", 1, /*force=*/true);
  ASSERT_TRUE(WaitFor(api, [&] { return l.Running("demo-1", 1) == 0; })) << "the attempt never looked gone";
  EXPECT_TRUE(api.Saw("DELETE", "/jobs/shardd-demo-1-a1", "\"propagationPolicy\":\"Foreground\""));
  EXPECT_TRUE(api.Saw("DELETE", "/services/shardd-demo-1-a1"));
  EXPECT_TRUE(api.Saw("DELETE", "/secrets/shardd-demo-1-a1"));
  EXPECT_TRUE(l.Poll().empty());  // nothing more after our own delete
}

TEST_F(KubernetesLauncherTest, CompleteIsExitZero) {
  FakeApiServer api("complete");
  ASSERT_TRUE(api.up());
  KubernetesLauncher l(api.Options());
  ASSERT_TRUE(l.Launch(Request()).ok());
  std::vector<RankExit> exits = WaitForExits(api, l);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 0);
  EXPECT_EQ(exits[0].signal, 0);
  EXPECT_TRUE(WaitFor(api, [&] { return l.Running("demo-1", 1) == 0; }));  // pods Succeeded
  // A finished attempt cleans up after itself: no Job or Secret with a dead token stays.
  EXPECT_TRUE(WaitFor(api, [&] { return api.Saw("DELETE", "/secrets/shardd-demo-1-a1"); }));
}

// While no pod runs yet (scheduling, image pulls) the attempt is pending, so
// the JobManager does not count that time against the registration deadline.
TEST_F(KubernetesLauncherTest, PendingUntilAPodRuns) {
  FakeApiServer api("complete");  // pods Pending, then Running, then Succeeded
  ASSERT_TRUE(api.up());
  KubernetesLauncher l(api.Options());
  ASSERT_TRUE(l.Launch(Request()).ok());
  EXPECT_TRUE(l.Pending("demo-1", 1)) << "nothing observed yet";
  EXPECT_TRUE(WaitFor(api, [&] { return !l.Pending("demo-1", 1); })) << "never left pending";
  EXPECT_FALSE(l.Pending("demo-1", 7)) << "an unknown attempt is not pending";
}

// A pod the scheduler cannot place keeps the attempt pending, and says why.
TEST_F(KubernetesLauncherTest, UnschedulablePodIsPendingWithTheSchedulersReason) {
  FakeApiServer api("unschedulable");  // one pod Running, the other Unschedulable
  ASSERT_TRUE(api.up());
  KubernetesLauncher l(api.Options());
  ASSERT_TRUE(l.Launch(Request()).ok());
  ASSERT_TRUE(WaitFor(api, [&] { return !l.PendingReason("demo-1", 1).empty(); })) << "no reason given";
  EXPECT_TRUE(l.Pending("demo-1", 1));
  const std::string why = l.PendingReason("demo-1", 1);
  EXPECT_NE(why.find("shardd-demo-1-a1"), std::string::npos) << why;
  EXPECT_NE(why.find("unschedulable"), std::string::npos) << why;
}

TEST_F(KubernetesLauncherTest, BadInputIsExitCodeTwo) {
  FakeApiServer api("bad_input");
  ASSERT_TRUE(api.up());
  KubernetesLauncher l(api.Options());
  ASSERT_TRUE(l.Launch(Request()).ok());
  std::vector<RankExit> exits = WaitForExits(api, l);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 2);
  EXPECT_EQ(exits[0].signal, 0);
}

TEST_F(KubernetesLauncherTest, RefusedApplyIsANonRetryableExit) {
  FakeApiServer api("apply_invalid");
  ASSERT_TRUE(api.up());
  KubernetesLauncher l(api.Options());
  ASSERT_TRUE(l.Launch(Request()).ok());
  std::vector<RankExit> exits = WaitForExits(api, l);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 2);
  EXPECT_NE(exits[0].detail.find("is invalid"), std::string::npos) << exits[0].detail;
  EXPECT_EQ(l.Running("demo-1", 1), 0);
  // The Secret and Service that did get created go with Terminate.
  l.Terminate("demo-1", 1, false);
  EXPECT_TRUE(WaitFor(api, [&] { return api.Saw("DELETE", "/secrets/shardd-demo-1-a1"); }));
}

TEST_F(KubernetesLauncherTest, PodsThatCannotPullTheirImageFailAfterTheGrace) {
  FakeApiServer api("image_pull");
  ASSERT_TRUE(api.up());
  KubernetesLauncherOptions o = api.Options();
  o.image_grace_s = 0.5;
  KubernetesLauncher l(o);
  ASSERT_TRUE(l.Launch(Request()).ok());
  std::vector<RankExit> exits = WaitForExits(api, l);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_NE(exits[0].detail.find("ImagePullBackOff"), std::string::npos) << exits[0].detail;
  EXPECT_NE(exits[0].detail.find("giving up"), std::string::npos) << exits[0].detail;
}

TEST_F(KubernetesLauncherTest, AdoptFindsTheJobByNameAfterARestart) {
  FakeApiServer api("complete");
  ASSERT_TRUE(api.up());
  {
    KubernetesLauncher first(api.Options());
    ASSERT_TRUE(first.Launch(Request()).ok());
    ASSERT_TRUE(WaitFor(api, [&] { return api.Saw("PATCH", "/jobs/shardd-demo-1-a1"); }));
  }  // the coordinator stops: the Job stays
  EXPECT_FALSE(api.Saw("DELETE", "/jobs/"));
  KubernetesLauncherOptions o = api.Options();
  o.adopt_namespaces = {"elsewhere", "default"};
  KubernetesLauncher second(o);
  second.Adopt("demo-1", 1, {0, 0});
  EXPECT_GT(second.Running("demo-1", 1), 0);
  std::vector<RankExit> exits = WaitForExits(api, second);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 0) << exits[0].detail;  // the scenario runs on to Complete
  // An attempt with no Job anywhere is reported gone.
  second.Adopt("demo-1", 7, {0});
  exits = WaitForExits(api, second);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].attempt, 7);
  EXPECT_NE(exits[0].detail.find("disappeared"), std::string::npos) << exits[0].detail;
  EXPECT_EQ(second.Running("demo-1", 7), 0);
}

TEST(KubernetesLauncher, LaunchRefusesBadSettingsAtOnce) {
  KubernetesLauncherOptions o;
  o.kubectl = "/bin/true";  // never reached: rendering fails first
  KubernetesLauncher l(o);
  LaunchRequest r = Request();
  r.workdir = "/home/someone";
  auto st = l.Launch(r);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("mount_path"), std::string::npos);
  o.kubectl = "/nonexistent/kubectl";
  KubernetesLauncher missing(o);
  st = missing.Launch(Request());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), shard::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardd
