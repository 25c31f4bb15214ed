#include "shard/ckpt/manifest.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "shard/common/checksum.h"
#include "shard/common/json_int.h"
#include "shard/spec/loss_scale.h"
#include "shard/spec/shard_layout.h"

namespace shard {
namespace {

// Bounds far above any real run and far below what would overflow the
// arithmetic done with these fields (steps × batch, offsets in bytes).
constexpr int64_t kMaxSteps = int64_t{1} << 40;
constexpr int64_t kMaxCount = int64_t{1} << 53;  // samples, tokens, elements
constexpr int kMaxWorld = 1 << 20;

Status OutOfRangeField(const std::string& source, const std::string& field, const std::string& value,
                       const std::string& want) {
  return DataLoss(source + ": " + field + " " + value + " is outside " + want + " (a damaged or hand-edited manifest)");
}

#define SHARD_MANIFEST_RANGE(field, expr, lo, hi)                                                          \
  if ((expr) < (lo) || (expr) > (hi))                                                                     \
    return OutOfRangeField(source, field, std::to_string(expr), "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]")

// Every field a reader trusts is range-checked here, so a bad manifest is a
// bad step (skipped, with fallback) rather than a crash later.
Status CheckRanges(const Manifest& m, const std::string& source, bool allow_partial) {
  SHARD_MANIFEST_RANGE("step", m.step, 0, kMaxSteps);
  SHARD_MANIFEST_RANGE("world", m.world, 1, kMaxWorld);
  SHARD_MANIFEST_RANGE("shard_count", m.shard_count, 1, m.world);
  if (!allow_partial && static_cast<int>(m.files.size()) != m.shard_count)
    return DataLoss(source + ": manifest lists " + std::to_string(m.files.size()) + " files for " +
                    std::to_string(m.shard_count) + " shards");
  if (auto strategy = ParseEnum(kShardStrategyNames, m.strategy); !strategy.ok())
    return DataLoss(source + ": strategy " + strategy.status().message());
  if (m.units.empty()) return DataLoss(source + ": the manifest lists no units");
  for (const auto& [name, numel] : m.units) {
    if (name.empty()) return DataLoss(source + ": a unit has an empty name");
    SHARD_MANIFEST_RANGE("unit " + name + " numel", numel, 0, kMaxCount);
  }
  for (const ManifestFile& f : m.files) {
    SHARD_MANIFEST_RANGE("file " + f.name + " shard_rank", f.shard_rank, 0, m.shard_count - 1);
    if (f.size > static_cast<uint64_t>(kMaxCount))
      return OutOfRangeField(source, "file " + f.name + " size", std::to_string(f.size), "[0, 2^53]");
  }
  SHARD_MANIFEST_RANGE("data.samples_seen", m.samples_seen, 0, kMaxCount);
  SHARD_MANIFEST_RANGE("data.global_batch", m.global_batch, 1, kMaxCount);
  SHARD_MANIFEST_RANGE("schedule.total_steps", m.total_steps, 0, kMaxSteps);
  SHARD_MANIFEST_RANGE("schedule.optimizer_steps", m.optimizer_steps, 0, m.step);
  SHARD_MANIFEST_RANGE("tokens_seen", m.tokens_seen, 0, kMaxCount);
  if (!std::isfinite(m.loss_scale) || m.loss_scale <= 0 || m.loss_scale > 1e30)
    return OutOfRangeField(source, "loss_scale", std::to_string(m.loss_scale), "(0, 1e30]");
  if (m.loss_scale_mode != LossScaleModeName(LossScaleMode::kOff) &&
      m.loss_scale_mode != LossScaleModeName(LossScaleMode::kStatic) &&
      m.loss_scale_mode != LossScaleModeName(LossScaleMode::kDynamic))
    return DataLoss(source + ": loss_scaler.mode '" + m.loss_scale_mode + "' is not off, static or dynamic");
  SHARD_MANIFEST_RANGE("loss_scaler.good_steps", m.loss_scale_good_steps, 0, kMaxSteps);
  return OkStatus();
}

#undef SHARD_MANIFEST_RANGE

}  // namespace

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string Manifest::ToJson() const {
  nlohmann::ordered_json j;
  j["format_version"] = kManifestVersion;
  j["job"] = job;
  j["step"] = step;
  j["world"] = world;
  j["strategy"] = strategy;
  j["shard_count"] = shard_count;
  j["model_hash"] = HashToHex(model_hash);
  j["model_config"] = nlohmann::json::parse(model_config.empty() ? "{}" : model_config);
  if (!source_config.empty()) {  // checked by the trainer (LlamaConfigFromHfJson); a non-object is left out
    nlohmann::ordered_json src = nlohmann::ordered_json::parse(source_config, nullptr, false);
    if (src.is_object()) j["source_config"] = std::move(src);
  }
  j["units"] = nlohmann::json::array();
  for (const auto& [name, numel] : units) j["units"].push_back({{"name", name}, {"numel", numel}});
  j["files"] = nlohmann::json::array();
  for (const auto& f : files)
    j["files"].push_back({{"name", f.name}, {"shard_rank", f.shard_rank}, {"size", f.size}, {"xxh64", HashToHex(f.xxh64)}});
  j["data"] = {{"samples_seen", samples_seen}, {"seed", seed}, {"shuffle", shuffle}, {"global_batch", global_batch}};
  if (!data_fingerprint.empty()) j["data"]["fingerprint"] = data_fingerprint;
  j["schedule"] = {{"step", step}, {"total_steps", total_steps}, {"optimizer_steps", optimizer_steps}};
  j["tokens_seen"] = tokens_seen;
  j["loss_scale"] = loss_scale;
  j["loss_scaler"] = {{"mode", loss_scale_mode}, {"good_steps", loss_scale_good_steps}};
  if (!run_fingerprint.empty()) j["run"] = {{"fingerprint", run_fingerprint}, {"keys", run_keys}};
  if (!reference.empty()) j["reference"] = reference;
  return j.dump(2) + "\n";
}

StatusOr<Manifest> Manifest::FromJson(const std::string& text, const std::string& source, bool allow_partial) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return DataLoss(source + ": manifest is not valid JSON");
  Manifest m;
  try {
    int version = JsonInt<int>(j.at("format_version"), "format_version");
    if (version != kManifestVersion)
      return DataLoss(source + ": manifest format version " + std::to_string(version) + " is not " +
                      std::to_string(kManifestVersion));
    m.job = j.at("job").get<std::string>();
    m.step = JsonInt<int64_t>(j.at("step"), "step");
    m.world = JsonInt<int>(j.at("world"), "world");
    m.strategy = j.at("strategy").get<std::string>();
    m.shard_count = JsonInt<int>(j.at("shard_count"), "shard_count");
    auto hash = HashFromHex(j.at("model_hash").get<std::string>());
    if (!hash.ok()) return hash.status().WithContext(source + ": model_hash");
    m.model_hash = *hash;
    if (!j.at("model_config").is_object()) return DataLoss(source + ": model_config is not a JSON object");
    m.model_config = j.at("model_config").dump();
    if (j.contains("source_config")) {
      if (!j.at("source_config").is_object()) return DataLoss(source + ": source_config is not a JSON object");
      m.source_config = j.at("source_config").dump();
    }
    for (const auto& u : j.at("units"))
      m.units.emplace_back(u.at("name").get<std::string>(), JsonInt<int64_t>(u.at("numel"), "numel"));
    for (const auto& f : j.at("files")) {
      ManifestFile mf;
      mf.name = f.at("name").get<std::string>();
      if (mf.name.find('/') != std::string::npos || mf.name == ".." || mf.name.empty())
        return DataLoss(source + ": file name '" + mf.name + "' is not a plain file name");
      mf.shard_rank = JsonInt<int>(f.at("shard_rank"), "shard_rank");
      mf.size = JsonInt<uint64_t>(f.at("size"), "size");
      auto h = HashFromHex(f.at("xxh64").get<std::string>());
      if (!h.ok()) return h.status().WithContext(source + ": file " + mf.name);
      mf.xxh64 = *h;
      m.files.push_back(std::move(mf));
    }
    const auto& d = j.at("data");
    m.samples_seen = JsonInt<int64_t>(d.at("samples_seen"), "samples_seen");
    m.seed = JsonInt<uint64_t>(d.at("seed"), "seed");
    m.shuffle = d.at("shuffle").get<bool>();
    m.global_batch = JsonInt<int64_t>(d.at("global_batch"), "global_batch");
    m.data_fingerprint = d.value("fingerprint", std::string());
    const auto& sched = j.at("schedule");
    m.total_steps = JsonInt<int64_t>(sched.at("total_steps"), "total_steps");
    // Fields added after format version 1 shipped: optional, with the values
    // an older writer implied (no scaler, every step applied).
    m.optimizer_steps = sched.contains("optimizer_steps") ? JsonInt<int64_t>(sched.at("optimizer_steps"), "optimizer_steps") : m.step;
    m.tokens_seen = JsonInt<int64_t>(j.at("tokens_seen"), "tokens_seen");
    m.loss_scale = j.at("loss_scale").get<double>();
    if (j.contains("loss_scaler")) {
      const auto& ls = j.at("loss_scaler");
      m.loss_scale_mode = ls.at("mode").get<std::string>();
      m.loss_scale_good_steps = JsonInt<int64_t>(ls.at("good_steps"), "good_steps");
    }
    if (j.contains("run")) {
      const auto& run = j.at("run");
      m.run_fingerprint = run.at("fingerprint").get<std::string>();
      if (!HashFromHex(m.run_fingerprint).ok())
        return DataLoss(source + ": run.fingerprint '" + m.run_fingerprint + "' is not 16 hex digits");
      m.run_keys = run.at("keys").get<std::map<std::string, std::string>>();
    }
    m.reference = j.value("reference", std::string());
    if (!m.reference.empty() && !HashFromHex(m.reference).ok())
      return DataLoss(source + ": reference '" + m.reference + "' is not 16 hex digits");
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(source + ": malformed manifest: " + e.what());
  }
  RETURN_IF_ERROR(CheckRanges(m, source, allow_partial));
  return m;
}

}  // namespace shard
