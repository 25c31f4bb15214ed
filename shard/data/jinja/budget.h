// What one render may spend: nesting depth (of the parse, of the render's
// calls and of the values it prints or compares), steps (time), live bytes of
// values (memory), the size of one value and of the output. A template that
// exceeds one fails with one JinjaError naming the budget; template.cc adds
// the line, the caller the template file.
//
// The budget of the render running on this thread is found through
// CurrentBudget() (set by a BudgetScope in Template::Render), so the builtins
// charge it without every signature carrying it. Without one (a Value built
// outside a render, e.g. a parsed literal) only the depth and size bounds hold.
//
// The budget also owns what makes values safe to drop: containers and
// functions are freed one at a time from a queue (never recursively, so a
// 100,000-deep list frees without using the stack), and the containers a
// render built are emptied when it ends, which breaks any cycle (a list that
// holds itself) that reference counting alone would leak.
//
// Thread-safety: a RenderBudget belongs to the one thread that renders.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace shard::jinja {

struct Limits {
  // Nested calls of the render (expressions, blocks, macros, values): at 256 a
  // render uses under 512 KiB of stack in a release build and under 2 MiB
  // under ASan (measured with ulimit -s), inside a thread's default 2-8 MiB.
  int max_depth = 256;
  int64_t max_steps = 20'000'000;                // nodes run, loop turns, items visited, bytes built / 256
  int64_t max_live_bytes = int64_t{1} << 30;     // strings, lists and dicts alive at once
  int64_t max_value_bytes = int64_t{64} << 20;   // one string or list
  int64_t max_output_bytes = int64_t{64} << 20;  // the rendered text
};

// The nesting a template's source may have (parentheses, blocks, filter
// chains, operators): checked by the parser, so the parse and the render's
// walk of the tree stay far from the stack's end.
inline constexpr int kMaxParseDepth = 128;

class RenderBudget {
 public:
  explicit RenderBudget(const Limits& limits);
  // Empties every container the render built (breaking cycles) and frees it all.
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  const Limits& limits() const { return limits_; }
  void Steps(int64_t n);
  void Alloc(int64_t bytes);
  void Free(int64_t bytes) { live_ -= bytes; }
  void TrackContainer(std::weak_ptr<void> c, void (*clear)(void*));

 private:
  Limits limits_;
  int64_t steps_ = 0;
  int64_t live_ = 0;
  struct Tracked {
    std::weak_ptr<void> ptr;
    void (*clear)(void*);
  };
  std::vector<Tracked> containers_;
  size_t compact_at_ = 1024;
};

// The budget of the render running on this thread (nullptr outside one).
RenderBudget* CurrentBudget();

// Installs a budget for the current thread for its lifetime.
class BudgetScope {
 public:
  explicit BudgetScope(RenderBudget* b);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  RenderBudget* saved_;
};

// Charges the current render (no-ops outside one).
void ChargeSteps(int64_t n);
// Steps for work proportional to `bytes` (building or scanning text).
inline void ChargeBytes(size_t bytes) { ChargeSteps(static_cast<int64_t>(bytes / 256)); }
// Fails unless a value of `bytes` (a string, or a list's items) may be built:
// call before building it. `what` names the operation in the error.
void CheckValueSize(uint64_t bytes, const char* what);
// a * b bytes, or UINT64_MAX when the product overflows (then CheckValueSize fails).
uint64_t MulSize(uint64_t a, uint64_t b);

// One level of nesting of the render (an expression, a statement, a macro
// call, a value printed or compared) for its lifetime; fails past max_depth.
class DepthGuard {
 public:
  DepthGuard();
  ~DepthGuard();
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

// Frees `p` with `del` now, or, when a free is already running on this thread
// (it is dropping the container that held p), after it returns: a chain of
// nested containers frees in a loop, not by recursion.
void FreeIteratively(void* p, void (*del)(void*));

}  // namespace shard::jinja
