// The status rules on what the real kubectl printed for each scenario step
// (tests/k8s/fixtures, recorded by tests/k8s/record_fixtures.sh from the
// stand-in API server's Job and Pod objects).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "coordinator/launchers/kubernetes/k8s_status.h"

namespace shardd::k8s {
namespace {

const char* kName = "shardd-demo-1-a1";

Verdict JudgeFixture(const std::string& name) {
  const char* src = std::getenv("SHARDD_SOURCE_DIR");
  const std::string path = std::string(src ? src : ".") + "/tests/k8s/fixtures/" + name + ".json";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto objs = ParseAttemptObjects(text);
  EXPECT_TRUE(objs.ok()) << objs.status().ToString();
  if (!objs.ok()) return {};
  return Judge(*objs, kName);
}

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(K8sStatus, PendingRunningComplete) {
  Verdict v = JudgeFixture("complete_0");
  EXPECT_EQ(v.phase, Verdict::kPending);
  EXPECT_EQ(v.live_pods, 2);
  EXPECT_TRUE(v.stuck_kind.empty());  // ContainerCreating is not stuck
  v = JudgeFixture("complete_1");
  EXPECT_EQ(v.phase, Verdict::kRunning);
  v = JudgeFixture("complete_2");
  EXPECT_EQ(v.phase, Verdict::kSucceeded);
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.live_pods, 0);
}

TEST(K8sStatus, EvictedPodNamesTheEviction) {
  EXPECT_EQ(JudgeFixture("evicted_0").phase, Verdict::kRunning);
  Verdict v = JudgeFixture("evicted_1");
  EXPECT_EQ(v.phase, Verdict::kFailed);
  EXPECT_TRUE(Has(v.detail, "index 1) was evicted: The node was low on resource: memory")) << v.detail;
  EXPECT_TRUE(Has(v.detail, "BackoffLimitExceeded")) << v.detail;
  EXPECT_NE(v.exit_code, 2);
  EXPECT_EQ(v.live_pods, 1);  // pod 0 still runs until the Job controller stops it
}

TEST(K8sStatus, OomKilled) {
  Verdict v = JudgeFixture("oomkilled_1");
  EXPECT_EQ(v.phase, Verdict::kFailed);
  EXPECT_TRUE(Has(v.detail, "(index 0) was OOMKilled")) << v.detail;
  EXPECT_EQ(v.signal, 9);  // exit code 137
}

TEST(K8sStatus, ExitCodeTwoIsBadInput) {
  Verdict v = JudgeFixture("bad_input_0");
  EXPECT_EQ(v.phase, Verdict::kFailed);
  EXPECT_EQ(v.exit_code, 2);
  EXPECT_EQ(v.signal, 0);
  EXPECT_TRUE(Has(v.detail, "exited with code 2")) << v.detail;
  EXPECT_TRUE(Has(v.detail, "PodFailurePolicy")) << v.detail;
}

TEST(K8sStatus, ImagePullIsStuck) {
  Verdict v = JudgeFixture("image_pull_0");
  EXPECT_EQ(v.phase, Verdict::kPending);
  EXPECT_EQ(v.stuck_kind, "image");
  EXPECT_TRUE(Has(v.detail, "ImagePullBackOff")) << v.detail;
  EXPECT_TRUE(Has(v.detail, "shardd-worker:nope")) << v.detail;
}

TEST(K8sStatus, UnschedulableSaysWhy) {
  Verdict v = JudgeFixture("unschedulable_0");
  EXPECT_EQ(v.phase, Verdict::kPending);
  EXPECT_EQ(v.stuck_kind, "unschedulable");
  EXPECT_TRUE(Has(v.detail, "Insufficient nvidia.com/gpu")) << v.detail;
}

TEST(K8sStatus, DeadlineExceeded) {
  Verdict v = JudgeFixture("deadline_1");
  EXPECT_EQ(v.phase, Verdict::kFailed);
  EXPECT_TRUE(Has(v.detail, "DeadlineExceeded: Job was active longer than specified deadline")) << v.detail;
  EXPECT_EQ(v.exit_code, -1);
  EXPECT_EQ(v.live_pods, 2);  // terminating, not gone yet
}

TEST(K8sStatus, MissingJobIsGoneAndGarbageIsAnError) {
  auto objs = ParseAttemptObjects(R"({"apiVersion":"v1","kind":"List","items":[],"metadata":{"resourceVersion":""}})");
  ASSERT_TRUE(objs.ok());
  EXPECT_EQ(Judge(*objs, kName).phase, Verdict::kGone);
  EXPECT_FALSE(ParseAttemptObjects("error: the server doesn't have a resource type").ok());
  EXPECT_FALSE(ParseAttemptObjects(R"({"kind":"List","items":[{"kind":"Deployment"}]})").ok());
  // Wrong types inside objects are ignored field by field, not trusted.
  auto odd = ParseAttemptObjects(R"({"kind":"List","items":[{"kind":"Job","status":{"active":"2","conditions":7}}]})");
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(Judge(*odd, kName).phase, Verdict::kPending);
}

}  // namespace
}  // namespace shardd::k8s
