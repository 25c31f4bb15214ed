// Context parallelism's price (parallel.context_parallel C, docs/context-parallel.md):
// each rank holds S/C tokens of every sequence (head-tail chunks), so its
// activations, logits and scratch are those of S/C tokens; per layer the CP
// group all-gathers K and V of the whole sequence for the attention, forward
// and again in backward, and reduce-scatters their gradient:
//
//   memory  CpAttention's grow-only fp32 buffers (shard/model/cp_attention.cc):
//           three of one layer's K/V at S tokens (gathered, reordered, the
//           summed dK/dV), two at S/C (this rank's K/V and dK/dV), four of a
//           chunk's queries/outputs at S/(2C) tokens; a GPU's two-byte compute
//           adds its rounded copies of the K/V and a chunk's queries
//   time    per micro-batch and layer: two all-gathers of K/V and one
//           reduce-scatter of dK/dV, (C-1)/C of micro_batch x S x 2·kv·hd x 4 B each,
//           over the CP group's collective bandwidth; not hidden (the
//           attention waits for its keys)
//
// FSDP still shards over every rank (the C ranks of a group share the
// parameter shards), so shards, gathers and checkpoints do not change with C.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "shard/plan/hardware.h"
#include "shard/plan/workload.h"

namespace shard::plan {

// Bytes of CpAttention's buffers (above); 0 at C = 1.
int64_t CpExchangeBytes(const Workload& w);
// Seconds per micro-batch of the K/V exchange (above); 0 at C = 1.
double CpExchangeSeconds(const Workload& w, const ClusterSpec& cluster);
// The C values a job could use: powers of two above its own, dividing the
// world, with seq_len a multiple of 2C (CheckContextParallel).
std::vector<int> CpCandidates(const Workload& w);

}  // namespace shard::plan
