// `shardctl queue`: holders first, then the waiting jobs in start order with
// their reasons; ended jobs are left out.
#include "coordinator/ctl/queue_format.h"

#include <gtest/gtest.h>

namespace shardctl {
namespace {

TEST(QueueTableTest, HoldersThenWaitingInOrder) {
  shardd::v1::ListJobsResponse resp;
  auto* done = resp.add_jobs();
  done->set_id("old-1");
  done->set_state(shardd::v1::SUCCEEDED);
  auto* b = resp.add_jobs();
  b->set_id("b-3");
  b->set_state(shardd::v1::QUEUED);
  b->set_priority(1);
  b->set_queue_position(2);
  b->set_demand("2 CPU slots");
  b->set_reason("waiting for 2 CPU slots: 0-1 held by job a-2");
  auto* c = resp.add_jobs();
  c->set_id("c-4");
  c->set_state(shardd::v1::QUEUED);
  c->set_priority(5);
  c->set_queue_position(1);
  c->set_demand("2 CPU slots");
  auto* a = resp.add_jobs();
  a->set_id("a-2");
  a->set_state(shardd::v1::RUNNING);
  a->set_placement("CPU slots 0-1");
  const std::string t = QueueTable(resp);
  EXPECT_EQ(t.find("old-1"), std::string::npos) << t;
  const size_t pa = t.find("a-2"), pc = t.find("c-4"), pb = t.find("b-3");
  ASSERT_NE(pa, std::string::npos);
  EXPECT_LT(pa, pc);
  EXPECT_LT(pc, pb);
  EXPECT_NE(t.find("waiting for 2 CPU slots: 0-1 held by job a-2"), std::string::npos) << t;
  EXPECT_NE(QueueTable({}).find("nothing holds"), std::string::npos);
}

}  // namespace
}  // namespace shardctl
