// shardctl generate: text in, text out, with a KV cache (shard/model/kv_decoder.h),
// sampling (shard/model/sampling.h) and the model's eos tokens.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "coordinator/ctl/chat_template_command.h"
#include "coordinator/ctl/commands.h"
#include "shard/common/file_util.h"
#include "shard/data/generation_config.h"
#include "shard/data/tokenizer.h"
#include "shard/model/kv_decoder.h"
#include "shard/model/sampling.h"
#include "shard/train/local_params.h"
#include "shard/train/peft_inference.h"

namespace shardctl {
namespace {

namespace fs = std::filesystem;
using shard::Status;
using shard::StatusOr;

// Prompt chunk the decoder runs at once (bounds its [heads, chunk, length] score block).
constexpr int64_t kPromptChunk = 256;

// --tokenizer, else the model folder when it holds tokenizer files.
std::string TokenizerSpec(const GenerateOptions& o) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  for (const char* f : {"tokenizer.json", "tokenizer.model"})
    if (fs::exists(fs::path(o.model) / f)) return o.model;
  return "";
}

// The ids generation stops at: generation_config.json's eos_token_id (an id or
// a list, as transformers writes it; each must be an id of the model's
// vocabulary), else the tokenizer's eos.
StatusOr<std::vector<int32_t>> EosIds(const std::string& model_dir, const shard::Tokenizer* tok, int64_t vocab_size) {
  std::vector<int32_t> ids;
  const fs::path gc = fs::path(model_dir) / "generation_config.json";
  if (fs::exists(gc)) {
    ASSIGN_OR_RETURN(std::string text, shard::ReadFileToString(gc.string()));
    ASSIGN_OR_RETURN(ids, shard::GenerationEosIds(text, gc.string(), vocab_size));
  }
  if (ids.empty() && tok && tok->eos_id()) ids.push_back(*tok->eos_id());
  return ids;
}

StatusOr<std::vector<int32_t>> PromptIds(const GenerateOptions& o, const shard::Tokenizer* tok) {
  const int given = !o.prompt_text.empty() + !o.messages.empty() + !o.prompt.empty();
  if (given != 1) return shard::InvalidArgument("generate: give exactly one of --prompt TEXT, --messages FILE.json, --prompt-tokens IDS");
  if (!o.prompt.empty()) return o.prompt;
  if (!tok)
    return shard::InvalidArgument("generate: --model " + o.model +
                                  " has no tokenizer.json or tokenizer.model; pass --tokenizer DIR|FILE|byte");
  std::vector<int32_t> ids;
  if (!o.messages.empty()) {
    // The model's own chat template with the generation prompt, as
    // apply_chat_template(..., add_generation_prompt=True) renders it; the
    // text carries its special tokens (bos included) and Encode maps them.
    ChatTemplateOptions ct;
    ct.tokenizer = TokenizerSpec(o);
    ct.messages = o.messages;
    ct.add_generation_prompt = true;
    ct.chat_template = "hf";
    ASSIGN_OR_RETURN(std::string text, RenderChatTemplateText(ct));
    tok->Encode(text, &ids);
  } else {
    // As tokenizer(text) does: bos first when the tokenizer has one.
    if (tok->bos_id()) ids.push_back(*tok->bos_id());
    tok->Encode(o.prompt_text, &ids);
  }
  if (ids.empty()) return shard::InvalidArgument("generate: the prompt encodes to no tokens");
  return ids;
}

// Prints the text of `ids` beyond the `printed` bytes already written, holding
// back a trailing incomplete UTF-8 character (decoded as U+FFFD) until the
// next token completes it, as transformers' TextStreamer does.
void Stream(const shard::Tokenizer& tok, const std::vector<int32_t>& ids, bool final, size_t* printed) {
  const std::string text = tok.Decode(ids);
  if (!final && text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return;
  if (text.size() > *printed) {
    std::fwrite(text.data() + *printed, 1, text.size() - *printed, stdout);
    std::fflush(stdout);
    *printed = text.size();
  }
}

}  // namespace

Status RunGenerate(const GenerateOptions& o) {
  if (o.max_new < 0) return shard::InvalidArgument("--max-new must be >= 0");
  shard::SamplingOptions so{o.temperature, o.top_k, o.top_p};
  RETURN_IF_ERROR(shard::ValidateSampling(so));
  std::unique_ptr<shard::Tokenizer> tok;
  if (const std::string spec = TokenizerSpec(o); !spec.empty()) {
    auto t = shard::LoadTokenizer(spec);
    if (!t.ok()) return t.status().WithContext("--tokenizer " + spec);
    tok = std::move(*t);
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptIds(o, tok.get()));
  ASSIGN_OR_RETURN(shard::LoadedModel m, shard::LoadModelForInference(o.model, o.device));
  // --adapter: the LoRA adapter is merged into the loaded weights (W + s·B·A),
  // so the decoder reads the tuned model through the same UnitAccess.
  if (!o.adapter.empty()) RETURN_IF_ERROR(shard::MergePeftAdapterInto(o.adapter, &m).WithContext("--adapter " + o.adapter));
  for (int32_t t : prompt)
    if (t < 0 || t >= m.config.vocab_size)
      return shard::InvalidArgument("generate: prompt token " + std::to_string(t) + " is outside the model's vocabulary of " +
                                    std::to_string(m.config.vocab_size));
  ASSIGN_OR_RETURN(std::vector<int32_t> eos, EosIds(o.model, tok.get(), m.config.vocab_size));
  const int64_t total = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(o.max_new, 1);
  ASSIGN_OR_RETURN(auto decoder, shard::KvDecoder::Create(m.config, m.backend.get(), total,
                                                          std::min<int64_t>(kPromptChunk, prompt.size())));
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> generated;
  std::string stop = "max_new";
  size_t printed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<float> logits, decoder->Append(prompt, *m.params));
  while (static_cast<int64_t>(generated.size()) < o.max_new) {
    const int32_t next = shard::SampleToken(logits, so, rng);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) {
      stop = "eos";
      break;
    }
    generated.push_back(next);
    if (tok && !o.json) Stream(*tok, generated, false, &printed);
    if (static_cast<int64_t>(generated.size()) == o.max_new) break;
    ASSIGN_OR_RETURN(logits, decoder->Append(std::span<const int32_t>(&next, 1), *m.params));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.json) {
    nlohmann::json j{{"prompt_ids", prompt}, {"generated_ids", generated}, {"stop", stop},
                     {"eos_ids", eos}, {"seconds", secs}};
    if (tok) j["text"] = tok->Decode(generated);
    // A sampled byte sequence need not be valid UTF-8: replaced (U+FFFD), never a throw.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (tok) {
    Stream(*tok, generated, true, &printed);
    std::printf("\n");
  } else {
    std::string line;
    for (size_t i = 0; i < generated.size(); ++i) line += (i ? "," : "") + std::to_string(generated[i]);
    std::printf("%s\n", line.c_str());
  }
  return shard::OkStatus();
}

}  // namespace shardctl
