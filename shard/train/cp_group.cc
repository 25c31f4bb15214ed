#include "shard/train/cp_group.h"

#include <algorithm>
#include <string>
#include <vector>

#include "shard/spec/context_parallel.h"

namespace shard {

Status CheckContextParallelTraining(const JobConfig& job, const LlamaConfig& config, const Backend& backend) {
  const int c = job.parallel.context_parallel;
  if (c == 1) return OkStatus();
  const std::string what = "parallel.context_parallel " + std::to_string(c);
  // sim: the memory simulator's bookkeeping backend (shardctl plan --simulate) runs the CP code at true shapes.
  if (std::string(backend.name()) != "cpu" && std::string(backend.name()) != "sim")
    return Unimplemented(what + ": context parallelism on the " + backend.name() +
                         " backend is not verified yet (its chunk attention has not run on a device); use device: "
                         "cpu (docs/context-parallel.md)");
  return OkStatus();
}

CpGroup::CpGroup(Backend* backend, std::unique_ptr<Communicator> comm, CommOptions options)
    : comm_(std::move(comm)), options_(options), exchange_(comm_.get(), options), attention_(backend, &exchange_) {}

void CpGroup::Split(int64_t rows, int64_t seq, std::initializer_list<int32_t*> arrays) const {
  std::vector<int32_t> whole(static_cast<size_t>(rows * seq));
  for (int32_t* a : arrays) {
    std::copy(a, a + rows * seq, whole.begin());
    const std::vector<int32_t> local = LocalRows(whole, rows, seq, 1, size(), rank());
    std::copy(local.begin(), local.end(), a);
  }
}

}  // namespace shard
