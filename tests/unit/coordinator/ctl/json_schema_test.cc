// shardctl's --json shapes: every field present even at its zero value,
// 64-bit integers as exact JSON numbers (protobuf's JSON mapping quoted them
// and dropped zeros), non-finite figures as null, and one checkpoint shape
// whether the step came from the coordinator or from a directory.
#include "coordinator/ctl/json_schema.h"
#include "shard/spec/step_metric_fields.h"

#include <gtest/gtest.h>

#include <limits>
#include <set>

namespace shardctl {
namespace {

std::set<std::string> Keys(const nlohmann::json& j) {
  std::set<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.insert(it.key());
  return k;
}

TEST(JsonSchemaTest, ZeroValuedJobHasEveryField) {
  const auto j = JobObject(shardd::v1::JobStatus());
  EXPECT_EQ(Keys(j), (std::set<std::string>{"id", "name", "state", "reason", "attempt", "restarts", "max_restarts",
                                            "world_size", "attempt_world_size", "launcher", "created_unix_ms",
                                            "updated_unix_ms", "job_dir", "checkpoint_dir", "join_token", "priority",
                                            "placement", "queue_position", "demand", "progress", "stall", "workers"}));
  EXPECT_EQ(Keys(j["stall"]), (std::set<std::string>{"text", "attempt", "unix_ms", "trigger"}));
  EXPECT_EQ(j["stall"]["text"], "");
  EXPECT_TRUE(j["state"].is_string());  // by name, never the enum number
  EXPECT_TRUE(j["restarts"].is_number_integer());
  EXPECT_EQ(j["progress"]["step"], 0);
  // 17 of its own, and every training figure of the step-metric table (null here).
  size_t train_figures = 0;
  for (const shard::StepMetricField& f : shard::StepMetricFields())
    train_figures += f.split == shard::MetricSplit::kTrain ? 1 : 0;
  EXPECT_EQ(Keys(j["progress"]).size(), 17u + train_figures);
  EXPECT_TRUE(j["progress"]["moe_aux_loss"].is_null()) << "a dense model";
  EXPECT_TRUE(j["progress"]["eval_loss"].is_null()) << "no evaluation yet";
  EXPECT_TRUE(j["progress"]["rewards_margins"].is_null()) << "not a preference step";
  EXPECT_TRUE(j["workers"].is_array());
}

// The last evaluation and a preference: step's rewards, as the status line
// and /metrics show them; exact match -1 (not computed) is null.
TEST(JsonSchemaTest, ProgressCarriesTheEvaluationAndThePreferenceFigures) {
  shardd::v1::JobStatus js;
  auto* p = js.mutable_progress();
  p->set_eval_step(20);
  p->set_eval_loss(0.5);
  p->set_eval_exact_match(-1);
  p->set_pairs(8);
  p->set_rewards_accuracies(0.75);
  p->set_rewards_margins(1.25);
  p->set_rewards_chosen(0.5);
  p->set_rewards_rejected(-0.75);
  const auto j = nlohmann::json::parse(JobObject(js).dump())["progress"];
  EXPECT_EQ(j["eval_step"], 20);
  EXPECT_EQ(j["eval_loss"], 0.5);
  EXPECT_TRUE(j["eval_exact_match"].is_null());
  EXPECT_EQ(j["pairs"], 8);
  EXPECT_EQ(j["rewards_accuracies"], 0.75);
  EXPECT_EQ(j["rewards_margins"], 1.25);
  EXPECT_EQ(j["rewards_chosen"], 0.5);
  EXPECT_EQ(j["rewards_rejected"], -0.75);
}

TEST(JsonSchemaTest, SixtyFourBitNumbersStayExactNumbers) {
  shardd::v1::JobStatus js;
  const int64_t big = (int64_t{1} << 53) + 1;
  js.set_created_unix_ms(big);
  js.mutable_progress()->set_tokens_total(big);
  js.mutable_progress()->set_loss(std::numeric_limits<double>::quiet_NaN());
  js.add_workers()->set_rss_bytes(big);
  const auto j = nlohmann::json::parse(JobObject(js).dump());
  EXPECT_TRUE(j["created_unix_ms"].is_number_integer());
  EXPECT_EQ(j["created_unix_ms"].get<int64_t>(), big);
  EXPECT_EQ(j["progress"]["tokens_total"].get<int64_t>(), big);
  EXPECT_EQ(j["workers"][0]["rss_bytes"].get<int64_t>(), big);
  EXPECT_TRUE(j["progress"]["loss"].is_null());
}

TEST(JsonSchemaTest, CheckpointsFromJobAndDirectoryShareOneShape) {
  shardd::v1::CheckpointInfo c;
  c.set_step(40);
  c.set_world(2);
  c.set_files(2);
  c.set_bytes(int64_t{5} << 33);
  c.set_path("/r/step_00000040");
  const auto from_job = CheckpointObject(FromCheckpointInfo(c));
  CheckpointRow dir;
  dir.step = 40;
  dir.state = "partial";
  dir.problem = "no COMMITTED";
  const auto from_dir = CheckpointObject(dir);
  EXPECT_EQ(Keys(from_job), Keys(from_dir));
  EXPECT_EQ(from_job["state"], "valid");
  EXPECT_EQ(from_job["bytes"].get<int64_t>(), int64_t{5} << 33);
  EXPECT_EQ(from_dir["world"], 0);
  c.set_problem("shard 1 missing");
  EXPECT_EQ(CheckpointObject(FromCheckpointInfo(c))["state"], "invalid");
}

// watch --json: one object per event, every field present, time in UTC.
TEST(JsonSchemaTest, AnEventHasTimeAttemptKindAndMessage) {
  shardd::v1::JobEvent ev;
  ev.set_seq(7);
  ev.set_job_id("j-1");
  ev.set_unix_ms(1764892800123);  // 2025-12-05T00:00:00.123Z
  ev.set_attempt(2);
  ev.set_kind("restarting");
  ev.set_state(shardd::v1::RUNNING);
  ev.set_message("rank 1 exited");
  const auto j = EventObject(ev);
  EXPECT_EQ(Keys(j), (std::set<std::string>{"seq", "job_id", "unix_ms", "time", "attempt", "kind", "state", "message"}));
  EXPECT_EQ(j["time"], "2025-12-05T00:00:00.123Z");
  EXPECT_EQ(j["attempt"], 2);
  EXPECT_EQ(j["kind"], "restarting");
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["message"], "rank 1 exited");
  EXPECT_EQ(Keys(EventObject(shardd::v1::JobEvent())), Keys(j));
}

}  // namespace
}  // namespace shardctl
