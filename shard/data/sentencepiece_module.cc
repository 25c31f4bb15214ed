// libshardd_sentencepiece.so: SpmProcessor over sentencepiece (see sentencepiece_module.h).
#include <sentencepiece_processor.h>

#include <memory>

#include "shard/data/sentencepiece_module.h"

namespace {

class Processor : public shard::SpmProcessor {
 public:
  bool Load(const std::string& bytes, std::string* error) override {
    auto st = sp_.LoadFromSerializedProto(bytes);
    if (!st.ok()) *error = st.ToString();
    return st.ok();
  }
  int PieceSize() const override { return sp_.GetPieceSize(); }
  int BosId() const override { return sp_.bos_id(); }
  int EosId() const override { return sp_.eos_id(); }
  int UnkId() const override { return sp_.unk_id(); }
  void Encode(std::string_view text, std::vector<int>* ids) const override {
    sp_.Encode(absl::string_view(text.data(), text.size()), ids).IgnoreError();  // fails only when unloaded
  }
  void EncodePieces(std::string_view text, std::vector<std::string>* pieces) const override {
    sp_.Encode(absl::string_view(text.data(), text.size()), pieces).IgnoreError();
  }
  std::string Decode(const std::vector<int>& ids) const override {
    std::string out;
    sp_.Decode(ids, &out).IgnoreError();
    return out;
  }
  int PieceToId(std::string_view piece) const override {
    return sp_.PieceToId(absl::string_view(piece.data(), piece.size()));
  }
  std::string IdToPiece(int id) const override { return sp_.IdToPiece(id); }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) shard::SpmProcessor* shardd_spm_create() { return new Processor(); }
