#include "worker/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace shardd {
namespace {

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

void OnStopSignal(int sig) { g_stop_signal.store(sig, std::memory_order_relaxed); }

}  // namespace

void InstallStopSignal() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

bool StopRequested() { return g_stop_signal.load(std::memory_order_relaxed) != 0; }

const char* StopSignalName() { return StopRequested() ? "SIGUSR1" : ""; }

}  // namespace shardd
