#include "shard/data/jinja/budget.h"

#include <algorithm>
#include <string>
#include <utility>

#include "shard/data/jinja/value.h"

namespace shard::jinja {
namespace {

thread_local RenderBudget* t_budget = nullptr;
thread_local int t_depth = 0;

// FreeIteratively's queue: what waits to be freed while a free runs.
struct Graveyard {
  std::vector<std::pair<void*, void (*)(void*)>> pending;
  bool draining = false;
};
thread_local Graveyard t_graveyard;

std::string MiB(int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

const Limits& Defaults() {
  static const Limits limits;
  return limits;
}

const Limits& Active() { return t_budget ? t_budget->limits() : Defaults(); }

}  // namespace

RenderBudget::RenderBudget(const Limits& limits) : limits_(limits) {}

RenderBudget::~RenderBudget() {
  // Whatever the render built is unreachable now, except through cycles: empty
  // every container still alive so the cycles fall apart and free.
  std::vector<std::shared_ptr<void>> alive;
  for (auto& t : containers_)
    if (auto p = t.ptr.lock()) {
      t.clear(p.get());
      alive.push_back(std::move(p));
    }
  containers_.clear();
  alive.clear();
}

void RenderBudget::Steps(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    Fail("the template ran past its step budget (" + std::to_string(limits_.max_steps) +
         " steps: a loop or recursion too large to be a chat template's)");
}

void RenderBudget::Alloc(int64_t bytes) {
  live_ += bytes;
  if (live_ > limits_.max_live_bytes)
    Fail("the template's values grew past the memory budget (" + MiB(limits_.max_live_bytes) + " alive at once)");
}

void RenderBudget::TrackContainer(std::weak_ptr<void> c, void (*clear)(void*)) {
  if (containers_.size() >= compact_at_) {
    std::erase_if(containers_, [](const Tracked& t) { return t.ptr.expired(); });
    compact_at_ = std::max<size_t>(1024, 2 * containers_.size());
  }
  containers_.push_back({std::move(c), clear});
}

RenderBudget* CurrentBudget() { return t_budget; }

BudgetScope::BudgetScope(RenderBudget* b) : saved_(t_budget) { t_budget = b; }
BudgetScope::~BudgetScope() { t_budget = saved_; }

void ChargeSteps(int64_t n) {
  if (t_budget) t_budget->Steps(n);
}

uint64_t MulSize(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

void CheckValueSize(uint64_t bytes, const char* what) {
  const auto max = static_cast<uint64_t>(Active().max_value_bytes);
  if (bytes > max)
    Fail(std::string(what) + ": the result would be " + (bytes == UINT64_MAX ? "past 2^64" : std::to_string(bytes)) +
         " bytes, more than the " + MiB(static_cast<int64_t>(max)) + " one value may hold");
}

DepthGuard::DepthGuard() {
  if (++t_depth > Active().max_depth) {
    --t_depth;
    Fail("nesting deeper than " + std::to_string(Active().max_depth) +
         " levels (a macro that calls itself without end, or a value that holds itself?)");
  }
}
DepthGuard::~DepthGuard() { --t_depth; }

void FreeIteratively(void* p, void (*del)(void*)) {
  Graveyard& g = t_graveyard;
  g.pending.emplace_back(p, del);
  if (g.draining) return;
  g.draining = true;
  while (!g.pending.empty()) {
    auto [q, d] = g.pending.back();
    g.pending.pop_back();
    d(q);  // may queue what q held
  }
  g.draining = false;
}

}  // namespace shard::jinja
