#include "shard/data/byte_tokenizer.h"

#include "shard/common/checksum.h"

namespace shard {

void ByteTokenizer::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  ids->reserve(ids->size() + text.size());
  for (unsigned char c : text) ids->push_back(c);
}

std::string ByteTokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
    else if (id >= 256 && id < vocab_size()) out += kSpecials[id - 256];
  }
  return out;
}

std::optional<int32_t> ByteTokenizer::TokenId(std::string_view token) const {
  for (size_t i = 0; i < std::size(kSpecials); ++i)
    if (kSpecials[i] == token) return static_cast<int32_t>(256 + i);
  if (token.size() == 1) return static_cast<unsigned char>(token[0]);
  return std::nullopt;
}

uint64_t ByteTokenizer::hash() const {
  std::string desc = "byte-v1";
  for (auto s : kSpecials) desc += "|" + std::string(s);
  return Xxh64(desc.data(), desc.size());
}

}  // namespace shard
