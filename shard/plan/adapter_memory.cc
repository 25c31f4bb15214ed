#include "shard/plan/adapter_memory.h"

#include <algorithm>

#include "shard/spec/lora_layout.h"

namespace shard::plan {
namespace {

LoraLayout Layout(const LlamaConfig& config, int rank, const std::vector<LoraTarget>& targets) {
  PeftConfig p;
  p.method = PeftMethod::kLora;
  p.r = std::max(1, rank);
  p.target_modules = targets;
  return LoraLayout::For(config, p);
}

}  // namespace

std::vector<LoraTarget> AllLoraTargets() {
  return {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO, LoraTarget::kGate, LoraTarget::kUp,
          LoraTarget::kDown};
}

int64_t LoraParams(const LlamaConfig& config, int rank, const std::vector<LoraTarget>& targets) {
  return Layout(config, rank, targets).total_numel();
}

double Nf4Bits(int block_size, bool double_quant) {
  const double b = std::max(1, block_size);
  // fp32 absmax per block; double quantised: an 8-bit code per block and one
  // fp32 scale per 256 blocks.
  return double_quant ? 4.0 + 8.0 / b + 32.0 / (256.0 * b) : 4.0 + 32.0 / b;
}

LoraActivationElems LoraActivations(const LlamaConfig& config, int rank, const std::vector<LoraTarget>& targets,
                                    int64_t rows, bool checkpointing, bool dropout) {
  const LoraLayout l = Layout(config, rank, targets);
  LoraActivationElems a;
  a.scratch = (dropout ? 2 * rows * l.max_in : 0) + 2 * rows * l.r;
  const int64_t sets = checkpointing ? 1 : config.num_layers;
  a.saved = sets * static_cast<int64_t>(l.tensors.size()) * rows * l.r;
  a.other = config.hidden_size;
  return a;
}

int64_t FrozenUnitBytes(const UnitSpec& u, int64_t elems, double nf4_bits, int64_t other_bytes) {
  if (nf4_bits <= 0 || u.kind != UnitKind::kBlock) return elems * other_bytes;
  int64_t linear = 0;  // what QloraUnitSpecs quantises: a sparse block's router stays unquantised
  for (size_t i = 0; i < u.tensors.size(); ++i)
    linear += u.tensors[i].shape.size() == 2 && !(u.sparse && static_cast<int>(i) == kRouter) ? u.tensors[i].numel : 0;
  const double frac = static_cast<double>(linear) / static_cast<double>(std::max<int64_t>(1, u.numel));
  return static_cast<int64_t>(static_cast<double>(elems) * (frac * nf4_bits / 8.0 + (1 - frac) * other_bytes));
}

}  // namespace shard::plan
