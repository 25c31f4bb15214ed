#include "shard/ckpt/peft_adapter.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shard/ckpt/safetensors.h"
#include "shard/common/file_util.h"

namespace shard {

namespace fs = std::filesystem;

Status WritePeftAdapter(const std::string& dir, const PeftConfig& peft, const LoraLayout& layout,
                        const std::string& base_model, const std::vector<std::vector<float>>& layers, DType dtype) {
  if (static_cast<int>(layers.size()) != layout.num_layers)
    return InvalidArgument("PEFT export: " + std::to_string(layers.size()) + " layer buffers for " +
                           std::to_string(layout.num_layers) + " layers");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InvalidArgument("PEFT export: cannot create " + dir + ": " + ec.message());
  nlohmann::json cfg;
  cfg["peft_type"] = "LORA";
  cfg["task_type"] = "CAUSAL_LM";
  cfg["r"] = peft.r;
  cfg["lora_alpha"] = peft.alpha;
  cfg["lora_dropout"] = peft.dropout;
  cfg["use_rslora"] = peft.use_rslora;
  cfg["bias"] = "none";
  cfg["fan_in_fan_out"] = false;
  cfg["inference_mode"] = true;
  cfg["init_lora_weights"] = peft.init == LoraInit::kGaussian ? nlohmann::json("gaussian") : nlohmann::json(true);
  cfg["modules_to_save"] = nullptr;
  cfg["base_model_name_or_path"] = base_model;
  std::vector<std::string> targets;
  for (LoraTarget t : peft.target_modules) targets.push_back(LoraTargetName(t));
  cfg["target_modules"] = targets;
  RETURN_IF_ERROR(WriteFileAtomic((fs::path(dir) / kPeftConfigFile).string(), cfg.dump(2) + "\n"));

  std::vector<TensorDecl> decls;
  for (int l = 0; l < layout.num_layers; ++l)
    for (const LoraTensor& t : layout.tensors) {
      decls.push_back({PeftTensorName(l, t.target, false), {layout.r, t.in}});
      decls.push_back({PeftTensorName(l, t.target, true), {t.out, layout.r}});
    }
  ASSIGN_OR_RETURN(SafetensorsWriter w, SafetensorsWriter::Create((fs::path(dir) / kPeftWeightsFile).string(), decls,
                                                                  dtype, {{"format", "pt"}}));
  for (int l = 0; l < layout.num_layers; ++l)
    for (const LoraTensor& t : layout.tensors) {
      RETURN_IF_ERROR(w.Write(PeftTensorName(l, t.target, false), layers[l].data() + t.a_offset));
      RETURN_IF_ERROR(w.Write(PeftTensorName(l, t.target, true), layers[l].data() + t.b_offset));
    }
  return w.Finish();
}

namespace {

std::string Names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

namespace {

struct AdapterJson {
  std::string path;
  nlohmann::json cfg;
  std::vector<std::string> targets;  // sorted
};

StatusOr<AdapterJson> LoadAdapterJson(const std::string& dir) {
  AdapterJson a;
  a.path = (fs::path(dir) / kPeftConfigFile).string();
  std::ifstream in(a.path);
  if (!in) return NotFound(a.path + ": cannot open (expected a PEFT adapter folder)");
  std::stringstream ss;
  ss << in.rdbuf();
  a.cfg = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (a.cfg.is_discarded() || !a.cfg.is_object()) return InvalidArgument(a.path + ": not a JSON object");
  const std::string type = a.cfg.value("peft_type", std::string());
  if (type != "LORA") return InvalidArgument(a.path + ": peft_type '" + type + "' is not LORA");
  if (!a.cfg.contains("r") || !a.cfg["r"].is_number_integer() || a.cfg["r"].get<int64_t>() < 1 ||
      a.cfg["r"].get<int64_t>() > 65536)
    return InvalidArgument(a.path + ": r is missing or not an integer from 1 to 65536");
  // What an adapter may carry beyond A and B, which shardd would otherwise drop silently.
  const std::string bias = a.cfg.value("bias", std::string("none"));
  if (bias != "none") return InvalidArgument(a.path + ": bias '" + bias + "': only bias none is supported");
  if (a.cfg.contains("modules_to_save") && !a.cfg["modules_to_save"].is_null() &&
      !(a.cfg["modules_to_save"].is_array() && a.cfg["modules_to_save"].empty()))
    return InvalidArgument(a.path + ": modules_to_save: fully trained extra modules are not supported");
  if (a.cfg.value("use_dora", false)) return InvalidArgument(a.path + ": use_dora: DoRA adapters are not supported");
  if (a.cfg.value("fan_in_fan_out", false))
    return InvalidArgument(a.path + ": fan_in_fan_out: transposed (Conv1D) weights are not supported");
  const auto& tm = a.cfg.contains("target_modules") ? a.cfg["target_modules"] : nlohmann::json();
  if (tm.is_string()) {
    if (tm.get<std::string>() != "all-linear")
      return InvalidArgument(a.path + ": target_modules '" + tm.get<std::string>() +
                             "' is a pattern; only a list of names or \"all-linear\" is read");
    for (const auto& e : kLoraTargetNames) a.targets.push_back(e.name);
  } else if (tm.is_array()) {
    for (const auto& x : tm) {
      if (!x.is_string()) return InvalidArgument(a.path + ": target_modules holds a non-string");
      a.targets.push_back(x.get<std::string>());
    }
  } else {
    return InvalidArgument(a.path + ": target_modules is missing");
  }
  std::sort(a.targets.begin(), a.targets.end());
  return a;
}

}  // namespace

StatusOr<PeftConfig> ReadPeftAdapterConfig(const std::string& dir) {
  ASSIGN_OR_RETURN(AdapterJson a, LoadAdapterJson(dir));
  PeftConfig p;
  p.method = PeftMethod::kLora;
  p.r = static_cast<int>(a.cfg["r"].get<int64_t>());  // 1..65536, checked by LoadAdapterJson
  auto number = [&](const char* key, double* out) -> Status {
    if (!a.cfg.contains(key) || a.cfg[key].is_null()) return OkStatus();
    if (!a.cfg[key].is_number()) return InvalidArgument(a.path + ": " + key + " is not a number");
    *out = a.cfg[key].get<double>();
    return OkStatus();
  };
  RETURN_IF_ERROR(number("lora_alpha", &p.alpha));
  RETURN_IF_ERROR(number("lora_dropout", &p.dropout));
  if (a.cfg.contains("use_rslora") && a.cfg["use_rslora"].is_boolean()) p.use_rslora = a.cfg["use_rslora"].get<bool>();
  auto t = ParseLoraTargets(a.targets);
  if (!t.ok()) return InvalidArgument(a.path + ": target_modules: " + t.status().message());
  p.target_modules = *t;
  Status st = p.Validate();
  if (!st.ok()) return InvalidArgument(a.path + ": " + st.message());
  return p;
}

Status ReadPeftAdapter(const std::string& dir, const PeftConfig& peft, const LoraLayout& layout,
                       std::vector<std::vector<float>>* layers) {
  ASSIGN_OR_RETURN(AdapterJson a, LoadAdapterJson(dir));
  const std::string& cfg_path = a.path;
  if (a.cfg["r"].get<int64_t>() != peft.r)
    return InvalidArgument(cfg_path + ": r is " + std::to_string(a.cfg["r"].get<int64_t>()) +
                           " but the job's peft.r is " + std::to_string(peft.r));
  std::vector<std::string> ours;
  for (LoraTarget t : peft.target_modules) ours.push_back(LoraTargetName(t));
  std::sort(ours.begin(), ours.end());
  if (a.targets != ours)
    return InvalidArgument(cfg_path + ": target_modules [" + Names(a.targets) + "] but the job's peft.target_modules is [" +
                           Names(ours) + "]");
  const std::string w_path = (fs::path(dir) / kPeftWeightsFile).string();
  if (!fs::exists(w_path))
    return NotFound(w_path + ": not found (only the safetensors format is read, not adapter_model.bin)");
  ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(w_path));
  layers->assign(layout.num_layers, std::vector<float>(layout.layer_numel, 0.0f));
  for (int l = 0; l < layout.num_layers; ++l)
    for (const LoraTensor& t : layout.tensors) {
      for (bool is_b : {false, true}) {
        const std::string name = PeftTensorName(l, t.target, is_b);
        // PEFT also writes names with the adapter's name (".lora_A.default.weight") in some versions.
        std::string use = name;
        if (!f.Find(use)) {
          std::string alt = name;
          alt.insert(alt.size() - std::string(".weight").size(), ".default");
          if (f.Find(alt)) use = alt;
        }
        const std::vector<int64_t> shape = is_b ? std::vector<int64_t>{t.out, layout.r}
                                                : std::vector<int64_t>{layout.r, t.in};
        RETURN_IF_ERROR(f.ReadF32(use, shape, (*layers)[l].data() + (is_b ? t.b_offset : t.a_offset))
                            .WithContext(w_path));
      }
    }
  return OkStatus();
}

}  // namespace shard
