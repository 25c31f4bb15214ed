// HfWeights: resolves a Hugging Face weight folder (single file or index + shards).
#include "shard/ckpt/hf_weights.h"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "shard/common/file_util.h"
#include "shard/common/logging.h"

namespace shard {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool IsRegularFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The index names files relative to the folder; anything that could point
// outside it is refused rather than followed.
bool IsSafeRelativeName(const std::string& name) {
  if (name.empty()) return false;
  fs::path p(name);
  if (p.is_absolute()) return false;
  for (const fs::path& part : p) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

std::string HfShardFileName(int index, int count) {
  if (count == 1) return kHfSingleFileName;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", index + 1, count);
  return buf;
}

std::vector<int> PlanHfShards(const std::vector<uint64_t>& tensor_bytes, uint64_t max_file_bytes) {
  std::vector<int> shard_of(tensor_bytes.size());
  int shard = 0;
  uint64_t used = 0;  // tensor bytes in the current file
  bool has_tensors = false;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    const uint64_t b = tensor_bytes[i];
    // After an oversized tensor used > max_file_bytes, so nothing non-empty fits
    // beside it. Written without used + b, which could overflow.
    const bool fits = b == 0 || (used <= max_file_bytes && b <= max_file_bytes - used);
    if (has_tensors && !fits) {
      ++shard;
      used = 0;
    }
    shard_of[i] = shard;
    has_tensors = true;
    used += b;  // cannot overflow: b fit beside `used`, or used was 0
  }
  return shard_of;
}

StatusOr<HfWeights> HfWeights::Open(const std::string& dir) {
  HfWeights w;
  w.dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return NotFound("HF weight folder " + dir + " does not exist or is not a directory");
  }
  const fs::path index_path = fs::path(dir) / kHfIndexFileName;
  const fs::path single_path = fs::path(dir) / kHfSingleFileName;

  // transformers' from_pretrained looks for model.safetensors before the
  // index, so with both present it loads the single file: so does shardd.
  if (IsRegularFile(single_path)) {
    if (IsRegularFile(index_path))
      LOG_WARN("{} holds both {} and {}: loading {} and ignoring the index, as transformers does", dir,
               kHfSingleFileName, kHfIndexFileName, kHfSingleFileName);
    ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single_path.string()));
    for (const TensorInfo& t : f.tensors()) w.tensor_file_[t.name] = 0;
    w.files_.push_back(std::move(f));
    return w;
  }
  if (!IsRegularFile(index_path))
    return NotFound(dir + ": found neither " + kHfIndexFileName + " nor " + kHfSingleFileName);

  const std::string ip = index_path.string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(ip));
  std::map<std::string, std::string> weight_map;  // tensor -> file name
  try {
    json index;
    try {
      index = json::parse(text);
    } catch (const json::parse_error& e) {
      return DataLoss(ip + ": not valid JSON: " + e.what());
    }
    if (!index.is_object()) return DataLoss(ip + ": not a JSON object");
    auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) return DataLoss(ip + ": missing or non-object \"weight_map\"");
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        return DataLoss(ip + ": weight_map entry '" + it.key() + "' is not a string");
      weight_map[it.key()] = it.value().get<std::string>();
    }
  } catch (const std::exception& e) {
    return DataLoss(ip + ": malformed index: " + e.what());
  }
  if (weight_map.empty()) return DataLoss(ip + ": weight_map is empty");

  std::map<std::string, size_t> file_index;  // file name -> index into files_
  for (const auto& [tensor, file] : weight_map) {
    auto it = file_index.find(file);
    if (it == file_index.end()) {
      if (!IsSafeRelativeName(file)) {
        return InvalidArgument(ip + ": weight_map maps '" + tensor + "' to '" + file +
                               "', which is not a file name inside the folder");
      }
      const fs::path fp = fs::path(dir) / file;
      if (!IsRegularFile(fp)) {
        return NotFound(ip + ": weight_map maps '" + tensor + "' to " + fp.string() +
                        ", which does not exist (incomplete download?)");
      }
      StatusOr<SafetensorsFile> f = SafetensorsFile::Open(fp.string());
      if (!f.ok()) return f.status().WithContext(ip + " references a bad file");
      it = file_index.emplace(file, w.files_.size()).first;
      w.files_.push_back(std::move(f).value());
    }
    const SafetensorsFile& f = w.files_[it->second];
    if (!f.Find(tensor)) {
      return DataLoss(ip + ": weight_map maps '" + tensor + "' to " + f.path() +
                      ", which has no such tensor");
    }
    w.tensor_file_[tensor] = it->second;
  }
  return w;
}

std::vector<std::string> HfWeights::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensor_file_.size());
  for (const auto& [name, file] : tensor_file_) names.push_back(name);
  return names;
}

const TensorInfo* HfWeights::Find(const std::string& name) const {
  auto it = tensor_file_.find(name);
  return it == tensor_file_.end() ? nullptr : files_[it->second].Find(name);
}

const std::string* HfWeights::FileOf(const std::string& name) const {
  auto it = tensor_file_.find(name);
  return it == tensor_file_.end() ? nullptr : &files_[it->second].path();
}

StatusOr<const SafetensorsFile*> HfWeights::FileFor(const std::string& name) const {
  auto it = tensor_file_.find(name);
  if (it == tensor_file_.end()) return NotFound(dir_ + ": no tensor '" + name + "' in the HF weights");
  return &files_[it->second];
}

Status HfWeights::ReadF32(const std::string& name, const std::vector<int64_t>& expected_shape,
                          float* dst) const {
  ASSIGN_OR_RETURN(const SafetensorsFile* f, FileFor(name));
  return f->ReadF32(name, expected_shape, dst);
}

Status HfWeights::ReadF32Range(const std::string& name, int64_t elem_begin, int64_t elem_count,
                               float* dst) const {
  ASSIGN_OR_RETURN(const SafetensorsFile* f, FileFor(name));
  return f->ReadF32Range(name, elem_begin, elem_count, dst);
}

}  // namespace shard
