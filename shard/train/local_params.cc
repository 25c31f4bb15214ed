#include "shard/train/local_params.h"

#include "shard/model/hf_io.h"
#include "shard/model/init.h"

namespace shard {

StatusOr<std::unique_ptr<LocalParams>> LocalParams::Create(Backend* backend, const ParamLayout& layout,
                                                           bool with_grads) {
  std::unique_ptr<LocalParams> p(new LocalParams(backend, layout));
  for (const auto& u : layout.units) {
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(backend, u.numel));
    p->params_.push_back(std::move(b));
    if (with_grads) {
      ASSIGN_OR_RETURN(DeviceBuffer g, DeviceBuffer::Create(backend, u.numel));
      p->grads_.push_back(std::move(g));
    }
  }
  if (with_grads) p->ZeroGrads();
  return p;
}

void LocalParams::InitRandom(uint64_t seed, float std_dev) {
  std::vector<float> host;
  for (int u = 0; u < layout_.num_units(); ++u) {
    const auto& spec = layout_.units[u];
    host.resize(spec.numel);
    InitUnitParams(spec, u, seed, std_dev, 0, spec.numel, host.data());
    backend_->CopyToDevice(params_[u].data(), host.data(), host.size() * sizeof(float));
  }
}

Status LocalParams::LoadUnits(const std::vector<std::vector<float>>& units) {
  if (units.size() != layout_.units.size()) return Internal("LoadUnits: unit count mismatch");
  for (size_t u = 0; u < units.size(); ++u) {
    if (static_cast<int64_t>(units[u].size()) != layout_.units[u].numel)
      return Internal("LoadUnits: unit " + layout_.units[u].name + " size mismatch");
    backend_->CopyToDevice(params_[u].data(), units[u].data(), units[u].size() * sizeof(float));
  }
  return OkStatus();
}

void LocalParams::CopyUnitToHost(int unit, std::vector<float>* out) const {
  out->resize(layout_.units[unit].numel);
  backend_->CopyToHost(out->data(), params_[unit].data(), out->size() * sizeof(float));
}

void LocalParams::ZeroGrads() {
  for (auto& g : grads_) backend_->Fill(g.data(), g.size(), 0.0f);
}

StatusOr<float*> LocalParams::GradBuffer(int unit) {
  if (grads_.empty()) return FailedPrecondition("gradients requested from inference-only parameters");
  return grads_[unit].data();
}

StatusOr<LoadedModel> LoadModelForInference(const std::string& hf_dir, const std::string& device) {
  LoadedModel m;
  ASSIGN_OR_RETURN(m.config, LlamaConfigFromHfDir(hf_dir));
  m.layout = ParamLayout::ForLlama(m.config);
  std::vector<std::vector<float>> units;
  RETURN_IF_ERROR(LoadHfWeights(hf_dir, m.layout, &units));
  ASSIGN_OR_RETURN(m.backend, CreateBackend(device));
  ASSIGN_OR_RETURN(m.params, LocalParams::Create(m.backend.get(), m.layout, /*with_grads=*/false));
  RETURN_IF_ERROR(m.params->LoadUnits(units));
  return m;
}

}  // namespace shard
