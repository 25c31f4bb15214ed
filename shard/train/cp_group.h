// Context parallelism in the trainer (parallel.context_parallel C > 1,
// docs/context-parallel.md). Ranks dp*C .. dp*C + C-1 form CP group dp: the
// data loader feeds the group as one rank (DataRank/DataWorld), every member
// loads the same whole rows and keeps its two chunks of each sequence
// (head-tail, shard/spec/context_parallel.h), and the model's attention
// (CpAttention, given through LlamaModel::SetAttention) all-gathers K/V over
// the group. FSDP still shards over the whole world, so checkpoints do not
// depend on C; the loss sum and the gradients add up over every rank as
// before, and the global target count normalises both.
//
// Thread-safety: one thread (the trainer's).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>

#include "shard/backend/backend.h"
#include "shard/comm/communicator.h"
#include "shard/model/cp_attention.h"
#include "shard/model/llama_model.h"
#include "shard/spec/job_config.h"
#include "shard/train/cp_exchange.h"

namespace shard {

// The data loader's rank and world: the C ranks of a CP group read the same rows.
inline int DataRank(int rank, int context_parallel) { return rank / context_parallel; }
inline int DataWorld(int world, int context_parallel) { return world / context_parallel; }

// What context parallelism is not built for yet on this model and backend,
// one line each (the job file's own combinations are refused by
// JobConfig::Validate); OK for C = 1.
Status CheckContextParallelTraining(const JobConfig& job, const LlamaConfig& config, const Backend& backend);

class CpGroup {
 public:
  // comm: the group's communicator, its ranks in CP-rank order.
  CpGroup(Backend* backend, std::unique_ptr<Communicator> comm, CommOptions options);
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->world_size(); }
  // The attention the model is given.
  BlockAttention* attention() { return &attention_; }
  // Each array holds `rows` whole sequences of `seq` entries as the loader
  // filled them (targets already shifted); rewritten in place to this rank's
  // local rows, rows x seq/C entries: per sequence its head chunk, then its
  // tail chunk. Segment ids stay whole (CpAttention reads the whole rows').
  void Split(int64_t rows, int64_t seq, std::initializer_list<int32_t*> arrays) const;
  // Sums `n` host doubles in place over the group (a MoE model's aux/z-loss
  // statistics of a micro-batch: MoeMlp::SumOverGroup).
  Status AllReduceSum(double* values, int64_t n) { return comm_->AllReduce(values, n, ReduceOp::kSum, options_); }

 private:
  std::unique_ptr<Communicator> comm_;
  CommOptions options_;
  CommCpExchange exchange_;
  CpAttention attention_;
};

}  // namespace shard
