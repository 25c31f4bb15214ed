// The simulation backend: a Backend that keeps the books of every device and
// host allocation but holds no data and does no math (the memory simulator,
// shard/sim/memory_sim.h, runs the real trainer on it at a job's true shapes).
//
// Allocate and AllocateHost hand out addresses inside one PROT_NONE
// reservation that is never backed by memory: a 70B model's shards cost no
// RAM, and code that touched simulated memory on the host would fault at once
// instead of reading garbage — which is how the simulation proves every host
// write it skips is skipped on purpose (Backend::holds_data()). Every op is a
// no-op (CrossEntropy and SumSquares return 0), except that it keeps the books
// of the device buffers the CUDA backend allocates for itself (the cuBLASLt
// workspace, grow-only GEMM input casts, the rounded q/k/v copy) and that an
// attention waits for the collectives queued before it (its events, set done
// by the sim communicator), so the FSDP runtime's frees of finished
// reduce-scatters happen at the same points on every run (sim_backend.cc).
//
// The MemoryTracker counts the bytes live now and their peaks, device and
// host apart, and remembers where each peak happened: the phase the driver set
// ("load", "step 1", ...) and the model op the compute thread issued last
// (forward block 12, backward block 3, the LM head and loss, AdamW, ...).
//
// Thread-safety: the tracker is safe from any thread (the FSDP runtime's
// communication thread and host worker allocate and free too); a SimBackend,
// like any Backend, is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "shard/backend/backend.h"

namespace shard::sim {

struct Peak {
  int64_t bytes = 0;
  std::string where;  // "step 1, micro-batch 1, backward block 79 (after AttentionBackward)"
  // The buffers live at that moment: size in bytes -> how many.
  std::map<int64_t, int> live;
};

class MemoryTracker {
 public:
  // A new phase: labels later peaks, and restarts the micro-batch count.
  void SetPhase(const std::string& phase);
  // The model's decoder depth, so op counts become block numbers.
  void SetLayers(int layers);
  // An op issued by the compute thread (the label of what follows).
  void Op(const char* name);
  void Allocated(bool host, int64_t bytes);
  void Freed(bool host, int64_t bytes);

  Peak device_peak() const;
  Peak host_peak() const;
  int64_t device_now() const;
  int64_t host_now() const;
  // Live allocations of both kinds (a leak check for tests).
  int64_t live_allocations() const;

 private:
  std::string WhereLocked() const;

  mutable std::mutex mu_;
  std::string phase_ = "start";
  int layers_ = 0;
  int micro_batch_ = 0;  // EmbeddingForward calls in this phase
  int fwd_attn_ = 0, bwd_attn_ = 0, chunk_ops_ = 0;
  bool backward_ = false;
  std::string context_, last_op_;
  int64_t device_now_ = 0, host_now_ = 0, live_ = 0;
  std::map<int64_t, int> device_live_, host_live_;  // size -> count
  Peak device_peak_, host_peak_;
};

// A backend that reports to `tracker` (shared with whoever reads the peaks).
// native_bf16: what the simulated GPU has (precision auto follows it).
std::unique_ptr<Backend> CreateSimBackend(std::shared_ptr<MemoryTracker> tracker, bool native_bf16 = true);

}  // namespace shard::sim
