// Whole-model parameters and gradients in one process: every unit's full flat
// buffer lives in backend memory. The single-process UnitAccess (acquire is a
// pointer lookup, nothing to gather or reduce), used by standalone training
// with world size 1 and by eval/generate.
#pragma once

#include <memory>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"
#include "shard/spec/unit_access.h"

namespace shard {

class LocalParams : public UnitAccess {
 public:
  // Allocates params (and grads when `with_grads`) for every unit.
  static StatusOr<std::unique_ptr<LocalParams>> Create(Backend* backend, const ParamLayout& layout,
                                                       bool with_grads);

  // Fills parameters with the deterministic init (shard/model/init.h).
  void InitRandom(uint64_t seed, float std_dev);
  // Copies host unit buffers in (sizes must match the layout).
  Status LoadUnits(const std::vector<std::vector<float>>& units);
  // Copies unit u's parameters out to host.
  void CopyUnitToHost(int unit, std::vector<float>* out) const;

  float* params(int unit) { return params_[unit].data(); }
  float* grads(int unit) { return grads_[unit].data(); }
  void ZeroGrads();

  StatusOr<const float*> AcquireParams(int unit) override { return static_cast<const float*>(params_[unit].data()); }
  Status ReleaseParams(int) override { return OkStatus(); }
  StatusOr<float*> GradBuffer(int unit) override;
  Status GradsDone(int) override { return OkStatus(); }

 private:
  LocalParams(Backend* backend, const ParamLayout& layout) : backend_(backend), layout_(layout) {}
  Backend* backend_;
  ParamLayout layout_;
  std::vector<DeviceBuffer> params_, grads_;
};

// A model ready for inference: backend + weights from an HF folder or a
// committed checkpoint step folder (one holding COMMITTED).
struct LoadedModel {
  std::unique_ptr<Backend> backend;
  LlamaConfig config;
  ParamLayout layout;
  std::unique_ptr<LocalParams> params;
};
StatusOr<LoadedModel> LoadModelForInference(const std::string& dir, const std::string& device);

}  // namespace shard
