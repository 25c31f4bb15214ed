#include "worker/flight_report.h"

#include "shard/common/logging.h"

namespace shardd {

void AddCollectives(const shard::FlightRecorder& recorder, v1::HeartbeatRequest* req) {
  const int64_t now = shard::FlightRecorder::NowNs();
  for (const shard::CollectiveRecord& r : recorder.Summary()) {
    v1::CollectiveRecord* c = req->add_collectives();
    c->set_group(recorder.group_name(r.group));
    c->set_group_size(recorder.group_size(r.group));
    c->set_seq(r.seq);
    c->set_op(shard::CollectiveOpName(r.op));
    c->set_unit(r.unit);
    c->set_bytes(r.bytes);
    c->set_started_ago_s((now - r.start_ns) / 1e9);
    c->set_ended_ago_s(r.in_flight() ? -1.0 : (now - r.end_ns) / 1e9);
    c->set_failed(r.failed);
  }
}

void LogFlightTail(const shard::FlightRecorder& recorder, size_t n) {
  const std::vector<shard::CollectiveRecord> tail = recorder.Tail(n);
  if (tail.empty()) return;
  const int64_t now = shard::FlightRecorder::NowNs();
  LOG_WARN("flight recorder: this rank's last {} of {} collectives, oldest first:", tail.size(), recorder.count());
  for (const shard::CollectiveRecord& r : tail) LOG_WARN("  {}", recorder.Describe(r, now));
}

}  // namespace shardd
