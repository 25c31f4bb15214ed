// TensorBoard event files (events.out.tfevents.<unix time>.<host>) with
// scalar summaries, written without TensorFlow or protobuf: the Event and
// Summary messages are hand-encoded in the protobuf wire format and framed as
// TFRecords (length, masked CRC32C of the length, data, masked CRC32C of the
// data). Rank 0's trainer writes one file per attempt under the job's run
// directory, so `tensorboard --logdir <checkpoint.dir>` shows every job.
//
// Thread-safety: one thread uses a writer.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/step_metrics.h"

namespace shard {

using Scalars = std::vector<std::pair<std::string, float>>;

// The TFRecord mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskedCrc32c(std::string_view data);
// One record: uint64 length (little-endian), masked CRC of those 8 bytes,
// the data, masked CRC of the data.
std::string EncodeTfRecord(std::string_view data);
// Event{wall_time=1, step=2, file_version=3} — the first record of a file.
std::string EncodeFileVersionEvent(double wall_time);
// Event{wall_time=1, step=2, summary=5{value=1{tag=1, simple_value=2}...}}.
std::string EncodeScalarEvent(double wall_time, int64_t step, const Scalars& scalars);

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and opens a new event file in it.
  static StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir, double flush_every_s = 2.0);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one event; writes buffered events out when flush_every_s has
  // passed since the last write-out (so a reader lags by at most that).
  Status WriteScalars(int64_t step, const Scalars& scalars);
  Status Flush();
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter() = default;
  std::string path_;
  int fd_ = -1;
  double flush_every_s_ = 2.0;
  std::string buffer_;
  std::chrono::steady_clock::time_point last_flush_;
};

// The trainer's run directory's event file: opened, or null with a warning
// (event files are a convenience, never worth the training).
std::unique_ptr<TensorBoardWriter> OpenRunTensorBoard(const std::string& dir);
// One step's scalars (loss, lr, grad_norm, ...; TRL's tags for preference
// metrics and eval); a write that fails warns and closes the writer (tb reset).
void WriteStepScalars(std::unique_ptr<TensorBoardWriter>& tb, const StepMetrics& m);

}  // namespace shard
