#include "shard/train/local_params.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/step_listing.h"
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

namespace {

// Inference loads the whole model into host memory (fp32 units, then the
// backend's copy): refuse before allocating what this machine cannot hold,
// rather than swapping for a minute and dying of bad_alloc (issue 18 item 5).
Status CheckFitsInHostMemory(const LlamaConfig& c, const std::string& where) {
  const double need = c.ApproxParams() * sizeof(float) * 2;
  const double have = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (have > 0 && need > have) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "%s: the model has %.3g parameters and needs %.1f GB of host memory to load for inference "
                  "(fp32, loaded whole); this machine has %.1f GB",
                  where.c_str(), c.ApproxParams(), need / 1e9, have / 1e9);
    return ResourceExhausted(buf);
  }
  return OkStatus();
}

// A committed checkpoint step: the config from its manifest, each unit read
// whole from the shard files (any world size).
Status LoadCheckpointStep(const std::string& step_dir, LoadedModel* m, std::vector<std::vector<float>>* units) {
  ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(step_dir, /*verify_checksums=*/true));
  const Manifest& mf = reader.manifest();
  ASSIGN_OR_RETURN(m->config, StepModelConfig(mf, step_dir));
  RETURN_IF_ERROR(CheckFitsInHostMemory(m->config, step_dir));
  m->layout = ParamLayout::ForLlama(m->config);
  units->resize(m->layout.num_units());
  for (int u = 0; u < m->layout.num_units(); ++u) {
    (*units)[u].assign(m->layout.units[u].numel, 0.0f);
    RETURN_IF_ERROR(reader.ReadUnitRange(u, 0, m->layout.units[u].numel, (*units)[u].data(), nullptr, nullptr));
  }
  return OkStatus();
}

}  // namespace

StatusOr<LoadedModel> LoadModelForInference(const std::string& dir, const std::string& device) {
  LoadedModel m;
  std::vector<std::vector<float>> units;
  if (std::filesystem::exists(std::filesystem::path(dir) / kCommittedFile)) {
    RETURN_IF_ERROR(LoadCheckpointStep(dir, &m, &units));
  } else {
    ASSIGN_OR_RETURN(m.config, LlamaConfigFromHfDir(dir));
    RETURN_IF_ERROR(CheckFitsInHostMemory(m.config, dir));
    m.layout = ParamLayout::ForLlama(m.config);
    RETURN_IF_ERROR(LoadHfWeights(dir, m.layout, &units));
  }
  ASSIGN_OR_RETURN(m.backend, CreateBackend(device));
  ASSIGN_OR_RETURN(m.params, LocalParams::Create(m.backend.get(), m.layout, /*with_grads=*/false));
  RETURN_IF_ERROR(m.params->LoadUnits(units));
  return m;
}

}  // namespace shard
