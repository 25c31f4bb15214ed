#include "shard/common/fault.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace shard {

void MaybeFault(const char* point, int64_t step) {
  static const std::string spec = [] {
    const char* e = std::getenv("SHARDD_FAULT");
    return std::string(e ? e : "");
  }();
  if (spec.empty()) return;
  if (spec == std::string(point) + "@" + std::to_string(step)) {
    std::fprintf(stderr, "shardd: injected fault %s at step %lld\n", point, static_cast<long long>(step));
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
  }
}

void MaybeWaitAtStepGate(int64_t step) {
  static const std::string gate = [] {
    const char* e = std::getenv("SHARDD_STEP_GATE");
    return std::string(e ? e : "");
  }();
  if (gate.empty()) return;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < give_up) {
    std::ifstream in(gate);
    long long open_to = 0;
    if (in >> open_to && open_to >= step) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::fprintf(stderr, "shardd: SHARDD_STEP_GATE %s stayed below step %lld for 10 minutes; going on\n", gate.c_str(),
               static_cast<long long>(step));
}

void MaybeSlowRank(int rank, double compute_s) {
  struct Slow {
    int rank = -1;
    double factor = 1;
  };
  static const Slow slow = [] {
    Slow s;
    const char* e = std::getenv("SHARDD_SLOW_RANK");
    if (!e || !*e) return s;
    int r = -1;
    double f = 0;
    char tail = 0;
    if (std::sscanf(e, "%d:%lf%c", &r, &f, &tail) != 2 || r < 0 || !(f >= 1) || f > 1000) {
      std::fprintf(stderr, "shardd: SHARDD_SLOW_RANK=%s is not RANK:FACTOR (FACTOR 1..1000); ignored\n", e);
      return s;
    }
    s.rank = r;
    s.factor = f;
    return s;
  }();
  if (rank != slow.rank || !(compute_s > 0)) return;
  std::this_thread::sleep_for(std::chrono::duration<double>((slow.factor - 1) * compute_s));
}

void MaybeStallRank(int rank, int64_t step) {
  struct Stall {
    int rank = -1;
    long long step = -1;
  };
  static const Stall stall = [] {
    Stall s;
    const char* e = std::getenv("SHARDD_STALL_RANK");
    if (!e || !*e) return s;
    int r = -1;
    long long at = -1;
    char tail = 0;
    if (std::sscanf(e, "%d@%lld%c", &r, &at, &tail) != 2 || r < 0 || at < 1) {
      std::fprintf(stderr, "shardd: SHARDD_STALL_RANK=%s is not RANK@STEP; ignored\n", e);
      return s;
    }
    s.rank = r;
    s.step = at;
    return s;
  }();
  if (rank != stall.rank || step != stall.step) return;
  std::fprintf(stderr, "shardd: injected stall of rank %d before step %lld (SHARDD_STALL_RANK)\n", rank,
               static_cast<long long>(step));
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::minutes(10));
}

}  // namespace shard
