#include "shard/fsdp/comm_thread.h"

#include <optional>

#include "shard/comm/comm_wait_clock.h"

namespace shard {

CommThread::CommThread(Waits waits) : waits_(waits), thread_([this] { Loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

CommThread::Ticket CommThread::Enqueue(std::function<Status()> task) {
  std::lock_guard<std::mutex> l(mu_);
  Ticket t = next_++;
  queue_.emplace_back(t, std::move(task));
  cv_.notify_one();
  return t;
}

Status CommThread::Wait(Ticket t) {
  std::unique_lock<std::mutex> l(mu_);
  if (completed_ >= t || !error_.ok()) return error_;
  std::optional<ScopedCommWait> waiting;  // the caller is blocked from here on
  if (waits_ == Waits::kCommunication) waiting.emplace();
  done_cv_.wait(l, [&] { return completed_ >= t || !error_.ok(); });
  return error_;
}

bool CommThread::Done(Ticket t) {
  std::lock_guard<std::mutex> l(mu_);
  return completed_ >= t;
}

Status CommThread::Drain() {
  Ticket last;
  {
    std::lock_guard<std::mutex> l(mu_);
    last = next_ - 1;
  }
  return Wait(last);
}

void CommThread::Loop() {
  while (true) {
    std::pair<Ticket, std::function<Status()>> item;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    Status st;
    {
      bool failed;
      {
        std::lock_guard<std::mutex> l(mu_);
        failed = !error_.ok();
      }
      // After a failure the remaining tasks are skipped: the attempt is over.
      if (!failed) st = item.second();
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!st.ok() && error_.ok()) error_ = st;
      completed_ = item.first;
    }
    done_cv_.notify_all();
  }
}

}  // namespace shard
