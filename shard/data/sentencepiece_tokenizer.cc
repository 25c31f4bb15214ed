#include "shard/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "shard/common/checksum.h"
#include "shard/common/file_util.h"

namespace shard {

SentencePieceTokenizer::SentencePieceTokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  auto st = t->sp_->LoadFromSerializedProto(bytes);
  if (!st.ok())
    return InvalidArgument("SentencePiece model " + path + ": " + st.ToString() +
                           " (expected a SentencePiece .model protobuf, e.g. Llama-2's tokenizer.model)");
  t->vocab_size_ = t->sp_->GetPieceSize();
  if (t->sp_->bos_id() >= 0) t->bos_ = t->sp_->bos_id();
  if (t->sp_->eos_id() >= 0) t->eos_ = t->sp_->eos_id();
  // The normalizer spec is not exposed; a dummy prefix shows in the first piece.
  std::vector<std::string> pieces;
  t->sp_->Encode("a", &pieces).IgnoreError();
  t->dummy_prefix_ = !pieces.empty() && pieces[0].rfind("\xE2\x96\x81", 0) == 0;
  Xxh64Stream h;
  h.Update("sentencepiece\n", 14);
  h.Update(bytes.data(), bytes.size());
  t->hash_ = h.Digest();
  return t;
}

void SentencePieceTokenizer::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  std::vector<int> out;
  sp_->Encode(absl::string_view(text.data(), text.size()), &out).IgnoreError();  // fails only when unloaded
  ids->insert(ids->end(), out.begin(), out.end());
}

std::string SentencePieceTokenizer::Decode(std::span<const int32_t> ids) const {
  std::vector<int> in(ids.begin(), ids.end());
  std::string out;
  sp_->Decode(in, &out).IgnoreError();
  return out;
}

std::optional<int32_t> SentencePieceTokenizer::TokenId(std::string_view token) const {
  const int id = sp_->PieceToId(absl::string_view(token.data(), token.size()));
  if (id == sp_->unk_id() && token != sp_->IdToPiece(id)) return std::nullopt;
  return id;
}

}  // namespace shard
