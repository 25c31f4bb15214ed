#include "shard/comm/flight_recorder.h"

#include <algorithm>
#include <cstdio>

namespace shard {

const char* CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kBarrier: return "barrier";
  }
  return "collective";
}

int FlightRecorder::AddGroup(const std::string& name, int size) {
  std::lock_guard<std::mutex> lock(mu_);
  groups_.push_back({name, size, {}, {}});
  return static_cast<int>(groups_.size()) - 1;
}

std::string FlightRecorder::group_name(int group) const {
  std::lock_guard<std::mutex> lock(mu_);
  return group >= 0 && group < static_cast<int>(groups_.size()) ? groups_[group].name : "?";
}

int FlightRecorder::group_size(int group) const {
  std::lock_guard<std::mutex> lock(mu_);
  return group >= 0 && group < static_cast<int>(groups_.size()) ? groups_[group].size : 0;
}

uint64_t FlightRecorder::Begin(int group, int64_t seq, CollectiveOp op, int unit, int64_t bytes) {
  CollectiveRecord r;
  r.seq = seq;
  r.op = op;
  r.unit = unit;
  r.group = group;
  r.bytes = bytes;
  r.start_ns = NowNs();
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t ticket = next_++;
  ring_[ticket % kCapacity] = r;
  if (group >= 0 && group < static_cast<int>(groups_.size())) groups_[group].newest = r;
  return ticket;
}

void FlightRecorder::End(uint64_t ticket, bool ok) {
  const int64_t now = NowNs();
  std::lock_guard<std::mutex> lock(mu_);
  if (ticket >= next_ || next_ - ticket > kCapacity) return;  // not ours, or overwritten meanwhile
  CollectiveRecord& r = ring_[ticket % kCapacity];
  r.end_ns = now;
  r.failed = !ok;
  if (r.group < 0 || r.group >= static_cast<int>(groups_.size())) return;
  Group& g = groups_[r.group];
  if (g.newest.seq == r.seq) g.newest = r;
  if (r.seq >= g.newest_done.seq) g.newest_done = r;
}

std::vector<CollectiveRecord> FlightRecorder::Tail(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  n = std::min<uint64_t>({n, kCapacity, next_});
  std::vector<CollectiveRecord> out;
  out.reserve(n);
  for (uint64_t t = next_ - n; t < next_; ++t) out.push_back(ring_[t % kCapacity]);
  return out;
}

std::vector<CollectiveRecord> FlightRecorder::Summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CollectiveRecord> out;
  for (const Group& g : groups_) {
    if (g.newest.seq == 0) continue;
    if (g.newest.in_flight() && g.newest_done.seq != 0) out.push_back(g.newest_done);
    out.push_back(g.newest);
  }
  return out;
}

uint64_t FlightRecorder::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_;
}

std::string FlightRecorder::Describe(const CollectiveRecord& r, int64_t now_ns) const {
  auto secs = [](int64_t ns) {
    char buf[32];
    const double s = ns / 1e9;
    if (s >= 10) std::snprintf(buf, sizeof buf, "%.0f s", s);
    else if (s >= 0.01) std::snprintf(buf, sizeof buf, "%.2f s", s);
    else std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
    return std::string(buf);
  };
  char head[160];
  std::snprintf(head, sizeof head, "%s #%lld (%s%s, %lld B, %s)", CollectiveOpName(r.op),
                static_cast<long long>(r.seq), r.unit >= 0 ? "unit " : "",
                r.unit >= 0 ? std::to_string(r.unit).c_str() : "no unit", static_cast<long long>(r.bytes),
                group_name(r.group).c_str());
  if (r.in_flight()) return std::string(head) + " in flight for " + secs(now_ns - r.start_ns);
  return std::string(head) + (r.failed ? " failed " : " ended ") + secs(now_ns - r.end_ns) + " ago after " +
         secs(r.end_ns - r.start_ns);
}

}  // namespace shard
