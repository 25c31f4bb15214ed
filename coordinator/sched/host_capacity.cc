#include "coordinator/sched/host_capacity.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <thread>

namespace shardd::sched {

StatusOr<std::vector<int>> ParseGpuList(const std::string& text) {
  std::vector<int> out;
  if (text == "none") return out;
  auto bad = [&](const std::string& why) {
    return shard::InvalidArgument("--gpus '" + text + "': " + why + " (expected e.g. 0,1,2,3 or 0-7 or none)");
  };
  auto num = [](const std::string& s, int* v) {
    if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    *v = std::stoi(s);
    return true;
  };
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string::npos) {
      if (!num(item, &lo)) return bad("'" + item + "' is not a device number");
      hi = lo;
    } else if (!num(item.substr(0, dash), &lo) || !num(item.substr(dash + 1), &hi) || hi < lo) {
      return bad("'" + item + "' is not a range low-high");
    }
    for (int g = lo; g <= hi; ++g) {
      if (std::find(out.begin(), out.end(), g) != out.end()) return bad("device " + std::to_string(g) + " is listed twice");
      out.push_back(g);
    }
  }
  if (out.empty()) return bad("no devices");
  return out;
}

HostCapacity MakeCapacity(const CapacityOptions& opts) {
  HostCapacity cap;
  if (opts.gpus) {
    cap.gpus = *opts.gpus;
  } else {
    for (int g = 0; g < opts.probed_gpus; ++g) cap.gpus.push_back(g);
  }
  cap.cpu_slots = opts.cpu_slots > 0 ? opts.cpu_slots : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (opts.host_bytes >= 0) {
    cap.host_bytes = opts.host_bytes;
  } else {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    cap.host_bytes = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  }
  return cap;
}

std::optional<Demand> DemandOf(const shard::JobConfig& job, const HostCapacity& cap, int64_t plan_host_bytes) {
  if (job.resources.launcher != shard::Launcher::kLocal) return std::nullopt;
  const int world = job.parallel.world_size;
  const shard::DeviceSpec& dev = job.resources.device;
  Demand d;
  d.host_bytes = std::max<int64_t>(0, plan_host_bytes);
  const bool gpu = dev.kind == shard::DeviceSpec::Kind::kCuda ||
                   (dev.is_auto() && !cap.gpus.empty() && world <= static_cast<int>(cap.gpus.size()));
  if (!gpu) d.cpu_slots = world;
  else if (dev.index >= 0) d.pinned_gpu = dev.index;
  else d.gpus = world;
  return d;
}

std::vector<std::pair<std::string, std::string>> PlacementEnv(const Placement& p, const Demand& d, int world) {
  std::vector<std::pair<std::string, std::string>> env;
  if (!p.gpus.empty() && d.pinned_gpu < 0) {
    // Every rank sees the job's devices in rank order: the worker's rank r
    // takes cuda:r (rank % visible), i.e. gpus[r], and NCCL sees its peers.
    std::string list;
    for (size_t i = 0; i < p.gpus.size(); ++i) list += (i ? "," : "") + std::to_string(p.gpus[i]);
    env.emplace_back("CUDA_VISIBLE_DEVICES", list);
  } else if (p.gpus.empty()) {
    env.emplace_back("CUDA_VISIBLE_DEVICES", "");  // a CPU job never touches a GPU another job holds
  }
  if (!p.cpu_slots.empty()) {
    const std::string threads = std::to_string(std::max<size_t>(1, p.cpu_slots.size() / std::max(1, world)));
    env.emplace_back("SHARDD_NUM_THREADS", threads);
    env.emplace_back("OMP_NUM_THREADS", threads);
    env.emplace_back("OPENBLAS_NUM_THREADS", threads);
    std::string slots;
    for (size_t i = 0; i < p.cpu_slots.size(); ++i) slots += (i ? "," : "") + std::to_string(p.cpu_slots[i]);
    env.emplace_back("SHARDD_CPU_SLOTS", slots);
  }
  return env;
}

}  // namespace shardd::sched
