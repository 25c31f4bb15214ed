// The CP group's collectives for CpAttention (shard/model/cp_attention.h) over
// a Communicator whose ranks are the group's members in CP-rank order.
#pragma once

#include <memory>

#include "shard/comm/communicator.h"
#include "shard/model/cp_attention.h"

namespace shard {

class CommCpExchange : public CpExchange {
 public:
  CommCpExchange(Communicator* comm, CommOptions options) : comm_(comm), options_(options) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->world_size(); }
  Status AllGather(const float* send, float* recv, int64_t count) override {
    return comm_->AllGather(send, recv, count, options_);
  }
  Status ReduceScatter(const float* send, float* recv, int64_t count) override {
    return comm_->ReduceScatter(send, recv, count, ReduceOp::kSum, options_);
  }

 private:
  Communicator* comm_;
  CommOptions options_;
};

}  // namespace shard
