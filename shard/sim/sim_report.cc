#include "shard/sim/sim_report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "shard/plan/plan_report.h"

namespace shard::sim {

double SimComparison::device_drift() const {
  return estimate_device_alloc > 0 ? static_cast<double>(simulated.device.bytes) / estimate_device_alloc - 1 : 0;
}
double SimComparison::host_drift() const {
  return estimate_host_alloc > 0 ? static_cast<double>(simulated.host.bytes) / estimate_host_alloc - 1 : 0;
}

StatusOr<SimComparison> SimulatePlannedJob(const JobConfig& job, const plan::Plan& plan) {
  const plan::Workload& w = plan.workload;
  if (w.cpu_engine || plan.cluster.cpu_only)
    return InvalidArgument("--simulate models GPU jobs (name one with --cluster); the CPU engine's memory is "
                           "measured directly (tests/unit/plan/cpu_memory_test, tests/bench/host_memory_bench)");
  // LoRA and QLoRA run the real trainer path (CreateLoraTrainable, the frozen
  // runtime with its NF4 records, LoraAdapters).
  SimulationOptions o;
  o.precision = w.compute == DType::kBF16 ? Precision::kBf16 : w.compute == DType::kF16 ? Precision::kFp16
                                                                                        : Precision::kFp32;
  o.native_bf16 = plan.cluster.gpu.bf16;
  SimComparison c;
  ASSIGN_OR_RETURN(c.simulated, SimulateJobMemory(job, o));
  const plan::MemoryEstimate& m = plan.memory;
  const int ranks = std::max(1, m.ranks_per_node);
  c.estimate_device = m.device_total;
  c.estimate_device_alloc = m.device_total - m.device_allowance;
  // The simulated rank 0 writes checkpoints: a writer's allocations, plus
  // its share of the node's allowances.
  c.estimate_host_alloc = m.host_writer_alloc;
  c.estimate_host = m.host_writer_alloc + m.host_allowance / ranks;
  return c;
}

namespace {

std::string Pct(double x) {
  char b[32];
  std::snprintf(b, sizeof(b), "%+.1f%%", 100 * x);
  return b;
}

// "    largest buffers then: 2 x 1.96 GiB, 1 x 1.00 GiB, ..." (by bytes held).
std::string LargestBuffers(const std::map<int64_t, int>& live) {
  std::vector<std::pair<int64_t, int64_t>> by_total;  // total bytes, size
  for (const auto& [size, n] : live) by_total.emplace_back(size * n, size);
  std::sort(by_total.rbegin(), by_total.rend());
  std::string out = "    largest buffers then:";
  for (size_t i = 0; i < by_total.size() && i < 8; ++i)
    out += (i ? ", " : " ") + std::to_string(live.at(by_total[i].second)) + " x " +
           plan::FormatBytes(by_total[i].second);
  return out + "\n";
}

}  // namespace

std::string FormatSimulationText(const SimComparison& c) {
  const SimulationResult& s = c.simulated;
  char head[256];
  std::snprintf(head, sizeof(head),
                "\nSimulated (rank %d of %d standing for every rank; %d micro-batch%s per step; %.1f s):\n", s.rank,
                s.world, s.micro_batches, s.micro_batches == 1 ? "" : "es", s.seconds);
  std::string out = head;
  char line[512];
  std::snprintf(line, sizeof(line), "  %-8s %14s %16s %16s %8s\n", "per rank", "simulated peak", "plan allocations",
                "plan total", "drift");
  out += line;
  auto row = [&](const char* what, int64_t sim, int64_t alloc, int64_t total, double drift) {
    std::snprintf(line, sizeof(line), "  %-8s %14s %16s %16s %8s\n", what, plan::FormatBytes(sim).c_str(),
                  plan::FormatBytes(alloc).c_str(), plan::FormatBytes(total).c_str(), Pct(drift).c_str());
    out += line;
  };
  row("device", s.device.bytes, c.estimate_device_alloc, c.estimate_device, c.device_drift());
  row("host", s.host.bytes, c.estimate_host_alloc, c.estimate_host, c.host_drift());
  out += "  device peak: " + s.device.where + "\n" + LargestBuffers(s.device.live);
  out += "  host peak:   " + s.host.where + "\n" + LargestBuffers(s.host.live);
  out += "  after loading: " + plan::FormatBytes(s.device_after_load) + " device, " +
         plan::FormatBytes(s.host_after_load) + " host (shards, optimizer state, model buffers)\n";
  out += "  plan total = plan allocations + the stated allowances (CUDA context and NCCL buffers, allocator "
         "fragmentation, worker process) the simulation cannot see\n";
  return out;
}

std::string PlanWithSimulationJson(const plan::Plan& plan, const SimComparison& c) {
  nlohmann::json j = nlohmann::json::parse(plan::PlanToJson(plan));
  const SimulationResult& s = c.simulated;
  j["simulated"] = {{"peak_device_bytes_per_rank", s.device.bytes},
                    {"peak_device_where", s.device.where},
                    {"peak_host_bytes_per_rank", s.host.bytes},
                    {"peak_host_where", s.host.where},
                    {"device_bytes_after_load", s.device_after_load},
                    {"host_bytes_after_load", s.host_after_load},
                    {"rank", s.rank},
                    {"world_size", s.world},
                    {"micro_batches_per_rank", s.micro_batches},
                    {"seconds", s.seconds}};
  j["estimate"] = {{"device_bytes_per_rank", c.estimate_device},
                   {"host_bytes_per_rank", c.estimate_host},
                   {"device_allocation_bytes_per_rank", c.estimate_device_alloc},
                   {"host_allocation_bytes_per_rank", c.estimate_host_alloc},
                   {"device_drift", c.device_drift()},
                   {"host_drift", c.host_drift()}};
  return j.dump(2);
}

}  // namespace shard::sim
