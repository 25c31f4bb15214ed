#include "shard/train/qlora_base.h"

#include <algorithm>

namespace shard {

std::vector<Nf4UnitSpec> QloraUnitSpecs(const ParamLayout& layout) {
  std::vector<Nf4UnitSpec> specs(layout.units.size());
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const UnitSpec& unit = layout.units[u];
    if (unit.kind != UnitKind::kBlock) continue;
    specs[u].quantize = true;
    for (size_t i = 0; i < unit.tensors.size(); ++i) {
      const TensorSpec& t = unit.tensors[i];
      // Norms stay fp32, and so does a sparse block's router: its top-k picks
      // experts, which NF4's rounding would flip; it is small (E x d). So does
      // qwen2_moe's shared-expert gate ([1, d], the last tensor shaped so).
      const bool gate_row = unit.sparse && t.shape.size() == 2 && t.shape[0] == 1;
      if (t.shape.size() != 2 || (unit.sparse && static_cast<int>(i) == kRouter) || gate_row)
        specs[u].keep.emplace_back(t.offset, t.numel);
    }
    std::sort(specs[u].keep.begin(), specs[u].keep.end());
  }
  return specs;
}

}  // namespace shard
