#include "shard/comm/communicator.h"

#include "shard/comm/collective_util.h"
#include "shard/comm/gloo/gloo_communicator.h"
#include "shard/comm/local/local_communicator.h"
#include "shard/comm/sim/sim_communicator.h"
#include "shard/config.h"
#if SHARDD_NCCL_FOUND
#include "shard/comm/nccl/nccl_communicator.h"
#endif

namespace shard {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

Status Communicator::AllReduceMany(const std::vector<Buffer>& buffers, ReduceOp op, const CommOptions& options) {
  for (size_t i = 0; i < buffers.size(); ++i)
    RETURN_IF_ERROR(AllReduce(buffers[i].data, buffers[i].count, op, options)
                        .WithContext("buffer " + std::to_string(i) + " of " + std::to_string(buffers.size())));
  return OkStatus();
}

Status CommConfig::Validate() const {
  if (backend != "local" && backend != "gloo" && backend != "nccl" && backend != "sim") {
    return InvalidArgument("communicator backend '" + backend +
                           "' is unknown; use local, gloo or nccl (or sim, the memory simulator's)");
  }
  if (world_size < 1) {
    return InvalidArgument("communicator world_size must be >= 1, got " +
                           std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return InvalidArgument("communicator rank " + std::to_string(rank) + " is outside [0, " +
                           std::to_string(world_size) + ")");
  }
  if (timeout.count() <= 0) {
    return InvalidArgument("communicator timeout must be positive, got " +
                           std::to_string(timeout.count()) + " ms");
  }
  if (backend != "local" && backend != "sim" && store == nullptr) {
    return InvalidArgument("communicator backend '" + backend +
                           "' needs a rendezvous store (CommConfig.store)");
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const CommConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  if (config.backend == "local") return CreateLocalCommunicator(config);
  if (config.backend == "sim") return CreateSimCommunicator(config);
  if (config.backend == "gloo") return CreateGlooCommunicator(config);
#if SHARDD_NCCL_FOUND
  return CreateNcclCommunicator(config);
#else
  return Unavailable(
      "communicator backend 'nccl': this shardd was built without CUDA/NCCL; use 'gloo' (CPU "
      "processes) or 'local' (threads)");
#endif
}

namespace comm {

std::string Where(const char* call, const Communicator& comm) {
  return std::string(call) + " on " + comm.name();
}

Status CheckArgs(const char* call, const Communicator& comm, int64_t count, const void* a,
                 const void* b) {
  if (count < 0) {
    return InvalidArgument(Where(call, comm) + ": negative count " + std::to_string(count));
  }
  if (count > 0 && (a == nullptr || b == nullptr)) {
    return InvalidArgument(Where(call, comm) + ": null buffer with count " +
                           std::to_string(count));
  }
  return OkStatus();
}

Status CheckRoot(const char* call, const Communicator& comm, int root) {
  if (root < 0 || root >= comm.world_size()) {
    return InvalidArgument(Where(call, comm) + ": root " + std::to_string(root) +
                           " is outside [0, " + std::to_string(comm.world_size()) + ")");
  }
  return OkStatus();
}

}  // namespace comm
}  // namespace shard
