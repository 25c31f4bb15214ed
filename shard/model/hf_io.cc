#include "shard/model/hf_io.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "shard/ckpt/hf_weights.h"
#include "shard/common/file_util.h"
#include "shard/common/finite_scan.h"
#include "shard/spec/hf_config_export.h"

namespace shard {
namespace {

bool Ignorable(const std::string& name, const LlamaConfig& c) {
  auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("rotary_emb.inv_freq")) return true;
  return c.tie_word_embeddings && name == "lm_head.weight";
}

}  // namespace

StatusOr<HfWeights> OpenHfWeightsFor(const std::string& dir, const LlamaConfig& config, const ParamLayout& layout) {
  ASSIGN_OR_RETURN(HfWeights weights, HfWeights::Open(dir));
  std::set<std::string> expected;
  for (const auto& u : layout.units)
    for (const auto& t : u.tensors) expected.insert(t.hf_name);
  for (const auto& name : weights.TensorNames()) {
    if (!expected.count(name) && !Ignorable(name, config))
      return InvalidArgument(dir + ": tensor '" + name + "' is not part of this Llama model (wrong architecture?)");
  }
  for (const auto& u : layout.units) {
    for (const auto& t : u.tensors) {
      const TensorInfo* info = weights.Find(t.hf_name);
      if (!info) return NotFound(dir + ": tensor '" + t.hf_name + "' is missing from the safetensors files");
      if (info->shape != t.shape)
        return InvalidArgument(dir + ": tensor '" + t.hf_name + "' has shape " + ShapeToString(info->shape) +
                               ", the model's config.json implies " + ShapeToString(t.shape));
    }
  }
  return weights;
}

Status ReadHfUnitRange(const HfWeights& weights, const UnitSpec& unit, int64_t begin, int64_t end, float* dst) {
  if (begin < 0 || end < begin) return InvalidArgument("unit " + unit.name + ": bad range");
  for (const auto& t : unit.tensors) {
    const int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    float* got = dst + (lo - begin);
    RETURN_IF_ERROR(weights.ReadF32Range(t.hf_name, lo - t.offset, hi - lo, got));
    // Checked as it streams (the bytes are hot): an inf/NaN weight would only
    // surface steps later as a non-finite loss blamed on the training.
    if (const int64_t i = FirstNonFinite(got, hi - lo); i >= 0)
      return InvalidArgument("tensor '" + t.hf_name + "' holds " + (std::isnan(got[i]) ? "NaN" : "inf") +
                             " at element " + std::to_string(lo - t.offset + i) + " of " + std::to_string(t.numel) +
                             ": the weights are corrupt (refused at load)");
  }
  return OkStatus();
}

Status LoadHfWeights(const std::string& dir, const ParamLayout& layout, std::vector<std::vector<float>>* units) {
  ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfigFromHfDir(dir));
  ASSIGN_OR_RETURN(HfWeights weights, OpenHfWeightsFor(dir, config, layout));
  units->assign(layout.units.size(), {});
  for (size_t u = 0; u < layout.units.size(); ++u) {
    (*units)[u].assign(layout.units[u].numel, 0.0f);
    RETURN_IF_ERROR(ReadHfUnitRange(weights, layout.units[u], 0, layout.units[u].numel, (*units)[u].data()));
  }
  return OkStatus();
}

Status ExportHf(const std::string& dir, const LlamaConfig& config, const ParamLayout& layout,
                const std::function<Status(int, std::vector<float>*)>& get_unit, DType dtype,
                int64_t max_file_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return NotFound("cannot create export folder " + dir + ": " + ec.message());
  std::vector<TensorDecl> decls;
  for (const auto& u : layout.units)
    for (const auto& t : u.tensors) decls.push_back(TensorDecl{t.hf_name, t.shape});
  ASSIGN_OR_RETURN(HfWeightsWriter writer, HfWeightsWriter::Create(dir, decls, dtype, max_file_bytes));
  std::vector<float> buf;
  for (int u = 0; u < layout.num_units(); ++u) {
    RETURN_IF_ERROR(get_unit(u, &buf));
    if (static_cast<int64_t>(buf.size()) < layout.units[u].numel)
      return Internal("export: unit " + layout.units[u].name + " buffer is too small");
    for (const auto& t : layout.units[u].tensors) RETURN_IF_ERROR(writer.Write(t.hf_name, buf.data() + t.offset));
  }
  RETURN_IF_ERROR(writer.Finish());
  ASSIGN_OR_RETURN(std::string cfg, ExportedHfConfigJson(config, /*source_config=*/"", dtype, "config"));
  return WriteFileAtomic((std::filesystem::path(dir) / "config.json").string(), cfg);
}

}  // namespace shard
