#include "shard/train/lora_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/hf_weights.h"
#include "shard/ckpt/safetensors.h"
#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/common/json_int.h"

namespace shard {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "lora_step_";
constexpr const char* kAdapters = "adapters.safetensors";
constexpr const char* kState = "state.json";

std::string LoraStepDirName(int64_t step) { return kPrefix + std::to_string(step); }

// lora_step_<N> → N, or -1.
int64_t StepOf(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const std::string n = name.substr(std::string(kPrefix).size());
  if (n.empty() || n.size() > 18 || n.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(n);
}

// This run's step folders: a link out of job_dir (another run's step) is none
// of them, so it is never resumed from nor pruned (shard/ckpt/catalog.h).
std::vector<int64_t> Steps(const std::string& job_dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  const fs::path root = fs::canonical(job_dir, ec);
  if (ec) return steps;
  for (const auto& e : fs::directory_iterator(job_dir, ec)) {
    const int64_t s = StepOf(e.path().filename().string());
    std::error_code se;
    if (s >= 0 && IsOwnStepFolder(root, e.path()) && fs::exists(e.path() / kState, se)) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<TensorDecl> Decls(int64_t n) {
  return {{"params", {n}}, {"adam_m", {n}}, {"adam_v", {n}}};
}

}  // namespace

StatusOr<std::string> BaseModelHash(const JobConfig& job, uint64_t shape_hash) {
  std::string text;
  if (job.model.from_hf.empty()) {
    text = "preset " + job.model.preset + " shape " + HashToHex(shape_hash) + " seed " + std::to_string(job.train.seed);
  } else {
    ASSIGN_OR_RETURN(std::string cfg, ReadFileToString((fs::path(job.model.from_hf) / "config.json").string()));
    ASSIGN_OR_RETURN(HfWeights w, HfWeights::Open(job.model.from_hf));
    text = cfg;
    for (const std::string& name : w.TensorNames()) {
      const TensorInfo* t = w.Find(name);
      text += "\n" + name + " " + t->dtype_name + " " + ShapeToString(t->shape) + " " + std::to_string(t->data_begin) +
              " " + std::to_string(t->data_end);
    }
  }
  return HashToHex(Xxh64(text.data(), text.size()));
}

Status SaveLoraCheckpoint(const std::string& job_dir, const LoraCheckpointState& st, const LoraAdapters& a,
                          int keep_last) {
  if (!a.backend()->holds_data()) {
    // The memory simulator: the host copies of params, m and v below, from
    // the backend so they are counted (and freed after, as here); nothing is
    // read, written or committed.
    HostBuffer copies[3];
    for (HostBuffer& b : copies) {
      ASSIGN_OR_RETURN(b, HostBuffer::Create(a.backend(), a.numel()));
    }
    return OkStatus();
  }
  const fs::path final_dir = fs::path(job_dir) / LoraStepDirName(st.step);
  const fs::path tmp = fs::path(job_dir) / ("." + LoraStepDirName(st.step) + ".tmp");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return InvalidArgument("LoRA checkpoint: cannot create " + tmp.string() + ": " + ec.message());
  const int64_t n = a.numel();
  std::vector<float> p(n), m(n), v(n);
  a.ReadState(p.data(), m.data(), v.data());
  ASSIGN_OR_RETURN(SafetensorsWriter w, SafetensorsWriter::Create((tmp / kAdapters).string(), Decls(n), DType::kF32));
  RETURN_IF_ERROR(w.Write("params", p.data()));
  RETURN_IF_ERROR(w.Write("adam_m", m.data()));
  RETURN_IF_ERROR(w.Write("adam_v", v.data()));
  RETURN_IF_ERROR(w.Finish());
  nlohmann::json j = {{"format", "shardd-lora-checkpoint"},
                      {"version", 1},
                      {"step", st.step},
                      {"optimizer_steps", st.optimizer_steps},
                      {"samples_seen", st.samples_seen},
                      {"tokens_seen", st.tokens_seen},
                      {"loss_scale", st.loss_scale},
                      {"loss_scale_good_steps", st.loss_scale_good_steps},
                      {"run_fingerprint", st.run_fingerprint},
                      {"base_model", st.base_model},
                      {"base_hash", st.base_hash},
                      {"adapter_numel", n}};
  RETURN_IF_ERROR(WriteFileAtomic((tmp / kState).string(), j.dump(2) + "\n"));
  RETURN_IF_ERROR(FsyncDir(tmp.string()));
  fs::remove_all(final_dir, ec);  // a same-numbered step of an earlier attempt
  fs::rename(tmp, final_dir, ec);
  if (ec) return InvalidArgument("LoRA checkpoint: cannot rename into " + final_dir.string() + ": " + ec.message());
  RETURN_IF_ERROR(FsyncDir(job_dir));
  std::vector<int64_t> steps = Steps(job_dir);
  // remove_all removes a link (to a folder inside job_dir) as a link, never what it leads to.
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep_last, 1)) < steps.size(); ++i)
    fs::remove_all(fs::path(job_dir) / LoraStepDirName(steps[i]), ec);
  return OkStatus();
}

StatusOr<std::string> FindLoraCheckpoint(const std::string& job_dir, const std::string& run_fingerprint) {
  std::vector<int64_t> steps = Steps(job_dir);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const fs::path dir = fs::path(job_dir) / LoraStepDirName(*it);
    auto text = ReadFileToString((dir / kState).string());
    if (!text.ok()) continue;
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded() || j.value("run_fingerprint", std::string()) != run_fingerprint) continue;
    return dir.string();
  }
  return std::string();
}

Status LoadLoraCheckpoint(const std::string& step_dir, const std::string& base_hash, LoraAdapters* a,
                          LoraCheckpointState* st) {
  const std::string state_path = (fs::path(step_dir) / kState).string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(state_path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || j.value("format", std::string()) != "shardd-lora-checkpoint")
    return InvalidArgument(state_path + ": not a shardd LoRA checkpoint");
  try {
    st->step = JsonInt<int64_t>(j.at("step"), "step");
    st->optimizer_steps = JsonInt<int64_t>(j.at("optimizer_steps"), "optimizer_steps");
    st->samples_seen = JsonInt<int64_t>(j.at("samples_seen"), "samples_seen");
    st->tokens_seen = JsonInt<int64_t>(j.at("tokens_seen"), "tokens_seen");
    st->loss_scale = j.at("loss_scale").get<double>();
    st->loss_scale_good_steps = JsonInt<int64_t>(j.at("loss_scale_good_steps"), "loss_scale_good_steps");
    st->run_fingerprint = j.at("run_fingerprint").get<std::string>();
    st->base_model = j.at("base_model").get<std::string>();
    st->base_hash = j.at("base_hash").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(state_path + ": " + e.what());
  }
  if (st->base_hash != base_hash)
    return FailedPrecondition(step_dir + " holds adapters trained on another base model (" + st->base_model +
                              ", content hash " + st->base_hash + "; this job's base hashes to " + base_hash +
                              "): resuming would apply them to weights they were not trained for");
  const std::string w_path = (fs::path(step_dir) / kAdapters).string();
  ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(w_path));
  const int64_t n = a->numel();
  std::vector<float> p(n), m(n), v(n);
  RETURN_IF_ERROR(f.ReadF32("params", {n}, p.data()).WithContext(w_path + " (other adapter shapes than this job's?)"));
  RETURN_IF_ERROR(f.ReadF32("adam_m", {n}, m.data()).WithContext(w_path));
  RETURN_IF_ERROR(f.ReadF32("adam_v", {n}, v.data()).WithContext(w_path));
  a->WriteState(p.data(), m.data(), v.data());
  return OkStatus();
}

}  // namespace shard
