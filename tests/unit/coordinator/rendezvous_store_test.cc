// The rendezvous store never blocks: Get and Wait park a callback that fires
// when the key(s) appear, with DEADLINE_EXCEEDED naming the missing keys once
// ExpireWaiters passes the deadline, or with ABORTED when the attempt's prefix
// is dropped. Callbacks run without the lock (they may call back in).
#include "coordinator/rendezvous_store.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace shardd {
namespace {

using shard::StatusCode;

struct GetResult {
  std::optional<shard::StatusOr<std::string>> value;
  int calls = 0;
  RendezvousStore::GetCallback Callback() {
    return [this](shard::StatusOr<std::string> v) {
      value = std::move(v);
      ++calls;
    };
  }
};

struct WaitResult {
  std::optional<shard::Status> status;
  int calls = 0;
  RendezvousStore::WaitCallback Callback() {
    return [this](shard::Status s) {
      status = std::move(s);
      ++calls;
    };
  }
};

TEST(RendezvousStoreTest, GetOfAnExistingKeyAnswersAtOnce) {
  RendezvousStore s;
  s.Set("j/1/addr", "10.0.0.1:7");
  GetResult g;
  s.Get("j/1/addr", 0, g.Callback());
  ASSERT_EQ(g.calls, 1);
  ASSERT_TRUE(g.value->ok());
  EXPECT_EQ(**g.value, "10.0.0.1:7");
  EXPECT_TRUE(s.Check("j/1/addr"));
  EXPECT_FALSE(s.Check("j/1/other"));
}

TEST(RendezvousStoreTest, GetBeforeSetFiresOnSet) {
  RendezvousStore s;
  GetResult g;
  s.Get("j/1/nccl_id", 5000, g.Callback());
  EXPECT_EQ(g.calls, 0);
  s.Set("j/1/unrelated", "x");
  s.ExpireWaiters(4999);
  EXPECT_EQ(g.calls, 0);
  s.Set("j/1/nccl_id", std::string("\0\1\2", 3));
  ASSERT_EQ(g.calls, 1);
  ASSERT_TRUE(g.value->ok());
  EXPECT_EQ(**g.value, std::string("\0\1\2", 3));
  s.Set("j/1/nccl_id", "again");
  EXPECT_EQ(g.calls, 1) << "a waiter fired twice";
}

TEST(RendezvousStoreTest, GetPastItsDeadlineFailsNamingTheKey) {
  RendezvousStore s;
  GetResult early, late;
  s.Get("j/1/rank_3", 1000, early.Callback());
  s.Get("j/1/rank_4", 2000, late.Callback());
  s.ExpireWaiters(999);
  EXPECT_EQ(early.calls, 0);
  s.ExpireWaiters(1000);
  ASSERT_EQ(early.calls, 1);
  ASSERT_FALSE(early.value->ok());
  EXPECT_EQ(early.value->status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(early.value->status().message().find("j/1/rank_3"), std::string::npos)
      << early.value->status().ToString();
  EXPECT_EQ(late.calls, 0);
  s.Set("j/1/rank_4", "v");
  EXPECT_EQ(late.calls, 1);
  ASSERT_TRUE(late.value->ok());
}

TEST(RendezvousStoreTest, WaitFiresOnceEveryKeyExists) {
  RendezvousStore s;
  WaitResult w;
  s.Wait({"j/1/a", "j/1/b", "j/1/c"}, 1000, w.Callback());
  s.Set("j/1/a", "1");
  s.Set("j/1/c", "3");
  EXPECT_EQ(w.calls, 0);
  s.Set("j/1/b", "2");
  ASSERT_EQ(w.calls, 1);
  EXPECT_TRUE(w.status->ok());

  WaitResult now;
  s.Wait({"j/1/a", "j/1/b"}, 0, now.Callback());
  EXPECT_EQ(now.calls, 1);

  WaitResult expired;
  s.Wait({"j/1/a", "j/1/x", "j/1/y"}, 1000, expired.Callback());
  s.ExpireWaiters(1500);
  ASSERT_EQ(expired.calls, 1);
  EXPECT_EQ(expired.status->code(), StatusCode::kDeadlineExceeded);
  const std::string& msg = expired.status->message();
  EXPECT_NE(msg.find("j/1/x, j/1/y"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("j/1/a"), std::string::npos) << "names a key that exists: " << msg;
}

TEST(RendezvousStoreTest, AddCountsAndWakesWaiters) {
  RendezvousStore s;
  GetResult g;
  s.Get("j/1/barrier", 1000, g.Callback());
  EXPECT_EQ(s.Add("j/1/barrier", 1), 1);
  ASSERT_EQ(g.calls, 1);
  EXPECT_EQ(**g.value, "1");
  EXPECT_EQ(s.Add("j/1/barrier", 2), 3);
  EXPECT_EQ(s.Add("j/1/barrier", -5), -2);
  s.Set("j/1/text", "abc");
  EXPECT_EQ(s.Add("j/1/text", 4), 4) << "a non-number counts from 0";
}

TEST(RendezvousStoreTest, DropPrefixFailsWaitersAndForgetsOnlyThatAttempt) {
  RendezvousStore s;
  s.Set("j/1/a", "1");
  s.Set("j/1/b", "2");
  s.Set("j/2/a", "1");
  s.Set("j/10/a", "1");
  GetResult g;
  WaitResult w;
  GetResult other;
  s.Get("j/1/c", 1000, g.Callback());
  s.Wait({"j/1/a", "j/1/d"}, 1000, w.Callback());
  s.Get("j/2/c", 1000, other.Callback());
  s.DropPrefix("j/1/");
  ASSERT_EQ(g.calls, 1);
  EXPECT_EQ(g.value->status().code(), StatusCode::kAborted);
  ASSERT_EQ(w.calls, 1);
  EXPECT_EQ(w.status->code(), StatusCode::kAborted);
  EXPECT_EQ(other.calls, 0);
  EXPECT_FALSE(s.Check("j/1/a"));
  EXPECT_FALSE(s.Check("j/1/b"));
  EXPECT_TRUE(s.Check("j/2/a"));
  EXPECT_TRUE(s.Check("j/10/a"));
  EXPECT_EQ(s.size(), 2u);
  s.ExpireWaiters(5000);
  EXPECT_EQ(g.calls, 1);
  EXPECT_EQ(other.calls, 1);
}

// Callbacks run unlocked: one may set another key (as a gRPC reactor finishing
// a call might), without deadlock, and that wakes the next waiter.
TEST(RendezvousStoreTest, CallbacksMayCallBackIn) {
  RendezvousStore s;
  GetResult second;
  s.Get("j/1/second", 1000, second.Callback());
  s.Get("j/1/first", 1000, [&](shard::StatusOr<std::string> v) {
    ASSERT_TRUE(v.ok());
    s.Set("j/1/second", *v + "!");
  });
  s.Set("j/1/first", "go");
  ASSERT_EQ(second.calls, 1);
  EXPECT_EQ(**second.value, "go!");
}

}  // namespace
}  // namespace shardd
