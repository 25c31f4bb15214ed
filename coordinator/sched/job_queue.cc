#include "coordinator/sched/job_queue.h"

#include <algorithm>

namespace shardd::sched {

void SortQueue(std::vector<QueueEntry>* entries) {
  std::stable_sort(entries->begin(), entries->end(), [](const QueueEntry& a, const QueueEntry& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.enqueued_ms != b.enqueued_ms) return a.enqueued_ms < b.enqueued_ms;
    return a.number < b.number;
  });
}

QueueDecision DecideQueue(std::vector<QueueEntry> entries, const HostAllocator& alloc, int64_t now_ms,
                          const QueueOptions& opts) {
  SortQueue(&entries);
  QueueDecision out;
  // What this round has handed out or set aside: later entries place around it.
  HostAllocator round = alloc;
  Placement reserved;
  std::string reserved_for;  // the first job holding a reservation, named in the others' reasons
  for (const QueueEntry& e : entries) {
    out.order.push_back(e.job_id);
    std::string why;
    std::optional<Placement> p = round.TryPlace(e.demand, reserved, &why);
    if (p) {
      (void)round.Hold(e.job_id, *p);  // cannot clash: TryPlace took only free ids
      out.start.emplace_back(e.job_id, std::move(*p));
      continue;
    }
    const int64_t waited = now_ms - e.enqueued_ms;
    if (waited >= opts.starvation_ms) {
      round.Reserve(e.demand, &reserved);
      if (reserved_for.empty()) reserved_for = e.job_id;
      why += "; waited " + std::to_string(waited / 1000) + " s, so freed resources are reserved for it";
    } else if (!reserved_for.empty()) {
      why += " (behind job " + reserved_for + ", which holds a reservation)";
    }
    out.waiting[e.job_id] = why;
  }
  return out;
}

}  // namespace shardd::sched
