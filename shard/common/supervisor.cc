#include "shard/common/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>

namespace shard {
namespace {

// The self-pipe of the one live Supervisor: handlers write the signal's
// number, Wait reads it. -1 when none lives.
std::atomic<int> g_wake_write{-1};
std::atomic<bool> g_active{false};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free fd");

void OnCaughtSignal(int sig) {
  const int saved = errno;
  const int fd = g_wake_write.load(std::memory_order_relaxed);
  const unsigned char c = static_cast<unsigned char>(sig);
  if (fd >= 0) (void)!::write(fd, &c, 1);  // a full pipe already wakes Wait
  errno = saved;
}

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int g_wake_read = -1;

}  // namespace

Supervisor::Supervisor(SuperviseOptions opts) : opts_(std::move(opts)) {
  SHARD_CHECK_MSG(!g_active.exchange(true), "one Supervisor per process at a time");
  int fds[2] = {-1, -1};
  // Without the pipe Wait still works, on its fallback tick.
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
    g_wake_read = fds[0];
    g_wake_write.store(fds[1]);
  }
  std::vector<int> sigs = {SIGCHLD};
  for (const auto& [caught, sent] : opts_.forward) sigs.push_back(caught);
  for (int sig : sigs) {
    if (std::any_of(saved_.begin(), saved_.end(), [&](const auto& s) { return s.first == sig; })) continue;
    struct sigaction sa = {}, old = {};
    sa.sa_handler = OnCaughtSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    if (::sigaction(sig, &sa, &old) == 0) saved_.push_back({sig, old});
  }
}

Supervisor::~Supervisor() {
  for (const auto& [sig, old] : saved_) ::sigaction(sig, &old, nullptr);
  const int w = g_wake_write.exchange(-1);
  if (w >= 0) ::close(w);
  if (g_wake_read >= 0) ::close(g_wake_read);
  g_wake_read = -1;
  g_active.store(false);
  // ranks_ kills and reaps what is still running.
}

void Supervisor::BeginStop() {
  if (stopping_) return;
  stopping_ = true;
  ranks_.Signal(SIGTERM);
  if (opts_.stop_grace_s >= 0) kill_at_ = NowS() + opts_.stop_grace_s;
}

void Supervisor::OnSignal(int sig, SuperviseResult& result) {
  int sent = sig;
  for (const auto& [caught, to] : opts_.forward)
    if (caught == sig) sent = to;
  if (!stopping_) {
    if (result.signal == 0) result.signal = sig;
    if (opts_.on_signal) opts_.on_signal(sig);
  }
  ranks_.Signal(sent);
  if (opts_.stop_on_signal) BeginStop();
}

void Supervisor::OnEnd(const RankEnd& end, SuperviseResult& result) {
  result.ends.push_back(end);
  const bool dooms = !stopping_ && opts_.fails && opts_.fails(end.status);
  if (dooms) result.failed_rank = end.rank;
  if (opts_.on_end) opts_.on_end(end, dooms);
  if (dooms) BeginStop();
}

void Supervisor::Sleep(int timeout_ms) {
  if (g_wake_read < 0) {
    ::poll(nullptr, 0, timeout_ms);
    return;
  }
  pollfd p = {g_wake_read, POLLIN, 0};
  ::poll(&p, 1, timeout_ms);
}

SuperviseResult Supervisor::Wait() {
  SuperviseResult result;
  while (true) {
    unsigned char buf[64];
    ssize_t n;
    while (g_wake_read >= 0 && (n = ::read(g_wake_read, buf, sizeof(buf))) > 0)
      for (ssize_t i = 0; i < n; ++i)
        if (buf[i] != SIGCHLD) OnSignal(buf[i], result);
    for (const RankEnd& e : ranks_.Poll()) OnEnd(e, result);
    if (ranks_.running() == 0) break;
    if (kill_at_ >= 0 && NowS() >= kill_at_) {
      ranks_.Signal(SIGKILL);
      kill_at_ = -1;
    }
    // A rank's end (SIGCHLD) or a caught signal leaves a byte in the pipe,
    // also when it came between Poll and here; the cap is only a safety net.
    int timeout_ms = 100;
    if (kill_at_ >= 0) timeout_ms = std::clamp(static_cast<int>(std::ceil((kill_at_ - NowS()) * 1000)), 0, timeout_ms);
    Sleep(timeout_ms);
  }
  return result;
}

}  // namespace shard
