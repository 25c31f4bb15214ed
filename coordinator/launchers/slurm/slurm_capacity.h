// How many of a job's ranks a Slurm partition could place now, from
// `scontrol show nodes -o` (each node's state, CPUs and GPUs configured and
// allocated) and, for a job that runs, `scontrol show job -o` of its own
// allocation (released before a resized attempt starts, so counted as free).
// SlurmLauncher::Capacity asks; this file only reads the text and counts.
//
// Counted: CPUs (cpus_per_task, else 1 per task) and GPUs (gres/gpu) on nodes
// of the partition that take jobs (IDLE, MIXED, ALLOCATED; not drained, down,
// failing, in maintenance, reserved, powered down or not responding). Not
// counted: memory, licenses, reservations and other users' priority, so the
// count is what the nodes hold free, not a promise that Slurm starts a job
// of that size next.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardd {

struct SlurmNode {
  std::string name;
  std::string state;                   // State=: IDLE, MIXED, IDLE+DRAIN, DOWN*, ...
  std::vector<std::string> partitions; // Partitions=
  int cpus = 0, cpus_alloc = 0;        // CPUEfctv (else CPUTot), CPUAlloc
  int gpus = 0, gpus_alloc = 0;        // gres/gpu in CfgTRES, AllocTRES
};

// Parses `scontrol show nodes -o` (one node per line).
shard::StatusOr<std::vector<SlurmNode>> ParseScontrolNodes(const std::string& text);
// Whether the node takes new jobs now.
bool SlurmNodeUsable(const std::string& state);
// "n[01-03,7],gpu5" → n01 n02 n03 n7 gpu5.
std::vector<std::string> ExpandHostList(const std::string& list);

// What a job holds, per node, from `scontrol show job -o` (empty unless RUNNING).
struct SlurmHeld {
  int cpus = 0, gpus = 0;
};
std::map<std::string, SlurmHeld> ParseHeldByJob(const std::string& scontrol_job_text);
// The partition marked Default=YES in `scontrol show partition -o` ("" when none).
std::string DefaultPartition(const std::string& scontrol_partition_text);

// The job's shape: `unit` tasks per node and any number of nodes, or (unit
// 0) all tasks on one node.
struct SlurmTaskShape {
  int unit = 0;
  int cpus_per_task = 1;
  int gpus_per_task = 0;
  std::string partition;  // "" = every node
};
// Ranks placeable on `nodes` (with `held` counted as free), `max` at most.
int PlaceableRanks(const std::vector<SlurmNode>& nodes, const std::map<std::string, SlurmHeld>& held,
                   const SlurmTaskShape& shape, int max);

}  // namespace shardd
