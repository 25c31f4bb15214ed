#include "shard/spec/eval_config.h"

namespace shard {

Status EvalConfig::Validate(bool sft) const {
  if (every_steps < 0) return InvalidArgument("eval.every_steps must be >= 0 (0 = after the last step), got " + std::to_string(every_steps));
  if (max_samples < 0) return InvalidArgument("eval.max_samples must be >= 0 (0 = all), got " + std::to_string(max_samples));
  if (!enabled() && (every_steps > 0 || max_samples > 0 || exact_match))
    return InvalidArgument("eval: set eval.data (a held-out JSONL) to evaluate");
  if (enabled() && !sft)
    return InvalidArgument("eval.data needs an SFT job (data.jsonl): it is prepared with the job's tokenizer and template");
  return OkStatus();
}

}  // namespace shard
