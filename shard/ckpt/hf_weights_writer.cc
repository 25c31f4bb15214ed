// HfWeightsWriter: splits declared tensors into HF-named safetensors files and
// writes the index last.
#include <exception>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "shard/ckpt/hf_weights.h"
#include "shard/common/file_util.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

Status RemoveIfPresent(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);  // false without error when absent
  if (ec) return DataLoss("cannot remove stale " + p.string() + ": " + ec.message());
  return OkStatus();
}

}  // namespace

StatusOr<HfWeightsWriter> HfWeightsWriter::Create(const std::string& dir, std::vector<TensorDecl> tensors,
                                                  DType file_dtype, int64_t max_file_bytes) {
  if (max_file_bytes <= 0) {
    return InvalidArgument(dir + ": max_file_bytes must be positive, got " + std::to_string(max_file_bytes));
  }
  HfWeightsWriter w;
  w.dir_ = dir;
  w.dtype_ = file_dtype;

  // Every declaration is checked here, before the old entry files are removed,
  // so a bad name cannot surface half-way through an export when a later shard
  // opens. Uniqueness is across files: the index maps each name to one file.
  std::set<std::string> seen;
  std::vector<uint64_t> bytes;
  for (const TensorDecl& d : tensors) {
    if (d.name.empty() || d.name == "__metadata__") {
      return InvalidArgument(dir + ": invalid tensor name '" + d.name + "'");
    }
    if (!seen.insert(d.name).second) {
      return InvalidArgument(dir + ": tensor '" + d.name + "' is declared twice");
    }
    uint64_t n = DTypeSize(file_dtype);
    for (int64_t dim : d.shape) {
      if (dim < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(dim), &n)) {
        return InvalidArgument(dir + ": tensor '" + d.name + "' has invalid shape " + ShapeToString(d.shape));
      }
    }
    bytes.push_back(n);
    w.total_bytes_ += n;
  }
  w.shard_of_ = PlanHfShards(bytes, static_cast<uint64_t>(max_file_bytes));
  w.num_shards_ = w.shard_of_.empty() ? 1 : w.shard_of_.back() + 1;
  w.decls_ = std::move(tensors);

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return NotFound("cannot create HF weight folder " + dir + ": " + ec.message());
  RETURN_IF_ERROR(RemoveIfPresent(fs::path(dir) / kHfIndexFileName));
  RETURN_IF_ERROR(RemoveIfPresent(fs::path(dir) / kHfSingleFileName));
  RETURN_IF_ERROR(FsyncDir(dir));
  RETURN_IF_ERROR(w.OpenShard(0));
  return w;
}

std::vector<std::string> HfWeightsWriter::FileNames() const {
  std::vector<std::string> names;
  for (int i = 0; i < num_shards_; ++i) names.push_back(HfShardFileName(i, num_shards_));
  return names;
}

Status HfWeightsWriter::OpenShard(int shard) {
  std::vector<TensorDecl> decls;
  for (size_t i = 0; i < decls_.size(); ++i) {
    if (shard_of_[i] == shard) decls.push_back(decls_[i]);
  }
  const std::string path = (fs::path(dir_) / HfShardFileName(shard, num_shards_)).string();
  ASSIGN_OR_RETURN(SafetensorsWriter sw,
                   SafetensorsWriter::Create(path, std::move(decls), dtype_, {{"format", "pt"}}));
  current_.emplace(std::move(sw));
  open_shard_ = shard;
  return OkStatus();
}

Status HfWeightsWriter::Write(const std::string& name, const float* data) {
  if (finished_) return FailedPrecondition(dir_ + ": Write('" + name + "') after Finish()");
  if (!current_) return FailedPrecondition(dir_ + ": Write('" + name + "') on a writer that already failed");
  if (next_ >= decls_.size()) {
    return FailedPrecondition(dir_ + ": Write('" + name + "') but all " + std::to_string(decls_.size()) +
                              " declared tensors are already written");
  }
  if (name != decls_[next_].name) {
    return FailedPrecondition(dir_ + ": Write('" + name + "') out of order; the next declared tensor is '" +
                              decls_[next_].name + "'");
  }
  if (shard_of_[next_] != open_shard_) {
    Status st = current_->Finish();
    if (!st.ok()) {
      current_.reset();
      return st;
    }
    current_.reset();
    RETURN_IF_ERROR(OpenShard(shard_of_[next_]));
  }
  Status st = current_->Write(name, data);
  if (!st.ok()) {
    current_.reset();  // removes the temp file
    return st;
  }
  ++next_;
  return OkStatus();
}

Status HfWeightsWriter::Finish() {
  if (finished_) return FailedPrecondition(dir_ + ": Finish() called twice");
  if (!current_) return FailedPrecondition(dir_ + ": Finish() on a writer that already failed");
  if (next_ != decls_.size()) {
    return FailedPrecondition(dir_ + ": Finish() with " + std::to_string(decls_.size() - next_) +
                              " declared tensors unwritten, starting at '" + decls_[next_].name + "'");
  }
  Status st = current_->Finish();
  current_.reset();
  RETURN_IF_ERROR(st);
  if (num_shards_ > 1) {
    // The index is the commit point of a sharded folder: written only once every
    // shard is durable, in transformers' layout (sorted keys, 2-space indent).
    nlohmann::json index;
    index["metadata"]["total_size"] = total_bytes_;
    index["weight_map"] = nlohmann::json::object();
    for (size_t i = 0; i < decls_.size(); ++i) {
      index["weight_map"][decls_[i].name] = HfShardFileName(shard_of_[i], num_shards_);
    }
    std::string text;
    try {
      text = index.dump(2) + "\n";
    } catch (const std::exception& e) {
      return InvalidArgument(dir_ + ": tensor names must be valid UTF-8: " + e.what());
    }
    RETURN_IF_ERROR(WriteFileAtomic((fs::path(dir_) / kHfIndexFileName).string(), text));
  }
  finished_ = true;
  return OkStatus();
}

}  // namespace shard
