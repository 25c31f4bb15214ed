// The job file: one typed struct per section, mapped strictly from YAML (an
// unknown key or a wrong type is an error naming the file and the dotted key).
// Relative paths are taken relative to the current directory.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/data_config.h"
#include "shard/spec/enum_names.h"
#include "shard/spec/eval_config.h"
#include "shard/spec/health_config.h"
#include "shard/spec/moe_config.h"
#include "shard/spec/loss_scale.h"
#include "shard/spec/memory_tier_config.h"
#include "shard/spec/optim_config.h"
#include "shard/spec/peft_config.h"
#include "shard/spec/preference_config.h"
#include "shard/spec/shard_layout.h"
#include "shard/tensor/dtype.h"

namespace shard {

// train.precision (DESIGN.md "Precision"); auto is resolved per device by
// ResolveAutoPrecision (shard/spec/precision.h).
enum class Precision { kAuto, kFp32, kBf16, kFp16 };
inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::kAuto, "auto"}, {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}};
inline const char* PrecisionName(Precision p) { return EnumToName(kPrecisionNames, p); }

// The two-byte and fp32 types a job may name (parallel.reduce_dtype, export.dtype).
inline constexpr EnumName<DType> kFloatDTypeNames[] = {
    {DType::kF32, "fp32"}, {DType::kBF16, "bf16"}, {DType::kF16, "fp16"}};

// resources.launcher: who starts the workers.
enum class Launcher { kLocal, kSlurm, kKubernetes, kExternal };
inline constexpr EnumName<Launcher> kLauncherNames[] = {{Launcher::kLocal, "local"},
                                                        {Launcher::kSlurm, "slurm"},
                                                        {Launcher::kKubernetes, "kubernetes"},
                                                        {Launcher::kExternal, "external"}};
inline const char* LauncherName(Launcher l) { return EnumToName(kLauncherNames, l); }

// resources.device: auto (a GPU per rank when the host has them, else the
// CPU) | cpu | cuda (rank r takes GPU r % GPUs) | cuda:N.
struct DeviceSpec {
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  int index = -1;  // cuda:N; -1 = by rank
  bool is_auto() const { return kind == Kind::kAuto; }
  bool is_cpu() const { return kind == Kind::kCpu; }
  std::string ToString() const;  // the job file's spelling
  bool operator==(const DeviceSpec&) const = default;
};
StatusOr<DeviceSpec> ParseDeviceSpec(const std::string& text);

struct ModelSource {
  std::string preset;   // a LlamaPreset name
  std::string from_hf;  // an HF folder: config.json + safetensors
  Status Validate() const;
};

struct TrainConfig {
  int64_t steps = 100;
  int64_t global_batch = 8;  // sequences per optimizer step, over all ranks
  int64_t micro_batch = 8;   // sequences per forward/backward on one rank
  uint64_t seed = 1234;
  Precision precision = Precision::kAuto;
  // Loss scaling (shard/spec/loss_scale.h): auto (dynamic when precision is
  // fp16, otherwise none) | dynamic | none | a positive number (a static scale).
  LossScaleSetting loss_scale;
  int64_t loss_scale_window = 2000;  // dynamic: clean steps in a row before the scale doubles
  int64_t log_every = 10;
  // Rows of fp32 logits the LM head and loss hold at once (ModelOptions::
  // loss_chunk_rows): 0 = auto (all rows if their logits fit 256 MiB, else
  // chunks that do), N > 0 = N rows per chunk.
  int64_t loss_chunk_rows = 0;
  OptimConfig optim;
  Status Validate() const;
};

struct ParallelConfig {
  ShardStrategy strategy = ShardStrategy::kFullShard;
  int world_size = 1;
  int shard_group_size = 0;  // hybrid_shard: ranks per shard group (0 = all)
  bool activation_checkpointing = false;
  bool offload_optimizer = false;
  double comm_timeout_s = 300;  // longest any collective may block
  // Gradients on the reduce-scatter wire: fp32 | bf16 | fp16. Two-byte types add
  // in fp32 at every hop; the gradient shard stays fp32. The replicas' all-reduce
  // (no_shard, hybrid_shard) stays fp32 whatever this says.
  DType reduce_dtype = DType::kF32;
  // Ranks that split each sequence between them (context parallelism:
  // shard/spec/context_parallel.h). 1 = off.
  int context_parallel = 1;
  Status Validate() const;
};

struct CheckpointConfig {
  std::string dir = "runs";
  int64_t every_steps = 0;  // 0 = no periodic checkpoints
  int keep_last = 3;
  bool async = true;
  // Where to start from: "auto" (the newest good committed step of this job in
  // dir, else from scratch), "none" (always from scratch), or a step directory.
  std::string resume = "auto";
  MemoryTierConfig memory;  // checkpoint.memory: the in-memory tier (memory_tier_config.h)
  Status Validate() const;
};

// resources.slurm.gpu_request: --gpus-per-task=N, or --gres=gpu:N per node
// (for clusters whose Slurm predates or disables per-task GPU binding).
enum class GpuRequest { kGpusPerTask, kGres };
inline constexpr EnumName<GpuRequest> kGpuRequestNames[] = {{GpuRequest::kGpusPerTask, "gpus-per-task"},
                                                            {GpuRequest::kGres, "gres"}};

// resources.kubernetes.image_pull_policy, spelled as Kubernetes spells it.
enum class ImagePullPolicy { kAlways, kIfNotPresent, kNever };
inline constexpr EnumName<ImagePullPolicy> kImagePullPolicyNames[] = {{ImagePullPolicy::kAlways, "Always"},
                                                                      {ImagePullPolicy::kIfNotPresent, "IfNotPresent"},
                                                                      {ImagePullPolicy::kNever, "Never"}};
inline const char* ImagePullPolicyName(ImagePullPolicy p) { return EnumToName(kImagePullPolicyNames, p); }

// resources.slurm: how the Slurm launcher renders its sbatch script. Every
// node and path is assumed to share the job's working directory (NFS, Lustre).
struct SlurmConfig {
  int nodes = 0;           // 0 = world_size / tasks_per_node
  int tasks_per_node = 0;  // 0 = gpus_per_node, or world_size when gpus_per_node is 0 (CPU workers)
  int gpus_per_node = 0;   // 0 = CPU workers
  GpuRequest gpu_request = GpuRequest::kGpusPerTask;
  int cpus_per_task = 0;   // 0 = Slurm's default
  std::string partition;
  std::string account;
  std::string qos;
  std::string time;        // --time (e.g. "24:00:00"); "" = the partition's default
  std::string mem;         // --mem per node (e.g. "200G"); "" = Slurm's default
  bool requeue = true;     // --requeue
  int signal_s = 120;      // --signal=B:USR1@signal_s: checkpoint before the time limit (0 = none)
  std::vector<std::string> sbatch_args;  // more sbatch options, one per #SBATCH line
  std::vector<std::string> setup;        // shell lines run before srun (module load, source venv)
  std::map<std::string, std::string> env;  // exported to the workers
  double poll_interval_s = 2;              // how often the launcher asks Slurm about its jobs
  Status Validate(int world_size) const;
  // The derived shape: nodes x tasks_per_node == world_size.
  int Nodes(int world_size) const;
  int TasksPerNode(int world_size) const;
};

// resources.kubernetes: how the Kubernetes launcher renders its Indexed Job.
// The coordinator and every pod mount the same PersistentVolumeClaim at
// mount_path, and jobs are submitted from a directory under it.
struct KubernetesConfig {
  std::string namespace_ = "default";
  std::string image;             // the worker image (required)
  ImagePullPolicy image_pull_policy = ImagePullPolicy::kIfNotPresent;
  int nodes = 0;                 // pods; 0 = world_size / procs_per_node
  int gpus_per_node = 0;         // nvidia.com/gpu per pod; 0 = CPU workers
  int procs_per_node = 0;        // workers per pod; 0 = gpus_per_node, or 1 for CPU workers
  std::string cpu;               // per pod request = limit ("" = none)
  std::string memory;            // per pod request = limit ("" = none)
  std::string pvc;               // the claim holding workdir and checkpoints (required)
  std::string mount_path = "/shardd";   // where pods (and the coordinator) mount it
  std::string service_account;   // "" = the namespace's default
  std::string coordinator;       // address pods dial ("" = the coordinator's --worker-address)
  std::map<std::string, std::string> node_selector;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> env;
  int active_deadline_s = 0;     // spec.activeDeadlineSeconds (0 = none)
  int termination_grace_s = 300; // SIGTERM → SIGKILL: time to write the checkpoint a deletion asks for
  double poll_interval_s = 2;
  Status Validate(int world_size) const;
  int Nodes(int world_size) const;
  int ProcsPerNode(int world_size) const;
};

struct ResourcesConfig {
  Launcher launcher = Launcher::kLocal;
  DeviceSpec device;
  std::string cluster;             // a cluster of configs/hardware for the planner ("" = this host)
  SlurmConfig slurm;
  KubernetesConfig kubernetes;
};

struct RestartConfig {
  int max_restarts = 5;
  double backoff_s = 1.0;
  double heartbeat_timeout_s = 10.0;
  double hang_timeout_s = 300.0;
  // Elastic restarts (docs/control-plane.md "Elastic restarts"): when an
  // attempt cannot gather all parallel.world_size ranks within elastic_wait_s,
  // the next one runs on the largest world size >= min_world_size that the
  // sharding and the batch allow (shard/spec/elastic_world.h), keeping
  // train.global_batch by more micro-batches per rank; it grows back at the
  // next committed checkpoint once the ranks return. 0 = parallel.world_size (off).
  int min_world_size = 0;
  double elastic_wait_s = 60.0;
  // How long a worker trains on without reaching its coordinator (a stopped
  // or restarting shardd) before it gives up (exit code 4); a coordinator back
  // on the same state dir within it adopts the ranks with no restart.
  double coordinator_loss_timeout_s = 60.0;
  // Bounds a typo cannot slip past: 0 would fail every worker at once, -1 or
  // NaN would restart forever or never, 1e300 s would overflow the clock.
  Status Validate() const;
};

struct ExportConfig {
  std::string hf_dir;         // write the trained model here as an HF folder ("" = don't)
  DType dtype = DType::kF32;  // fp32 | bf16 | fp16
  // peft: jobs write a PEFT adapter folder to hf_dir; merge: true writes the
  // full HF model with W + s·B·A instead.
  bool merge = false;
};

// The job's name becomes a directory name (state and checkpoint dirs, plus
// suffixes), so it is bounded well under a file system's 255 bytes.
inline constexpr size_t kMaxJobNameLength = 128;
inline constexpr int kMinPriority = -1000, kMaxPriority = 1000;

struct JobConfig {
  std::string name = "job";
  // The local host's queue (docs/scheduling.md): higher starts first, FIFO
  // within a priority; kMinPriority..kMaxPriority.
  int priority = 0;
  ModelSource model;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  ResourcesConfig resources;
  RestartConfig restart;
  HealthConfig health;  // health: straggler detection
  MoeConfig moe;        // moe: the auxiliary losses of a mixture-of-experts model
  ExportConfig export_;
  EvalConfig eval;
  PeftConfig peft;  // peft: (method none when absent: full fine-tuning)
  PreferenceConfig preference;  // preference: (method none when absent: the SFT / LM objective)
  std::string source;  // the file it came from

  // Cross-section checks (e.g. global_batch divisible by micro_batch * world).
  Status Validate() const;
};

// Where the job's checkpoints live: <checkpoint.dir>/<name>, with a relative
// checkpoint.dir taken relative to workdir ("" = the current directory). The
// one rule every reader and writer of a job's checkpoints uses.
std::string CheckpointJobDir(const JobConfig& job, const std::string& workdir = "");
// Where the job's memory-tier checkpoints live: <checkpoint.memory.dir, else
// DefaultMemoryTierRoot(): /dev/shm/shardd-<uid>>/<name>-<16 hex digits of the hash of the disk folder's
// absolute path>, so two jobs of one name in different workdirs (two e2e
// tests, two users) never share a folder. A coordinator's job passes its id
// and submission time: <root>/<job id>-<16 hex of the hash of the disk folder,
// the id and the time>, so two jobs of one name and workdir never share one
// either (issue 39 item 4). The one rule: the coordinator computes a job's
// folder with it (coordinator/jobs/job.h MemoryTierDirOf, stored with the job)
// and hands it to the workers at registration; a standalone shardd-worker run
// (no coordinator, no job id) uses it without the id.
std::string MemoryCheckpointJobDir(const JobConfig& job, const std::string& workdir = "",
                                   const std::string& job_id = "", int64_t submitted_ms = 0);

// Loads a job file, applying `--set key=value` overrides first.
StatusOr<JobConfig> LoadJobConfig(const std::string& path, const std::vector<std::string>& overrides = {});
StatusOr<JobConfig> ParseJobConfig(const std::string& yaml_text, const std::string& name,
                                   const std::vector<std::string>& overrides = {});

}  // namespace shard
