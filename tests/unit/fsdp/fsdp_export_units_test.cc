// Export's all-gathers (FsdpRuntime::GatherUnit, on the caller's thread: the
// fp32 masters, a frozen base's two-byte and NF4 shards) carry the unit they
// gather in the flight recorder, as the training step's calls do, so a stall
// during an export names the unit being exported (not unit -1).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shard/comm/flight_recorder.h"
#include "shard/comm/timed_communicator.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "tests/unit/fsdp/runtime_ranks.h"

namespace shard {
namespace {

const std::vector<int64_t> kNumels = {1000, 7, 4097};

// The all-gathers two ranks record while exporting every unit (rank 0 keeps them).
std::vector<std::vector<CollectiveRecord>> ExportRecords(const FsdpOptions& opts) {
  static std::atomic<int> group{0};
  const std::string prefix = "fsdp-export-units-" + std::to_string(group++) + "/";
  std::vector<std::vector<CollectiveRecord>> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto backend = CreateBackend("cpu");
      ASSERT_TRUE(backend.ok());
      auto rec = std::make_shared<FlightRecorder>();
      auto rt = FsdpRuntime::Create(backend->get(), kNumels, opts,
                                    WithWaitClock(fsdp_testing::LocalComm(2, r, prefix), rec, "shard0"), nullptr);
      ASSERT_TRUE(rt.ok()) << rt.status().ToString();
      for (int u = 0; u < (*rt)->num_units(); ++u) {
        if (!(*rt)->quantized(u)) continue;
        std::vector<float> zeros((*rt)->layout(u).shard_numel, 0.0f);
        ASSERT_TRUE((*rt)->WriteFrozenShard(u, zeros.data()).ok());
      }
      const uint64_t before = rec->count();
      for (int u = 0; u < (*rt)->num_units(); ++u) {
        std::vector<float> full;
        ASSERT_TRUE((*rt)->GatherUnit(u, r == 0 ? &full : nullptr).ok()) << "rank " << r << " unit " << u;
      }
      out[r] = rec->Tail(rec->count() - before);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

void ExpectOneAllGatherPerUnit(const std::vector<std::vector<CollectiveRecord>>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    ASSERT_EQ(ranks[r].size(), kNumels.size()) << "rank " << r;
    for (size_t u = 0; u < kNumels.size(); ++u) {
      EXPECT_EQ(ranks[r][u].op, CollectiveOp::kAllGather) << "rank " << r << " unit " << u;
      EXPECT_EQ(ranks[r][u].unit, static_cast<int>(u)) << "rank " << r;
    }
  }
}

TEST(FsdpExportUnitsTest, TheMastersAllGathersCarryTheirUnit) { ExpectOneAllGatherPerUnit(ExportRecords(FsdpOptions{})); }

TEST(FsdpExportUnitsTest, AFrozenBasesAllGathersCarryTheirUnit) {
  FsdpOptions o;  // QLoRA's base: units 0 and 2 NF4, unit 1 two-byte (bf16)
  o.frozen = true;
  o.param_dtype = DType::kBF16;
  o.param_shard_dtype = DType::kBF16;
  o.nf4_units = {{true, {}}, {false, {}}, {true, {}}};
  ExpectOneAllGatherPerUnit(ExportRecords(o));
}

}  // namespace
}  // namespace shard
