#include "shard/common/fault.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace shard
