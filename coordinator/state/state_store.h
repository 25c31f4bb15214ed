// The coordinator's durable state: one SQLite file under --state-dir holding
// jobs, attempts' workers, committed checkpoints, events and per-step
// metrics. Every write is one transaction, so a coordinator killed at any
// moment restarts from a consistent picture (WAL journal, synchronous=NORMAL:
// a power cut may lose the last few writes, never corrupt the file).
//
// Records are plain structs; the job spec and progress travel as serialized
// protobuf blobs so new fields need no schema migration. The tables are
// declared once (state_schema.h): a new database is created from it, an older
// one gains the columns added since, and one that is not this schema (or is
// newer) is refused at Open, naming the table and column.
//
// Thread-safety: all methods are safe to call from any thread (one internal
// mutex around the connection).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/step_metrics.h"

struct sqlite3;

namespace shardd {

using shard::Status;
using shard::StatusOr;

struct JobRecord {
  std::string id;
  std::string name;
  int state = 0;            // shardd.v1.JobState
  int attempt = 0;
  int restarts = 0;
  std::string reason;
  std::string spec;         // serialized shardd.v1.JobSpec
  std::string progress;     // serialized shardd.v1.Progress
  std::string worker_token; // the current attempt's token
  std::string join_token;   // launcher: external — what the user's workers join with
  std::string stall;        // serialized shardd.v1.StallCause: the flight recorder's last account ("" = none)
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  int64_t seq = 0;          // the newest event's number
  std::string memory_dir;   // the memory tier's job folder ("" = none, or stored before it was recorded)
  bool memory_tier_removed = false;  // the ended job's memory folder was removed (done once)
};

struct WorkerRecord {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int pid = 0;
  std::string hostname;
  std::string state;
};

// The local scheduler's view of a job (coordinator/sched): what it needs and
// the devices and slots it holds ("" = none), in their encoded forms.
struct ResourceRecord {
  std::string job_id;
  std::string demand;
  std::string placement;
};

struct EventRecord {
  std::string job_id;
  int64_t seq = 0;
  int64_t unix_ms = 0;
  int attempt = 0;
  std::string kind;
  std::string message;
  int state = 0;
};

struct CheckpointRecord {
  std::string job_id;
  int64_t step = 0;
  int world = 0;
  int files = 0;
  int64_t bytes = 0;
  std::string path;
  int64_t committed_ms = 0;
  std::string tier = "disk";  // disk | memory (checkpoint.memory)
};

// One training step as rank 0 reported it. A loss or gradient norm that was
// NaN (a step the loss scaler skipped) reads back as NaN.
// Which metric rows LoadMetrics returns; always in step order.
struct MetricsQuery {
  int64_t after_step = 0;  // only steps > after_step (steps count from 1)
  int64_t last = 0;        // > 0: only the last `last` of those
  int64_t max_rows = 0;    // > 0: at most this many, the earliest of the selection
};

class StateStore {
 public:
  // Opens (creating if needed) <state_dir>/shardd.db. Refuses a file that
  // fails SQLite's quick_check (FAILED_PRECONDITION naming the file and the
  // backup to restore); after a good open, copies it to shardd.db.bak.
  static StatusOr<std::unique_ptr<StateStore>> Open(const std::string& state_dir);
  ~StateStore();

  Status PutJob(const JobRecord& job);
  StatusOr<std::vector<JobRecord>> LoadJobs();
  // Largest numeric suffix of job ids so far (ids are "<name>-<n>").
  StatusOr<int64_t> MaxJobNumber();

  Status PutWorker(const WorkerRecord& w);
  StatusOr<std::vector<WorkerRecord>> LoadWorkers(const std::string& job_id, int attempt);

  Status PutResources(const ResourceRecord& r);
  StatusOr<std::vector<ResourceRecord>> LoadResources();

  // Appends the event and stores the job (its seq/state) in one transaction.
  Status AppendEvent(const EventRecord& e, const JobRecord& job);
  StatusOr<std::vector<EventRecord>> LoadEvents(const std::string& job_id, int64_t after_seq);

  Status PutCheckpoint(const CheckpointRecord& c);
  StatusOr<std::vector<CheckpointRecord>> LoadCheckpoints(const std::string& job_id);
  Status DeleteCheckpoint(const std::string& job_id, int64_t step);

  Status PutMetrics(const std::string& job_id, const std::vector<shard::StepMetrics>& rows);
  StatusOr<std::vector<shard::StepMetrics>> LoadMetrics(const std::string& job_id, const MetricsQuery& q = {});

 private:
  explicit StateStore(sqlite3* db) : db_(db) {}
  Status Exec(const std::string& sql);
  // A consistent copy of the database (SQLite backup API) at `to`, atomically.
  Status Backup(const std::string& to);

  std::mutex mu_;
  sqlite3* db_;  // guarded by mu_
};

}  // namespace shardd
