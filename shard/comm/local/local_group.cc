#include "shard/comm/local/local_group.h"

#include <map>

namespace shard::comm {
namespace {

std::string RankList(const std::vector<bool>& present, bool want) {
  std::string out = "[";
  bool first = true;
  for (size_t i = 0; i < present.size(); ++i) {
    if (present[i] != want) continue;
    if (!first) out += ", ";
    out += std::to_string(i);
    first = false;
  }
  return out + "]";
}

// The registry of groups still waiting for ranks to join. Leaked on purpose: ranks may
// still be joining while static destructors run at exit.
std::mutex& RegistryMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<std::string, std::shared_ptr<LocalGroup>>& Registry() {
  static auto* groups = new std::map<std::string, std::shared_ptr<LocalGroup>>;
  return *groups;
}

}  // namespace

std::string LocalPost::Describe() const {
  std::string s = std::string(call) + "(count=" + std::to_string(count);
  if (root >= 0) s += ", root=" + std::to_string(root);
  if (op >= 0) s += ", op=" + std::to_string(op);
  if (elem_size > 0) s += ", elem_size=" + std::to_string(elem_size);
  return s + ")";
}

LocalGroup::LocalGroup(std::string name, int world_size)
    : name_(std::move(name)),
      world_size_(world_size),
      joined_(world_size, false),
      arrived_(world_size, false),
      posts_(world_size),
      aborted_(world_size) {}

StatusOr<std::shared_ptr<LocalGroup>> LocalGroup::Join(const std::string& name, int rank,
                                                       int world_size,
                                                       std::chrono::milliseconds timeout) {
  const std::string where = "local group '" + name + "' rank " + std::to_string(rank) + "/" +
                            std::to_string(world_size);
  const auto deadline = Clock::now() + timeout;
  std::shared_ptr<LocalGroup> group;
  {
    std::lock_guard<std::mutex> reg_lock(RegistryMutex());
    auto& slot = Registry()[name];
    if (!slot) slot = std::make_shared<LocalGroup>(name, world_size);
    group = slot;
    std::lock_guard<std::mutex> lock(group->mu_);
    if (group->world_size_ != world_size) {
      return InvalidArgument(where + ": the group is being formed with world size " +
                             std::to_string(group->world_size_) +
                             "; every rank must pass the same world_size");
    }
    if (group->joined_[rank]) {
      return Status(StatusCode::kAlreadyExists, where + ": rank " + std::to_string(rank) +
                           " joined twice (two threads with the same rank, or a prefix "
                           "reused while the group was forming)");
    }
    group->joined_[rank] = true;
    if (++group->num_joined_ == world_size) {
      Registry().erase(name);
      group->cv_.notify_all();
      return group;
    }
  }
  {
    std::unique_lock<std::mutex> lock(group->mu_);
    if (group->cv_.wait_until(lock, deadline, [&] {
          return group->num_joined_ == world_size || !group->broken_cause_.empty();
        })) {
      if (group->num_joined_ == world_size) return group;
      return Unavailable(where + ": joining failed: " + group->broken_cause_);
    }
  }
  // Timed out: take the unfinished group out of the registry so a retry starts fresh.
  {
    std::lock_guard<std::mutex> reg_lock(RegistryMutex());
    auto it = Registry().find(name);
    if (it != Registry().end() && it->second == group) Registry().erase(it);
  }
  std::lock_guard<std::mutex> lock(group->mu_);
  if (group->num_joined_ == world_size) return group;  // completed in the meantime
  const std::string missing = RankList(group->joined_, false);
  group->BreakLocked("rank " + std::to_string(rank) + " gave up after " +
                     std::to_string(timeout.count()) + " ms waiting for ranks " + missing +
                     " to join");
  return DeadlineExceeded(where + ": timed out after " + std::to_string(timeout.count()) +
                          " ms waiting for ranks " + missing +
                          " to join (every rank must create its communicator with the same "
                          "prefix and world size)");
}

void LocalGroup::BreakLocked(const std::string& cause) {
  if (broken_cause_.empty()) broken_cause_ = cause;
  cv_.notify_all();
}

Status LocalGroup::BrokenStatusLocked(int rank, const std::string& where) const {
  if (!aborted_[rank].empty()) {
    return Aborted(where + ": communicator was aborted: " + aborted_[rank]);
  }
  return Unavailable(where + ": the group is unusable: " + broken_cause_ +
                     " (a failed collective poisons the group; start a new attempt)");
}

Status LocalGroup::CheckUsable(int rank, const std::string& where) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_cause_.empty()) return OkStatus();
  return BrokenStatusLocked(rank, where);
}

Status LocalGroup::Arrive(int rank, const LocalPost* post, Clock::time_point deadline,
                          std::chrono::milliseconds timeout, const std::string& where) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_cause_.empty()) return BrokenStatusLocked(rank, where);
  if (post != nullptr) posts_[rank] = *post;
  const uint64_t generation = generation_;
  arrived_[rank] = true;
  if (++num_arrived_ == world_size_) {
    num_arrived_ = 0;
    arrived_.assign(world_size_, false);
    if (post != nullptr) {
      const std::string mismatch = MismatchLocked();
      if (!mismatch.empty()) {
        BreakLocked("ranks made mismatched collectives: " + mismatch);
        return InvalidArgument(where + ": ranks made mismatched collectives: " + mismatch);
      }
    }
    ++generation_;
    cv_.notify_all();
    return OkStatus();
  }
  cv_.wait_until(lock, deadline,
                 [&] { return generation_ != generation || !broken_cause_.empty(); });
  // A completed phase wins over a failure that came after it.
  if (generation_ != generation) return OkStatus();
  if (!broken_cause_.empty()) return BrokenStatusLocked(rank, where);
  const std::string missing = RankList(arrived_, false);
  BreakLocked("rank " + std::to_string(rank) + " timed out after " +
              std::to_string(timeout.count()) + " ms waiting for ranks " + missing);
  return DeadlineExceeded(where + ": timed out after " + std::to_string(timeout.count()) +
                          " ms waiting for ranks " + missing +
                          " (they never made this call; check that every rank makes the same "
                          "sequence of collectives)");
}

std::string LocalGroup::MismatchLocked() const {
  const LocalPost& first = posts_[0];
  for (int r = 1; r < world_size_; ++r) {
    const LocalPost& p = posts_[r];
    if (std::string(p.call) != first.call || p.count != first.count || p.root != first.root ||
        p.op != first.op || p.elem_size != first.elem_size) {
      return "rank 0 called " + first.Describe() + " but rank " + std::to_string(r) +
             " called " + p.Describe();
    }
  }
  return "";
}

void LocalGroup::Abort(int rank, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_[rank].empty()) aborted_[rank] = reason.empty() ? "(no reason given)" : reason;
  BreakLocked("rank " + std::to_string(rank) + " aborted: " + aborted_[rank]);
}

void LocalGroup::Leave(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  BreakLocked("rank " + std::to_string(rank) + " destroyed its communicator");
}

}  // namespace shard::comm
