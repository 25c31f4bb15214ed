// The seam between shard_data and libsentencepiece, which is loaded only on
// demand, in its own symbol scope.
//
// Why: Debian's libsentencepiece bundles and exports its own copy of
// protobuf-lite. Linked into a process that also uses libprotobuf (gRPC: the
// worker and shardctl), its symbols interpose on libprotobuf's and the process
// crashes in protobuf's static initialisation. So the SentencePiece code lives
// in a separate module (libshardd_sentencepiece.so) that SentencePieceTokenizer
// dlopens with RTLD_LOCAL | RTLD_DEEPBIND: sentencepiece binds to its own
// protobuf, everyone else to libprotobuf. Only virtual calls and std types
// cross this boundary, so no symbol of the module is ever resolved by name
// except the factory.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shard {

class SpmProcessor {
 public:
  virtual ~SpmProcessor() = default;
  // Parses a serialized ModelProto; false with *error set on failure.
  virtual bool Load(const std::string& model_bytes, std::string* error) = 0;
  virtual int PieceSize() const = 0;
  virtual int BosId() const = 0;
  virtual int EosId() const = 0;
  virtual int UnkId() const = 0;
  virtual void Encode(std::string_view text, std::vector<int>* ids) const = 0;
  virtual void EncodePieces(std::string_view text, std::vector<std::string>* pieces) const = 0;
  virtual std::string Decode(const std::vector<int>& ids) const = 0;
  virtual int PieceToId(std::string_view piece) const = 0;
  virtual std::string IdToPiece(int id) const = 0;
};

// The module's one exported symbol.
using SpmCreateFn = SpmProcessor* (*)();
inline constexpr const char* kSpmCreateSymbol = "shardd_spm_create";

}  // namespace shard
