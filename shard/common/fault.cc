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

}  // namespace shard
