#include "shard/ckpt/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "shard/ckpt/safetensors.h"
#include "shard/common/file_util.h"
#include "shard/common/json_object.h"
#include "shard/common/finite_scan.h"
#include "shard/common/format_number.h"

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
  std::vector<std::string> targets;  // the ones the model has (all-linear on a dense model: no router)
  for (LoraTarget t : layout.targets) targets.push_back(PeftTargetName(layout, t));
  cfg["target_modules"] = targets;
  RETURN_IF_ERROR(WriteFileAtomic((fs::path(dir) / kPeftConfigFile).string(), cfg.dump(2) + "\n"));

  std::vector<TensorDecl> decls;
  for (int l = 0; l < layout.num_layers; ++l)
    for (const LoraTensor& t : layout.LayerTensors(l)) {
      decls.push_back({PeftTensorName(layout, l, t, false), {layout.r, t.in}});
      decls.push_back({PeftTensorName(layout, l, t, true), {t.out, layout.r}});
    }
  ASSIGN_OR_RETURN(SafetensorsWriter w, SafetensorsWriter::Create((fs::path(dir) / kPeftWeightsFile).string(), decls,
                                                                  dtype, {{"format", "pt"}}));
  for (int l = 0; l < layout.num_layers; ++l)
    for (const LoraTensor& t : layout.LayerTensors(l)) {
      RETURN_IF_ERROR(w.Write(PeftTensorName(layout, l, t, false), layers[l].data() + t.a_offset));
      RETURN_IF_ERROR(w.Write(PeftTensorName(layout, l, t, true), layers[l].data() + t.b_offset));
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

// adapter_config.json keys that change what the adapter computes, which
// shardd does not implement: any value but PEFT's default (null, false, {}, [])
// is refused, naming the key. (bias, target_modules and r are checked apart;
// use_rslora is implemented; init_lora_weights, loftq_config and the like only
// shape a fresh adapter's start.)
struct UnsupportedPeftKey {
  const char* key;
  const char* why;
};
constexpr UnsupportedPeftKey kUnsupportedPeftKeys[] = {
    {"modules_to_save", "fully trained extra modules"},
    {"use_dora", "DoRA (weight-decomposed) adapters"},
    {"fan_in_fan_out", "transposed (Conv1D) base weights"},
    {"alpha_pattern", "a per-module lora_alpha"},
    {"rank_pattern", "a per-module r"},
    {"layers_to_transform", "adapters on only some layers"},
    {"layers_pattern", "adapters on only some layers"},
    {"exclude_modules", "modules excluded from target_modules"},
    {"target_parameters", "adapters on parameters rather than linear modules"},
    {"trainable_token_indices", "trained embedding rows"},
    {"layer_replication", "replicated base layers"},
    {"lora_bias", "a bias on lora_B"},
    {"use_qalora", "QA-LoRA pooled inputs"},
    {"alora_invocation_tokens", "activated LoRA (applied after invocation tokens only)"},
    {"megatron_config", "Megatron-parallel LoRA layers"},
};

// adapter_config.json keys shardd reads or that change nothing it computes
// from a saved adapter (PEFT's LoraConfig and PeftConfig fields): any value
// reads. A key in neither list (a newer PEFT option, a typo) set to anything
// but PEFT's default is refused, naming it: it may change the math.
constexpr const char* kKnownPeftKeys[] = {
    "peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "target_modules", "bias", "use_rslora",
    "base_model_name_or_path", "revision", "inference_mode", "init_lora_weights", "loftq_config", "auto_mapping",
    "megatron_core", "runtime_config", "eva_config", "corda_config", "peft_version", "qalora_group_size",
    "ensure_weight_tying"};

// PEFT's defaults for the keys above: absent, null, false, empty.
bool PeftDefault(const nlohmann::json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_array() || v.is_object()) && v.empty()) ||
         (v.is_string() && v.get_ref<const std::string&>().empty());
}

std::string Num(double v) { return FormatNumber("%g", v); }

// A value for an error line: its JSON, cut to 60 characters.
std::string Short(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

struct AdapterJson {
  std::string path;
  nlohmann::json cfg;
  std::vector<std::string> targets;  // sorted
  bool all_linear = false;           // target_modules "all-linear"
};

StatusOr<AdapterJson> LoadAdapterJson(const std::string& dir) {
  AdapterJson a;
  a.path = (fs::path(dir) / kPeftConfigFile).string();
  std::ifstream in(a.path);
  if (!in) return NotFound(a.path + ": cannot open (expected a PEFT adapter folder)");
  std::stringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(a.cfg, ParseJsonObject(ss.str(), a.path));
  const std::string type = a.cfg.value("peft_type", std::string());
  if (type != "LORA") return InvalidArgument(a.path + ": peft_type '" + type + "' is not LORA");
  if (!a.cfg.contains("r") || !a.cfg["r"].is_number_integer() || a.cfg["r"].get<int64_t>() < 1 ||
      a.cfg["r"].get<int64_t>() > 65536)
    return InvalidArgument(a.path + ": r is missing or not an integer from 1 to 65536");
  // What an adapter may carry beyond A and B, which shardd would otherwise drop silently.
  const auto& bias = a.cfg.contains("bias") ? a.cfg["bias"] : nlohmann::json("none");
  if (bias != "none")
    return InvalidArgument(a.path + ": bias " + bias.dump() + ": only bias none is supported");
  for (const UnsupportedPeftKey& k : kUnsupportedPeftKeys)
    if (a.cfg.contains(k.key) && !PeftDefault(a.cfg[k.key]))
      return InvalidArgument(a.path + ": " + k.key + " " + Short(a.cfg[k.key]) + ": " + k.why +
                             " (not supported: refused rather than ignored)");
  // The layers a CAUSAL_LM PeftModel adapts; another task adds heads (a
  // classifier's score layer) shardd does not have. null: a plain PeftModel.
  if (a.cfg.contains("task_type") && !a.cfg["task_type"].is_null() && a.cfg["task_type"] != "CAUSAL_LM")
    return InvalidArgument(a.path + ": task_type " + Short(a.cfg["task_type"]) +
                           ": only CAUSAL_LM adapters are read (another task adds heads shardd does not have)");
  for (const auto& item : a.cfg.items()) {
    // Named copies: a lambda may not capture a structured binding before C++20's
    // fix, and clang 14 (the fuzz build) refuses it.
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    const bool known = std::any_of(std::begin(kKnownPeftKeys), std::end(kKnownPeftKeys),
                                   [&](const char* k) { return key == k; }) ||
                       std::any_of(std::begin(kUnsupportedPeftKeys), std::end(kUnsupportedPeftKeys),
                                   [&](const UnsupportedPeftKey& k) { return key == k.key; });
    if (!known && !PeftDefault(value))
      return InvalidArgument(a.path + ": " + key.substr(0, 80) + " " + Short(value) +
                             ": not a LoRA option shardd knows (refused rather than ignored: it may change what the "
                             "adapter computes)");
  }
  if (a.cfg.contains("use_rslora") && !a.cfg["use_rslora"].is_boolean() && !a.cfg["use_rslora"].is_null())
    return InvalidArgument(a.path + ": use_rslora " + Short(a.cfg["use_rslora"]) + " is not true or false");
  const auto& tm = a.cfg.contains("target_modules") ? a.cfg["target_modules"] : nlohmann::json();
  if (tm.is_string()) {
    if (tm.get<std::string>() != "all-linear")
      return InvalidArgument(a.path + ": target_modules '" + tm.get<std::string>() +
                             "' is a pattern; only a list of names or \"all-linear\" is read");
    for (const auto& e : kLoraTargetNames) a.targets.push_back(e.name);
    a.all_linear = true;
  } else if (tm.is_array()) {
    for (const auto& x : tm) {
      if (!x.is_string()) return InvalidArgument(a.path + ": target_modules holds a non-string");
      a.targets.push_back(x.get<std::string>());
    }
  } else {
    return InvalidArgument(a.path + ": target_modules is missing");
  }
  // A module shardd does not adapt (lm_head, embed_tokens, a full module
  // path) would be applied by PEFT and dropped here.
  if (!(a.targets.size() == 1 && a.targets[0] == "all-linear"))
    for (const std::string& t : a.targets)
      if (!ParseLoraTargets({t}).ok())
        return InvalidArgument(a.path + ": target_modules: '" + t + "' is not a module shardd adapts (it adapts " +
                               EnumChoices(kLoraTargetNames) + "; mixtral's experts w1, w3, w2)");
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
  p.all_linear = a.all_linear;
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
  for (LoraTarget t : layout.targets) ours.push_back(PeftTargetName(layout, t));
  std::sort(ours.begin(), ours.end());
  auto theirs_targets = ParseLoraTargets(a.targets);  // by module, whatever the family's spelling
  if (theirs_targets.ok() && a.all_linear) {  // all-linear: the modules this model has
    std::vector<LoraTarget> kept;
    for (LoraTarget t : *theirs_targets)
      if (std::find(layout.targets.begin(), layout.targets.end(), t) != layout.targets.end()) kept.push_back(t);
    *theirs_targets = kept;
  }
  if (!theirs_targets.ok() || *theirs_targets != layout.targets)
    return InvalidArgument(cfg_path + ": target_modules [" + Names(a.targets) + "] but the job's peft.target_modules is [" +
                           Names(ours) + "]");
  // The scale s = alpha/r (alpha/sqrt(r) with rsLoRA) is part of what the
  // adapter computes: another one would apply it at the wrong strength.
  ASSIGN_OR_RETURN(PeftConfig theirs, ReadPeftAdapterConfig(dir));
  if (theirs.alpha != peft.alpha)
    return InvalidArgument(cfg_path + ": lora_alpha is " + Num(theirs.alpha) + " but the job's peft.alpha is " +
                           Num(peft.alpha));
  if (theirs.use_rslora != peft.use_rslora)
    return InvalidArgument(cfg_path + ": use_rslora is " + (theirs.use_rslora ? "true" : "false") +
                           " but the job's peft.use_rslora is " + (peft.use_rslora ? "true" : "false"));
  const std::string w_path = (fs::path(dir) / kPeftWeightsFile).string();
  if (!fs::exists(w_path))
    return NotFound(w_path + ": not found (only the safetensors format is read, not adapter_model.bin)");
  ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(w_path));
  layers->assign(layout.num_layers, std::vector<float>(layout.layer_numel, 0.0f));
  std::set<std::string> read;
  for (int l = 0; l < layout.num_layers; ++l)
    for (const LoraTensor& t : layout.LayerTensors(l)) {
      for (bool is_b : {false, true}) {
        const std::string name = PeftTensorName(layout, l, t, is_b);
        // PEFT also writes names with the adapter's name (".lora_A.default.weight") in some versions.
        std::string use = name;
        if (!f.Find(use)) {
          std::string alt = name;
          alt.insert(alt.size() - std::string(".weight").size(), ".default");
          if (f.Find(alt)) use = alt;
        }
        const std::vector<int64_t> shape = is_b ? std::vector<int64_t>{t.out, layout.r}
                                                : std::vector<int64_t>{layout.r, t.in};
        float* dst = (*layers)[l].data() + (is_b ? t.b_offset : t.a_offset);
        RETURN_IF_ERROR(f.ReadF32(use, shape, dst).WithContext(w_path));
        const int64_t numel = shape[0] * shape[1];
        if (const int64_t i = FirstNonFinite(dst, numel); i >= 0)
          return InvalidArgument(w_path + ": tensor '" + use + "' holds " + (std::isnan(dst[i]) ? "NaN" : "inf") +
                                 " at element " + std::to_string(i) + " of " + std::to_string(numel) +
                                 ": the adapter is corrupt (refused at load)");
        read.insert(use);
      }
    }
  // Anything else in the file is an adapter shardd would drop (lm_head,
  // embed_tokens, a layer the model lacks, a module outside target_modules).
  for (const TensorInfo& t : f.tensors())
    if (!read.count(t.name))
      return InvalidArgument(w_path + ": tensor '" + t.name + "' is not one this job's adapter has (target_modules [" +
                             Names(ours) + "], " + std::to_string(layout.num_layers) +
                             " layers): refused rather than ignored");
  return OkStatus();
}

}  // namespace shard
