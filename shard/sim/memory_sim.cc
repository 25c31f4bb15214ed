#include "shard/sim/memory_sim.h"

#include "shard/train/cp_group.h"

#include <chrono>

#include "shard/backend/sim/sim_backend.h"
#include "shard/data/sampler.h"
#include "shard/train/lora_checkpoint.h"
#include "shard/train/trainer.h"

namespace shard::sim {

StatusOr<SimulationResult> SimulateJobMemory(const JobConfig& job_in, const SimulationOptions& options) {
  if (options.precision == Precision::kAuto)
    return InvalidArgument("memory simulation: resolve train.precision auto before simulating");
  const auto t0 = std::chrono::steady_clock::now();
  JobConfig job = job_in;
  // Two steps with a snapshot between them (the second runs with it held, as
  // every step after the first checkpoint does); nothing resumed, exported or
  // written: the checkpointer only counts its snapshot on this backend.
  job.train.steps = 2;
  job.train.precision = options.precision;
  job.checkpoint.every_steps = 0;
  job.checkpoint.resume = "none";
  job.export_.hf_dir.clear();

  auto tracker = std::make_shared<MemoryTracker>();
  DistContext dist;
  dist.rank = 0;
  dist.world = job.parallel.world_size;
  dist.comm_backend = "sim";
  dist.prefix = "sim/";
  dist.make_backend = [&]() -> StatusOr<std::unique_ptr<Backend>> {
    return CreateSimBackend(tracker, options.native_bf16);
  };
  SimulationResult r;
  r.world = dist.world;
  r.rank = dist.rank;
  {
    tracker->SetPhase("load (model buffers, FSDP shards, optimizer state, weight staging)");
    ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::Create(job, dist));
    tracker->SetLayers(t->model_config().num_layers);
    r.device_after_load = tracker->device_now();
    r.host_after_load = tracker->host_now();
    tracker->SetPhase("step 1");
    RETURN_IF_ERROR(t->Step().status().WithContext("simulated step 1"));
    if (job_in.checkpoint.every_steps > 0) {  // a job that never checkpoints holds no snapshot
      tracker->SetPhase("checkpoint snapshot");
      if (t->lora()) {  // peft: rank 0 saves the adapters and their moments through host copies
        LoraCheckpointState st;
        st.step = 1;
        RETURN_IF_ERROR(SaveLoraCheckpoint(job.checkpoint.dir, st, *t->lora(), job.checkpoint.keep_last)
                            .WithContext("simulated LoRA checkpoint"));
      } else {
        Manifest m;
        m.step = 1;
        RETURN_IF_ERROR(t->checkpointer()->Save(m).WithContext("simulated checkpoint snapshot"));
      }
    }
    tracker->SetPhase("step 2");
    RETURN_IF_ERROR(t->Step().status().WithContext("simulated step 2"));
    // Context parallelism: the C ranks of a group read the same rows (cp_group.h).
    const int cp = job.parallel.context_parallel;
    const BatchSlice mine = RankSlice(job.train.global_batch, DataRank(dist.rank, cp), DataWorld(dist.world, cp));
    r.micro_batches = static_cast<int>((mine.end - mine.begin + job.train.micro_batch - 1) / job.train.micro_batch);
  }
  const Peak d = tracker->device_peak(), h = tracker->host_peak();
  r.device = {d.bytes, d.where, d.live};
  r.host = {h.bytes, h.where, h.live};
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace shard::sim
