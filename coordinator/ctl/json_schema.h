// The one JSON shape of each object shardctl prints under --json
// (docs/cli.md): every field always present (zero values too), 64-bit
// integers as JSON numbers, states by name. Not protobuf's JSON mapping,
// which drops zero values and quotes int64s.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "shardd/v1/coordinator.pb.h"

namespace shardctl {

// status, submit --json, cancel --json, and each element of list's "jobs".
nlohmann::json JobObject(const shardd::v1::JobStatus& js);

// One step of `checkpoints JOB` and `checkpoints DIR` alike.
struct CheckpointRow {
  int64_t step = 0;
  std::string state;    // valid | invalid (committed, fails its proof) | partial (no COMMITTED)
  std::string path;
  int world = 0;        // 0: unknown (no readable manifest)
  int files = 0;        // shard files the manifest lists (0: unknown)
  int64_t bytes = 0;
  int64_t committed_unix_ms = 0;  // 0: unknown
  std::string problem;  // "" when valid
  std::string tier = "disk";  // disk | memory (checkpoint.memory)
};
nlohmann::json CheckpointObject(const CheckpointRow& c);
CheckpointRow FromCheckpointInfo(const shardd::v1::CheckpointInfo& c);

// list --json: {"jobs": [job...]}; checkpoints JOB --json: {"checkpoints": [...]}.
nlohmann::json JobListObject(const shardd::v1::ListJobsResponse& resp);
nlohmann::json CheckpointListObject(const shardd::v1::ListCheckpointsResponse& resp);

// One event of `watch --json` (one object a line): {"seq", "job_id",
// "unix_ms", "time" (UTC, ISO 8601 with ms), "attempt", "kind", "state",
// "message"}.
nlohmann::json EventObject(const shardd::v1::JobEvent& ev);

// One line of JSON (invalid UTF-8 in a message replaced, never thrown on).
std::string Dump(const nlohmann::json& j);

}  // namespace shardctl
