// The rendezvous store never blocks: Get and Wait park a callback that fires
// when the key(s) appear, with DEADLINE_EXCEEDED naming the missing keys once
// ExpireWaiters passes the deadline, or with ABORTED when the attempt's space
// is dropped. Callbacks run without the lock (they may call back in). Each
// attempt's space is bounded: key and value size, keys, bytes and parked
// calls, each refused with RESOURCE_EXHAUSTED naming the cap.
#include "coordinator/rendezvous/rendezvous_store.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace shardd {
namespace {

using shard::StatusCode;

const RendezvousScope A1{"j/1/", 2};
const RendezvousScope A2{"j/2/", 2};
const RendezvousScope A10{"j/10/", 2};

// Set, expecting success (the caps are far away).
void Put(RendezvousStore& s, const RendezvousScope& scope, const std::string& key, const std::string& v) {
  ASSERT_TRUE(s.Set(scope, key, v).ok()) << key;
}
bool Has(RendezvousStore& s, const RendezvousScope& scope, const std::string& key) {
  auto v = s.Check(scope, key);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return v.ok() && *v;
}

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
  Put(s, A1, "addr", "10.0.0.1:7");
  GetResult g;
  s.Get(A1, "addr", 0, g.Callback());
  ASSERT_EQ(g.calls, 1);
  ASSERT_TRUE(g.value->ok());
  EXPECT_EQ(**g.value, "10.0.0.1:7");
  EXPECT_TRUE(Has(s, A1, "addr"));
  EXPECT_FALSE(Has(s, A1, "other"));
}

TEST(RendezvousStoreTest, GetBeforeSetFiresOnSet) {
  RendezvousStore s;
  GetResult g;
  s.Get(A1, "nccl_id", 5000, g.Callback());
  EXPECT_EQ(g.calls, 0);
  Put(s, A1, "unrelated", "x");
  s.ExpireWaiters(4999);
  EXPECT_EQ(g.calls, 0);
  Put(s, A1, "nccl_id", std::string("\0\1\2", 3));
  ASSERT_EQ(g.calls, 1);
  ASSERT_TRUE(g.value->ok());
  EXPECT_EQ(**g.value, std::string("\0\1\2", 3));
  Put(s, A1, "nccl_id", "again");
  EXPECT_EQ(g.calls, 1) << "a waiter fired twice";
}

TEST(RendezvousStoreTest, GetPastItsDeadlineFailsNamingTheKey) {
  RendezvousStore s;
  GetResult early, late;
  s.Get(A1, "rank_3", 1000, early.Callback());
  s.Get(A1, "rank_4", 2000, late.Callback());
  s.ExpireWaiters(999);
  EXPECT_EQ(early.calls, 0);
  s.ExpireWaiters(1000);
  ASSERT_EQ(early.calls, 1);
  ASSERT_FALSE(early.value->ok());
  EXPECT_EQ(early.value->status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(early.value->status().message().find("j/1/rank_3"), std::string::npos)
      << early.value->status().ToString();
  EXPECT_EQ(late.calls, 0);
  Put(s, A1, "rank_4", "v");
  EXPECT_EQ(late.calls, 1);
  ASSERT_TRUE(late.value->ok());
}

TEST(RendezvousStoreTest, WaitFiresOnceEveryKeyExists) {
  RendezvousStore s;
  WaitResult w;
  s.Wait(A1, {"a", "b", "c"}, 1000, w.Callback());
  Put(s, A1, "a", "1");
  Put(s, A1, "c", "3");
  EXPECT_EQ(w.calls, 0);
  Put(s, A1, "b", "2");
  ASSERT_EQ(w.calls, 1);
  EXPECT_TRUE(w.status->ok());

  WaitResult now;
  s.Wait(A1, {"a", "b"}, 0, now.Callback());
  EXPECT_EQ(now.calls, 1);

  WaitResult expired;
  s.Wait(A1, {"a", "x", "y"}, 1000, expired.Callback());
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
  s.Get(A1, "barrier", 1000, g.Callback());
  EXPECT_EQ(*s.Add(A1, "barrier", 1), 1);
  ASSERT_EQ(g.calls, 1);
  EXPECT_EQ(**g.value, "1");
  EXPECT_EQ(*s.Add(A1, "barrier", 2), 3);
  EXPECT_EQ(*s.Add(A1, "barrier", -5), -2);
  Put(s, A1, "text", "abc");
  EXPECT_EQ(*s.Add(A1, "text", 4), 4) << "a non-number counts from 0";
}

TEST(RendezvousStoreTest, DropFailsWaitersAndForgetsOnlyThatAttempt) {
  RendezvousStore s;
  Put(s, A1, "a", "1");
  Put(s, A1, "b", "2");
  Put(s, A2, "a", "1");
  Put(s, A10, "a", "1");
  GetResult g;
  WaitResult w;
  GetResult other;
  s.Get(A1, "c", 1000, g.Callback());
  s.Wait(A1, {"a", "d"}, 1000, w.Callback());
  s.Get(A2, "c", 1000, other.Callback());
  s.Drop("j/1/");
  ASSERT_EQ(g.calls, 1);
  EXPECT_EQ(g.value->status().code(), StatusCode::kAborted);
  ASSERT_EQ(w.calls, 1);
  EXPECT_EQ(w.status->code(), StatusCode::kAborted);
  EXPECT_EQ(other.calls, 0);
  EXPECT_FALSE(Has(s, A1, "a"));
  EXPECT_FALSE(Has(s, A1, "b"));
  EXPECT_TRUE(Has(s, A2, "a"));
  EXPECT_TRUE(Has(s, A10, "a"));
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
  s.Get(A1, "second", 1000, second.Callback());
  s.Get(A1, "first", 1000, [&](shard::StatusOr<std::string> v) {
    ASSERT_TRUE(v.ok());
    Put(s, A1, "second", *v + "!");
  });
  Put(s, A1, "first", "go");
  ASSERT_EQ(second.calls, 1);
  EXPECT_EQ(**second.value, "go!");
}

// ---- the caps (RendezvousLimits) ----

bool Names(const shard::Status& st, const std::string& what) {
  return st.message().find(what) != std::string::npos;
}

TEST(RendezvousStoreTest, KeyOverItsCapIsRefusedNamingTheCap) {
  RendezvousStore s;
  const RendezvousScope one{"j/1/", 1};
  const std::string longest(RendezvousLimits::kMaxKeyBytes, 'k');
  const std::string over(RendezvousLimits::kMaxKeyBytes + 1, 'k');
  EXPECT_TRUE(s.Set(one, longest, "v").ok());
  shard::Status st = s.Set(one, over, "v");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_TRUE(Names(st, "1025 bytes, over the key-size cap of 1024")) << st.ToString();
  EXPECT_TRUE(Names(st, "j/1/")) << "names the attempt: " << st.ToString();
  EXPECT_LT(st.message().size(), 300u) << "echoes the whole key: " << st.ToString();
  EXPECT_EQ(s.size(), 1u);
  // Every call that names a key refuses one over the cap.
  EXPECT_EQ(s.Add(one, over, 1).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.Check(one, over).status().code(), StatusCode::kResourceExhausted);
  GetResult g;
  s.Get(one, over, 1000, g.Callback());
  ASSERT_EQ(g.calls, 1) << "a refused Get is answered at once";
  EXPECT_EQ(g.value->status().code(), StatusCode::kResourceExhausted);
  WaitResult w;
  s.Wait(one, {"a", over}, 1000, w.Callback());
  ASSERT_EQ(w.calls, 1);
  EXPECT_EQ(w.status->code(), StatusCode::kResourceExhausted);
}

TEST(RendezvousStoreTest, ValueOverItsCapIsRefusedAndNothingStored) {
  RendezvousStore s;
  const RendezvousScope one{"j/1/", 1};
  EXPECT_TRUE(s.Set(one, "gloo/0", std::string(RendezvousLimits::kMaxValueBytes, 'a')).ok());
  shard::Status st = s.Set(one, "gloo/1", std::string(RendezvousLimits::kMaxValueBytes + 1, 'a'));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_TRUE(Names(st, "1048577 bytes, over the value-size cap of 1048576")) << st.ToString();
  EXPECT_TRUE(Names(st, "'gloo/1'")) << st.ToString();
  EXPECT_FALSE(Has(s, one, "gloo/1"));
  EXPECT_EQ(s.bytes(), RendezvousLimits::kMaxValueBytes + 6);
}

TEST(RendezvousStoreTest, KeysPerJobAreCappedByTheWorldSize) {
  RendezvousStore s;
  const RendezvousScope one{"j/1/", 1}, other{"k/1/", 1};
  const size_t max = RendezvousLimits::MaxKeys(1);
  ASSERT_EQ(max, RendezvousLimits::kMaxKeysBase + RendezvousLimits::kMaxKeysPerRank);
  for (size_t i = 0; i < max; ++i) ASSERT_TRUE(s.Set(one, "k" + std::to_string(i), "1").ok()) << i;
  shard::Status st = s.Set(one, "one-more", "1");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_TRUE(Names(st, "over the cap of " + std::to_string(max) + " keys per job (world size 1)")) << st.ToString();
  EXPECT_EQ(s.Add(one, "one-more", 1).status().code(), StatusCode::kResourceExhausted) << "Add makes keys too";
  EXPECT_TRUE(s.Set(one, "k0", "overwritten").ok()) << "an existing key is no new key";
  EXPECT_EQ(*s.Add(one, "k1", 5), 6);
  EXPECT_TRUE(s.Set(other, "k0", "1").ok()) << "another job's space is its own";
  // A bigger job has room for more.
  EXPECT_GT(RendezvousLimits::MaxKeys(64), max);
  EXPECT_TRUE(s.Set({"j/1/", 2}, "one-more", "1").ok());
}

TEST(RendezvousStoreTest, BytesPerJobAreCappedByTheWorldSize) {
  RendezvousStore s;
  const RendezvousScope one{"j/1/", 1};
  const size_t max = RendezvousLimits::MaxBytes(1);
  const std::string mib(RendezvousLimits::kMaxValueBytes - 8, 'x');  // with its 8-byte key: 1 MiB
  size_t stored = 0;
  shard::Status st;
  for (int i = 0; i < 1000 && st.ok(); ++i) {
    char key[9];
    std::snprintf(key, sizeof key, "v%07d", i);
    st = s.Set(one, key, mib);
    if (st.ok()) ++stored;
  }
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_EQ(stored, max / RendezvousLimits::kMaxValueBytes) << "the cap is the base plus a share per rank";
  EXPECT_LE(s.bytes(), max);
  EXPECT_TRUE(Names(st, "over the cap of " + std::to_string(max) + " bytes per job (world size 1)")) << st.ToString();
  // Overwriting counts the new size only: big values made small free room.
  ASSERT_TRUE(s.Set(one, "v0000000", "small").ok());
  ASSERT_TRUE(s.Set(one, "v0000001", "small").ok());
  EXPECT_TRUE(s.Set(one, "v0000999", mib).ok());
  EXPECT_FALSE(s.Set(one, "v0001000", mib).ok());
  // Another job is not touched by this one's fill.
  EXPECT_TRUE(s.Set({"k/1/", 1}, "v", mib).ok());
  EXPECT_GE(RendezvousLimits::MaxBytes(64), 64 * RendezvousLimits::kMaxBytesPerRank);
}

TEST(RendezvousStoreTest, ParkedCallsPerJobAreCapped) {
  RendezvousStore s;
  const RendezvousScope one{"j/1/", 1};
  const size_t max = RendezvousLimits::MaxWaiters(1);
  std::vector<GetResult> parked(max);
  for (size_t i = 0; i < max; ++i) s.Get(one, "never", 1000, parked[i].Callback());
  for (const auto& p : parked) ASSERT_EQ(p.calls, 0);
  GetResult refused;
  s.Get(one, "never", 1000, refused.Callback());
  ASSERT_EQ(refused.calls, 1);
  EXPECT_EQ(refused.value->status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Names(refused.value->status(), "parked calls per job")) << refused.value->status().ToString();
  GetResult here;
  Put(s, one, "here", "1");
  s.Get(one, "here", 1000, here.Callback());
  EXPECT_EQ(here.calls, 1) << "a key that exists is answered, parked calls or not";
  s.ExpireWaiters(1000);
  for (const auto& p : parked) EXPECT_EQ(p.calls, 1);
  GetResult again;
  s.Get(one, "never", 2000, again.Callback());
  EXPECT_EQ(again.calls, 0) << "expired calls leave room";
}

// Drop frees the attempt's whole space: its keys, its bytes, its waiters.
TEST(RendezvousStoreTest, DropFreesTheAttemptsBytes) {
  RendezvousStore s;
  const RendezvousScope one{"j/1/", 1};
  const std::string mib(RendezvousLimits::kMaxValueBytes - 8, 'x');
  for (int i = 0; i < 10; ++i) Put(s, one, "v000000" + std::to_string(i), mib);
  EXPECT_EQ(s.bytes(), 10 * RendezvousLimits::kMaxValueBytes);
  Put(s, A2, "a", "1");
  s.Drop("j/1/");
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.bytes(), 2u);
  s.Drop("j/2/");
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.bytes(), 0u);
}

}  // namespace
}  // namespace shardd
