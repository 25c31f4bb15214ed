#include "shard/train/qlora_base.h"

#include <algorithm>

namespace shard {

std::vector<Nf4UnitSpec> QloraUnitSpecs(const ParamLayout& layout) {
  std::vector<Nf4UnitSpec> specs(layout.units.size());
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const UnitSpec& unit = layout.units[u];
    if (unit.kind != UnitKind::kBlock) continue;
    specs[u].quantize = true;
    for (const TensorSpec& t : unit.tensors)
      if (t.shape.size() != 2) specs[u].keep.emplace_back(t.offset, t.numel);
    std::sort(specs[u].keep.begin(), specs[u].keep.end());
  }
  return specs;
}

}  // namespace shard
