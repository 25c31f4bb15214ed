#include "shard/comm/comm_wait_clock.h"

namespace shard {
namespace {
thread_local double this_thread_wait_s = 0;
}  // namespace

double ThisThreadCommWaitSeconds() { return this_thread_wait_s; }

ScopedCommWait::~ScopedCommWait() {
  this_thread_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

}  // namespace shard
