// What the flight recorder costs each collective: Begin + End on the ring
// alone, and a zero-count all-reduce through the communicator wrapper with
// and without a recorder (a one-rank local group: the call itself is nearly
// free, so the difference is the recorder's). Prints ns per call; never
// fails on speed. --smoke: fewer calls.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "shard/comm/communicator.h"
#include "shard/comm/flight_recorder.h"
#include "shard/comm/timed_communicator.h"

namespace {

template <typename F>
double NsPerCall(int64_t n, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) f(i);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}

std::unique_ptr<shard::Communicator> OneRank(const char* prefix) {
  shard::CommConfig c;
  c.backend = "local";
  c.prefix = prefix;
  auto comm = shard::CreateCommunicator(c);
  if (!comm.ok()) {
    std::fprintf(stderr, "flight_recorder_bench: %s\n", comm.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*comm);
}

}  // namespace

int main(int argc, char** argv) {
  const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
  const int64_t n = smoke ? 200'000 : 5'000'000;
  shard::FlightRecorder rec;
  const int g = rec.AddGroup("shard0", 8);
  const double ring =
      NsPerCall(n, [&](int64_t i) { rec.End(rec.Begin(g, i + 1, shard::CollectiveOp::kAllGather, 3, 4096), true); });
  auto plain = shard::WithWaitClock(OneRank("bench/plain/"));
  auto recorded = shard::WithWaitClock(OneRank("bench/rec/"), std::make_shared<shard::FlightRecorder>(), "shard0");
  float x = 0;
  const shard::CommOptions o;
  const double without = NsPerCall(n, [&](int64_t) { (void)plain->AllReduce(&x, 0, shard::ReduceOp::kSum, o); });
  const double with = NsPerCall(n, [&](int64_t) { (void)recorded->AllReduce(&x, 0, shard::ReduceOp::kSum, o); });
  std::printf("flight recorder, %lld calls each:\n", static_cast<long long>(n));
  std::printf("  ring Begin+End            %8.1f ns/collective\n", ring);
  std::printf("  wrapped call, no recorder %8.1f ns/collective\n", without);
  std::printf("  wrapped call, recorder    %8.1f ns/collective (+%.1f ns)\n", with, with - without);
  return 0;
}
