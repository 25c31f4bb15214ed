#include "coordinator/sched/host_allocator.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace shardd::sched {
namespace {

std::string Plural(int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

StatusOr<std::vector<int>> SplitInts(const std::string& s, const std::string& what) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos)
      return shard::InvalidArgument(what + ": '" + item + "' is not a device or slot number");
    out.push_back(std::stoi(item));
  }
  return out;
}

// "k=v;k=v" -> map; every value a string.
StatusOr<std::map<std::string, std::string>> Fields(const std::string& text, const std::string& what) {
  std::map<std::string, std::string> f;
  std::stringstream in(text);
  std::string kv;
  while (std::getline(in, kv, ';')) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return shard::InvalidArgument(what + " '" + text + "': expected key=value fields");
    f[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return f;
}

StatusOr<int64_t> Int(const std::map<std::string, std::string>& f, const std::string& key, const std::string& what) {
  auto it = f.find(key);
  if (it == f.end()) return int64_t{0};
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (...) {
  }
  return shard::InvalidArgument(what + ": " + key + "='" + it->second + "' is not an integer");
}

bool Contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

std::string RangeList(const std::vector<int>& ids_in) {
  std::vector<int> ids = ids_in;
  std::sort(ids.begin(), ids.end());
  std::string s;
  for (size_t i = 0; i < ids.size();) {
    size_t k = i;
    while (k + 1 < ids.size() && ids[k + 1] == ids[k] + 1) ++k;
    s += (s.empty() ? "" : ",") + std::to_string(ids[i]);
    if (k > i) s += "-" + std::to_string(ids[k]);
    i = k + 1;
  }
  return s;
}

std::string Bytes(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(b) / (1LL << 30));
  return buf;
}

std::string HostCapacity::Describe() const {
  std::string s = Plural(static_cast<int>(gpus.size()), "GPU", "GPUs");
  if (!gpus.empty()) s += " (" + RangeList(gpus) + ")";
  s += ", " + Plural(cpu_slots, "CPU slot", "CPU slots");
  if (host_bytes > 0) s += ", " + Bytes(host_bytes) + " host memory";
  return s;
}

std::string Demand::Describe() const {
  std::string s;
  if (pinned_gpu >= 0) s = "GPU " + std::to_string(pinned_gpu);
  else if (gpus > 0) s = Plural(gpus, "GPU", "GPUs");
  if (cpu_slots > 0) s += (s.empty() ? "" : ", ") + Plural(cpu_slots, "CPU slot", "CPU slots");
  if (host_bytes > 0) s += (s.empty() ? "" : ", ") + Bytes(host_bytes) + " host memory";
  return s.empty() ? "nothing" : s;
}

std::string Demand::Encode() const {
  return "gpus=" + std::to_string(gpus) + ";pin=" + std::to_string(pinned_gpu) + ";slots=" + std::to_string(cpu_slots) +
         ";bytes=" + std::to_string(host_bytes);
}

StatusOr<Demand> Demand::Decode(const std::string& text) {
  ASSIGN_OR_RETURN(auto f, Fields(text, "demand"));
  Demand d;
  ASSIGN_OR_RETURN(int64_t g, Int(f, "gpus", "demand"));
  ASSIGN_OR_RETURN(int64_t pin, Int(f, "pin", "demand"));
  ASSIGN_OR_RETURN(int64_t slots, Int(f, "slots", "demand"));
  ASSIGN_OR_RETURN(d.host_bytes, Int(f, "bytes", "demand"));
  if (g < 0 || g > 4096 || slots < 0 || slots > 1 << 20 || pin < -1 || pin > 4096 || d.host_bytes < 0)
    return shard::InvalidArgument("demand '" + text + "': a value is out of range");
  d.gpus = static_cast<int>(g);
  d.pinned_gpu = static_cast<int>(pin);
  d.cpu_slots = static_cast<int>(slots);
  return d;
}

std::string Placement::Describe() const {
  std::string s;
  if (!gpus.empty()) s = "GPUs " + RangeList(gpus);
  if (!cpu_slots.empty()) s += (s.empty() ? "" : ", ") + std::string("CPU slots ") + RangeList(cpu_slots);
  if (host_bytes > 0) s += (s.empty() ? "" : ", ") + Bytes(host_bytes);
  return s.empty() ? "nothing" : s;
}

std::string Placement::Encode() const {
  return "gpus=" + JoinInts(gpus) + ";slots=" + JoinInts(cpu_slots) + ";bytes=" + std::to_string(host_bytes);
}

StatusOr<Placement> Placement::Decode(const std::string& text) {
  ASSIGN_OR_RETURN(auto f, Fields(text, "placement"));
  Placement p;
  ASSIGN_OR_RETURN(p.gpus, SplitInts(f["gpus"], "placement gpus"));
  ASSIGN_OR_RETURN(p.cpu_slots, SplitInts(f["slots"], "placement slots"));
  ASSIGN_OR_RETURN(p.host_bytes, Int(f, "bytes", "placement"));
  return p;
}

Status HostAllocator::CheckEverFits(const Demand& d) const {
  const int have = static_cast<int>(cap_.gpus.size());
  if (d.pinned_gpu >= 0 && !Contains(cap_.gpus, d.pinned_gpu))
    return shard::FailedPrecondition("this job needs GPU " + std::to_string(d.pinned_gpu) +
                                     " but the host offers " + cap_.Describe());
  if (d.gpus > have)
    return shard::FailedPrecondition("this job needs " + Plural(d.gpus, "GPU", "GPUs") + " but the host has " +
                                     std::to_string(have) + " (" + cap_.Describe() + ")");
  if (d.cpu_slots > cap_.cpu_slots)
    return shard::FailedPrecondition("this job needs " + Plural(d.cpu_slots, "CPU slot", "CPU slots") +
                                     " but the host has " + std::to_string(cap_.cpu_slots) +
                                     " (shardd --cpu-slots N sets them)");
  if (cap_.host_bytes > 0 && d.host_bytes > cap_.host_bytes)
    return shard::FailedPrecondition("this job needs " + Bytes(d.host_bytes) + " of host memory but the host has " +
                                     Bytes(cap_.host_bytes));
  return shard::OkStatus();
}

std::string HostAllocator::OwnerOfGpu(int gpu) const {
  for (const auto& [job, p] : held_)
    if (Contains(p.gpus, gpu)) return job;
  return "";
}

std::vector<int> HostAllocator::FreeGpus(const Placement& reserved) const {
  std::vector<int> out;
  for (int g : cap_.gpus)
    if (OwnerOfGpu(g).empty() && !Contains(reserved.gpus, g)) out.push_back(g);
  return out;
}

std::vector<int> HostAllocator::FreeSlots(const Placement& reserved) const {
  std::vector<int> out;
  for (int s = 0; s < cap_.cpu_slots; ++s) {
    bool used = Contains(reserved.cpu_slots, s);
    for (const auto& [job, p] : held_) used = used || Contains(p.cpu_slots, s);
    if (!used) out.push_back(s);
  }
  return out;
}

int64_t HostAllocator::FreeBytes(const Placement& reserved) const {
  int64_t used = reserved.host_bytes;
  for (const auto& [job, p] : held_) used += p.host_bytes;
  return cap_.host_bytes - used;
}

std::string HostAllocator::Holders(const std::vector<int>& busy, bool gpus) const {
  // Group the busy ids by the job holding them (or the reservation).
  std::map<std::string, std::vector<int>> by_owner;
  for (int id : busy) {
    std::string owner;
    for (const auto& [job, p] : held_)
      if (Contains(gpus ? p.gpus : p.cpu_slots, id)) owner = "held by job " + job;
    by_owner[owner.empty() ? "reserved for the head of the queue" : owner].push_back(id);
  }
  std::string s;
  for (const auto& [owner, ids] : by_owner) s += (s.empty() ? "" : ", ") + RangeList(ids) + " " + owner;
  return s;
}

std::optional<Placement> HostAllocator::TryPlace(const Demand& d, const Placement& reserved, std::string* why) const {
  Placement p;
  const std::vector<int> free_gpus = FreeGpus(reserved);
  std::vector<int> busy_gpus;
  for (int g : cap_.gpus)
    if (!Contains(free_gpus, g)) busy_gpus.push_back(g);
  if (d.pinned_gpu >= 0) {
    if (!Contains(free_gpus, d.pinned_gpu)) {
      *why = "waiting for GPU " + std::to_string(d.pinned_gpu) + ": " + Holders({d.pinned_gpu}, true);
      return std::nullopt;
    }
    p.gpus = {d.pinned_gpu};
  } else if (d.gpus > 0) {
    if (static_cast<int>(free_gpus.size()) < d.gpus) {
      *why = "waiting for " + Plural(d.gpus, "GPU", "GPUs") + ": " + Holders(busy_gpus, true);
      return std::nullopt;
    }
    // The lowest run of d.gpus consecutive free devices, else the lowest free ones.
    size_t start = free_gpus.size();
    for (size_t i = 0; i + d.gpus <= free_gpus.size() && start == free_gpus.size(); ++i)
      if (free_gpus[i + d.gpus - 1] - free_gpus[i] == d.gpus - 1) start = i;
    if (start == free_gpus.size()) start = 0;
    p.gpus.assign(free_gpus.begin() + start, free_gpus.begin() + start + d.gpus);
  }
  const std::vector<int> free_slots = FreeSlots(reserved);
  if (static_cast<int>(free_slots.size()) < d.cpu_slots) {
    std::vector<int> busy;
    for (int s = 0; s < cap_.cpu_slots; ++s)
      if (!Contains(free_slots, s)) busy.push_back(s);
    *why = "waiting for " + Plural(d.cpu_slots, "CPU slot", "CPU slots") + ": " + Holders(busy, false);
    return std::nullopt;
  }
  p.cpu_slots.assign(free_slots.begin(), free_slots.begin() + d.cpu_slots);
  if (cap_.host_bytes > 0 && d.host_bytes > FreeBytes(reserved)) {
    *why = "waiting for " + Bytes(d.host_bytes) + " of host memory: " + Bytes(std::max<int64_t>(0, FreeBytes(reserved))) +
           " of " + Bytes(cap_.host_bytes) + " free";
    return std::nullopt;
  }
  p.host_bytes = d.host_bytes;
  return p;
}

void HostAllocator::Reserve(const Demand& d, Placement* reserved) const {
  const std::vector<int> free_gpus = FreeGpus(*reserved);
  const int want_gpus = d.pinned_gpu >= 0 ? 0 : d.gpus;
  if (d.pinned_gpu >= 0 && Contains(free_gpus, d.pinned_gpu)) reserved->gpus.push_back(d.pinned_gpu);
  for (int i = 0; i < want_gpus && i < static_cast<int>(free_gpus.size()); ++i) reserved->gpus.push_back(free_gpus[i]);
  const std::vector<int> free_slots = FreeSlots(*reserved);
  for (int i = 0; i < d.cpu_slots && i < static_cast<int>(free_slots.size()); ++i)
    reserved->cpu_slots.push_back(free_slots[i]);
  if (cap_.host_bytes > 0) reserved->host_bytes += std::clamp<int64_t>(FreeBytes(*reserved), 0, d.host_bytes);
}

Status HostAllocator::Hold(const std::string& job_id, const Placement& p) {
  Release(job_id);
  std::string clash;
  for (int g : p.gpus) {
    const std::string owner = OwnerOfGpu(g);
    if (!owner.empty()) clash += " GPU " + std::to_string(g) + " is also held by job " + owner + ";";
    if (!Contains(cap_.gpus, g)) clash += " GPU " + std::to_string(g) + " is not in this host's capacity;";
  }
  for (int s : p.cpu_slots) {
    if (s >= cap_.cpu_slots) clash += " CPU slot " + std::to_string(s) + " is past --cpu-slots;";
    for (const auto& [job, other] : held_)
      if (job != job_id && Contains(other.cpu_slots, s))
        clash += " CPU slot " + std::to_string(s) + " is also held by job " + job + ";";
  }
  held_[job_id] = p;
  if (!clash.empty()) return shard::FailedPrecondition("job " + job_id + "'s placement (" + p.Describe() + "):" + clash);
  return shard::OkStatus();
}

void HostAllocator::Release(const std::string& job_id) { held_.erase(job_id); }

const Placement* HostAllocator::HeldBy(const std::string& job_id) const {
  auto it = held_.find(job_id);
  return it == held_.end() ? nullptr : &it->second;
}

}  // namespace shardd::sched
