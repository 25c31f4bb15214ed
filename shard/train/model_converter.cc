#include "shard/train/model_converter.h"

#include "shard/train/qlora_base.h"

namespace shard {
namespace {

class Freeze : public ModelConverter {
 public:
  std::string name() const override { return "freeze"; }
  Status Convert(const ParamLayout&, FsdpOptions* o) const override {
    o->frozen = true;
    // A frozen base has no master to keep: stored in the compute dtype.
    o->param_shard_dtype = o->param_dtype;
    return OkStatus();
  }
};

class Nf4 : public ModelConverter {
 public:
  Nf4(int block_size, bool double_quant) : block_size_(block_size), double_quant_(double_quant) {}
  std::string name() const override { return "nf4"; }
  Status Convert(const ParamLayout& layout, FsdpOptions* o) const override {
    if (!o->frozen)
      return FailedPrecondition("NF4 storage needs a frozen base (apply the freeze converter first): "
                                "a quantised weight has no gradient or optimizer state");
    o->nf4.block_size = block_size_;
    o->nf4.double_quant = double_quant_;
    o->nf4_units = QloraUnitSpecs(layout);
    return OkStatus();
  }

 private:
  int block_size_;
  bool double_quant_;
};

}  // namespace

std::unique_ptr<ModelConverter> FreezeConverter() { return std::make_unique<Freeze>(); }

std::unique_ptr<ModelConverter> Nf4Converter(int block_size, bool double_quant) {
  return std::make_unique<Nf4>(block_size, double_quant);
}

std::vector<std::unique_ptr<ModelConverter>> ModelConvertersFor(const JobConfig& job) {
  std::vector<std::unique_ptr<ModelConverter>> out;
  if (job.peft.enabled()) out.push_back(FreezeConverter());
  if (job.peft.method == PeftMethod::kQlora) out.push_back(Nf4Converter(job.peft.block_size, job.peft.double_quant));
  return out;
}

Status ApplyConverters(const std::vector<std::unique_ptr<ModelConverter>>& converters, const ParamLayout& layout,
                       FsdpOptions* options) {
  for (const auto& c : converters)
    RETURN_IF_ERROR(c->Convert(layout, options).WithContext("model converter " + c->name()));
  return OkStatus();
}

}  // namespace shard
