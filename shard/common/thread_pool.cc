#include "shard/common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace shard {
namespace {

// A fixed pool. Guarded by mu_: generation_, job_, n_, chunks_, running_.
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { Loop(i); });
    size_ = threads;
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return size_; }

  void Run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard<std::mutex> call_lock(call_mu_);
    int64_t chunks = std::min<int64_t>(size_, std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
    if (chunks <= 1) {
      fn(0, n);
      return;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = &fn;
      n_ = n;
      chunks_ = chunks;
      pending_ = static_cast<int>(chunks - 1);
      ++generation_;
    }
    cv_.notify_all();
    RunChunk(0);
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void RunChunk(int64_t c) {
    int64_t begin = n_ * c / chunks_, end = n_ * (c + 1) / chunks_;
    if (begin < end) (*job_)(begin, end);
  }
  void Loop(int index) {
    uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        if (index >= chunks_) continue;
      }
      RunChunk(index);
      std::lock_guard<std::mutex> l(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex call_mu_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  int size_ = 1;
  uint64_t generation_ = 0;
  bool stop_ = false;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  int pending_ = 0;
};

int DefaultThreads() {
  if (const char* env = std::getenv("SHARDD_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::unique_ptr<Pool>& GlobalPool() {
  static std::unique_ptr<Pool> pool = std::make_unique<Pool>(DefaultThreads());
  return pool;
}

}  // namespace

int NumComputeThreads() { return GlobalPool()->size(); }

void SetNumComputeThreads(int n) {
  n = std::max(1, n);
  if (GlobalPool()->size() != n) GlobalPool() = std::make_unique<Pool>(n);
}

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  GlobalPool()->Run(n, grain, fn);
}

}  // namespace shard
