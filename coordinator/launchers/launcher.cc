#include "coordinator/launchers/launcher.h"

#include <cstring>

namespace shardd {

std::string RankExit::Describe() const {
  if (!detail.empty()) return detail;
  if (rank == kAllRanks) {
    if (signal != 0) return "the workers were killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
    return "the workers exited with code " + std::to_string(exit_code);
  }
  if (signal != 0)
    return "rank " + std::to_string(rank) + " killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "rank " + std::to_string(rank) + " exited with code " + std::to_string(exit_code);
}

}  // namespace shardd
