#include "shard/data/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "shard/common/checksum.h"
#include "shard/common/file_util.h"

namespace shard {
namespace {

// Loads libshardd_sentencepiece.so once: $SHARDD_SENTENCEPIECE_MODULE, the
// build tree's copy, or one beside the executable (or in ../lib).
StatusOr<SpmCreateFn> SpmFactory() {
  static std::once_flag once;
  static SpmCreateFn fn = nullptr;
  static std::string error;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("SHARDD_SENTENCEPIECE_MODULE"); env && *env) candidates.push_back(env);
    candidates.push_back(SHARDD_SENTENCEPIECE_MODULE_PATH);
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back((self.parent_path() / "libshardd_sentencepiece.so").string());
      candidates.push_back((self.parent_path() / "../lib/libshardd_sentencepiece.so").string());
    }
    for (const std::string& path : candidates) {
      if (::access(path.c_str(), R_OK) != 0) continue;
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!h) {
        error = dlerror();
        continue;
      }
      fn = reinterpret_cast<SpmCreateFn>(::dlsym(h, kSpmCreateSymbol));
      if (fn) return;
      error = path + " has no " + kSpmCreateSymbol;
    }
    if (error.empty()) error = "libshardd_sentencepiece.so not found (set SHARDD_SENTENCEPIECE_MODULE)";
  });
  if (!fn) return Unavailable("SentencePiece support: " + error);
  return fn;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer() = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  ASSIGN_OR_RETURN(SpmCreateFn create, SpmFactory());
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->sp_.reset(create());
  std::string error;
  if (!t->sp_->Load(bytes, &error))
    return InvalidArgument("SentencePiece model " + path + ": " + error +
                           " (expected a SentencePiece .model protobuf, e.g. Llama-2's tokenizer.model)");
  t->vocab_size_ = t->sp_->PieceSize();
  if (t->sp_->BosId() >= 0) t->bos_ = t->sp_->BosId();
  if (t->sp_->EosId() >= 0) t->eos_ = t->sp_->EosId();
  // The normalizer spec is not exposed; a dummy prefix shows in the first piece.
  std::vector<std::string> pieces;
  t->sp_->EncodePieces("a", &pieces);
  t->dummy_prefix_ = !pieces.empty() && pieces[0].rfind("\xE2\x96\x81", 0) == 0;
  Xxh64Stream h;
  h.Update("sentencepiece\n", 14);
  h.Update(bytes.data(), bytes.size());
  t->hash_ = h.Digest();
  return t;
}

void SentencePieceTokenizer::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  std::vector<int> out;
  sp_->Encode(text, &out);
  ids->insert(ids->end(), out.begin(), out.end());
}

std::string SentencePieceTokenizer::Decode(std::span<const int32_t> ids) const {
  return sp_->Decode(std::vector<int>(ids.begin(), ids.end()));
}

std::optional<int32_t> SentencePieceTokenizer::TokenId(std::string_view token) const {
  const int id = sp_->PieceToId(token);
  if (id == sp_->UnkId() && token != sp_->IdToPiece(id)) return std::nullopt;
  return id;
}

}  // namespace shard
