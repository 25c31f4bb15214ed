#include "shard/comm/gloo/peer_watchdog.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

namespace shard::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Slot prefix of the sentinels; Gloo's collectives use 0x01..0x08, our rings 0x53.
constexpr uint8_t kSentinelSlotPrefix = 0x57;
constexpr char kGoodbye = 'G';
// Never reached: the probe's wait returns at once (it was aborted beforehand) or throws.
constexpr auto kNeverWait = std::chrono::hours(24);

}  // namespace

PeerWatchdog::PeerWatchdog(std::shared_ptr<::gloo::Context> context, std::function<bool()> busy,
                           std::function<void(int, const std::string&)> on_failure,
                           std::chrono::milliseconds period)
    : inbox_(static_cast<size_t>(context->size), 0),
      sentinels_(static_cast<size_t>(context->size)),
      context_(std::move(context)),
      busy_(std::move(busy)),
      on_failure_(std::move(on_failure)),
      period_(period) {
  const uint64_t slot = ::gloo::Slot::build(kSentinelSlotPrefix, 0);
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer == context_->rank) continue;
    sentinels_[peer] = context_->createUnboundBuffer(&inbox_[peer], 1);
    sentinels_[peer]->recv(peer, slot, 0, 1);
  }
}

void PeerWatchdog::Start() {
  if (context_->size > 1 && !thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

PeerWatchdog::~PeerWatchdog() {
  Stop();
  // Members go in reverse order: context_ (closing every pair, after which Gloo touches
  // no sentinel) before sentinels_ and inbox_.
}

void PeerWatchdog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeerWatchdog::SayGoodbye(std::chrono::milliseconds timeout) {
  const uint64_t slot = ::gloo::Slot::build(kSentinelSlotPrefix, 0);
  char byte = kGoodbye;
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> sent;
  for (int peer = 0; peer < context_->size; ++peer) {
    if (peer == context_->rank) continue;
    try {
      auto buf = context_->createUnboundBuffer(&byte, 1);
      buf->send(peer, slot, 0, 1);
      sent.push_back(std::move(buf));
    } catch (const std::exception&) {
      // That peer's connection is already gone; nothing to tell it.
    }
  }
  const auto deadline = Clock::now() + timeout;
  for (auto& buf : sent) {
    try {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      buf->waitSend(std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      return;  // a timeout failed (closed) the whole context; the rest cannot be sent
    }
  }
}

bool PeerWatchdog::Probe(int peer, std::string* message) {
  // With the abort flag set the wait returns at once — unless the pair failed, in which
  // case Gloo's wait throws the pair's error before it looks at the flag. A sentinel
  // completed by a goodbye is off the pair's queue and never throws.
  auto& sentinel = sentinels_[peer];
  sentinel->abortWaitRecv();
  try {
    sentinel->waitRecv(kNeverWait);
    return true;
  } catch (const std::exception& e) {
    *message = e.what();
    return false;
  }
}

void PeerWatchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [&] { return stop_; })) {
    if (!busy_()) continue;
    for (int peer = 0; peer < context_->size; ++peer) {
      if (peer == context_->rank) continue;
      std::string message;
      if (Probe(peer, &message)) continue;
      if (message.find("Application timeout") != std::string::npos) return;  // our own timeout
      lock.unlock();
      on_failure_(peer, message);
      return;  // the communicator has failed; nothing more to watch
    }
  }
}

}  // namespace shard::comm
