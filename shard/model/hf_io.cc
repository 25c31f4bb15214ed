#include "shard/model/hf_io.h"

#include <filesystem>
#include <set>

#include "shard/ckpt/hf_weights.h"
#include "shard/common/file_util.h"

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

Status LoadHfWeights(const std::string& dir, const ParamLayout& layout, std::vector<std::vector<float>>* units) {
  ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfigFromHfDir(dir));
  ASSIGN_OR_RETURN(HfWeights weights, HfWeights::Open(dir));
  std::set<std::string> expected;
  for (const auto& u : layout.units)
    for (const auto& t : u.tensors) expected.insert(t.hf_name);
  for (const auto& name : weights.TensorNames()) {
    if (!expected.count(name) && !Ignorable(name, config))
      return InvalidArgument(dir + ": tensor '" + name + "' is not part of this Llama model (wrong architecture?)");
  }
  units->assign(layout.units.size(), {});
  for (size_t u = 0; u < layout.units.size(); ++u) {
    (*units)[u].assign(layout.units[u].numel, 0.0f);
    for (const auto& t : layout.units[u].tensors) {
      if (!weights.Find(t.hf_name))
        return NotFound(dir + ": tensor '" + t.hf_name + "' is missing from the safetensors files");
      RETURN_IF_ERROR(weights.ReadF32(t.hf_name, t.shape, (*units)[u].data() + t.offset));
    }
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
  std::string cfg = config.ToHfConfigJson();
  return WriteFileAtomic((std::filesystem::path(dir) / "config.json").string(), cfg);
}

}  // namespace shard
