// The state store tests' fixture: a StateStore opened in the scratch dir, a
// job record with binary blobs (specs are serialized protobuf) and a hashed
// worker token, and the field-by-field comparison of two job records.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "coordinator/state/auth.h"
#include "coordinator/state/state_store.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {

class StateStoreTest : public ScratchTest {
 protected:
  std::unique_ptr<StateStore> Open() {
    auto s = StateStore::Open(Path("state"));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static JobRecord Job(const std::string& id, int state = 1) {
    JobRecord j;
    j.id = id;
    j.name = id.substr(0, id.rfind('-'));
    j.state = state;
    j.attempt = 2;
    j.restarts = 1;
    j.reason = "rank 1 killed by signal 9";
    j.spec = std::string("\x0a\x05yaml\0x", 8);  // protobuf bytes with a NUL
    j.progress = std::string("\x08\x07\0", 3);
    j.worker_token = HashToken("0123456789abcdef");  // what the JobManager stores
    j.created_ms = 1'700'000'000'123;
    j.updated_ms = 1'700'000'000'456;
    j.seq = 4;
    return j;
  }
};

inline void ExpectSameJob(const JobRecord& a, const JobRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.restarts, b.restarts);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.spec, b.spec);
  EXPECT_EQ(a.progress, b.progress);
  EXPECT_EQ(a.worker_token, b.worker_token);
  EXPECT_EQ(a.created_ms, b.created_ms);
  EXPECT_EQ(a.updated_ms, b.updated_ms);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.stall, b.stall);
}

}  // namespace shardd::testing
