#include "shard/data/bpe_model.h"

#include <algorithm>
#include <array>
#include <queue>

#include "shard/data/text_util.h"

namespace shard {
namespace {

struct ByteAlphabet {
  std::array<char32_t, 256> to_unicode{};
  std::unordered_map<char32_t, int> to_byte;
  ByteAlphabet() {
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      to_unicode[b] = direct[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      to_byte[to_unicode[b]] = b;
    }
  }
};
const ByteAlphabet& Alphabet() {
  static const ByteAlphabet a;
  return a;
}

// Words up to this many symbols merge with the quadratic scan (fewer cache
// misses than the heap); longer ones use the heap.
constexpr size_t kSmallWord = 48;

}  // namespace

char32_t ByteToUnicode(uint8_t b) { return Alphabet().to_unicode[b]; }

int UnicodeToByte(char32_t c) {
  auto it = Alphabet().to_byte.find(c);
  return it == Alphabet().to_byte.end() ? -1 : it->second;
}

bool ByteLevelToBytes(std::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    i += text::DecodeUtf8(s, i, &c);
    int b = UnicodeToByte(c);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
  }
  return true;
}

StatusOr<BpeModel> BpeModel::Create(StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                                    const Options& options) {
  BpeModel m;
  m.options_ = options;
  int32_t max_id = -1;
  for (const auto& [piece, id] : vocab) {
    if (id < 0) return InvalidArgument("vocabulary piece '" + piece + "' has a negative id");
    max_id = std::max(max_id, id);
  }
  m.pieces_.assign(max_id + 1, std::string());
  m.has_piece_.assign(max_id + 1, false);
  for (const auto& [piece, id] : vocab) {
    m.pieces_[id] = piece;
    m.has_piece_[id] = true;
  }
  m.vocab_ = std::move(vocab);
  std::fill(std::begin(m.byte_id_), std::end(m.byte_id_), -1);
  std::fill(std::begin(m.fallback_id_), std::end(m.fallback_id_), -1);
  for (int b = 0; b < 256; ++b) {
    std::string one(1, static_cast<char>(b));
    if (auto id = m.PieceId(one)) m.byte_id_[b] = *id;
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    if (auto id = m.PieceId(hex)) m.fallback_id_[b] = *id;
  }
  m.merges_.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = m.PieceId(a), ib = m.PieceId(b), ic = m.PieceId(a + b);
    if (!ia || !ib || !ic)
      return InvalidArgument("merge " + std::to_string(r) + " ('" + a + "' '" + b + "'): " +
                             (!ia ? "'" + a + "'" : !ib ? "'" + b + "'" : "'" + a + b + "'") +
                             " is not in the vocabulary");
    m.merges_.emplace(Key(*ia, *ib), Merge{static_cast<int32_t>(r), *ic});  // first (lowest) rank wins
  }
  return m;
}

std::optional<int32_t> BpeModel::PieceId(std::string_view piece) const {
  auto it = vocab_.find(piece);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::Piece(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(pieces_.size()) || !has_piece_[id]) return nullptr;
  return &pieces_[id];
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t a, int32_t b) const {
  auto it = merges_.find(Key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* sym) const {
  sym->clear();
  if (options_.byte_level) {
    for (unsigned char c : word) {
      if (byte_id_[c] >= 0) sym->push_back(byte_id_[c]);
      else if (options_.unk) sym->push_back(*options_.unk);
    }
    return;
  }
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    const int len = std::min<int>(text::Utf8Length(static_cast<uint8_t>(word[i])), static_cast<int>(word.size() - i));
    std::string_view ch = word.substr(i, len);
    i += len;
    if (auto id = PieceId(ch)) {
      sym->push_back(*id);
      last_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char c : ch) all &= fallback_id_[c] >= 0;
      if (all) {
        for (unsigned char c : ch) sym->push_back(fallback_id_[c]);
        last_unk = false;
        continue;
      }
    }
    if (!options_.unk) continue;  // no unk piece: the reference drops the character
    if (!(options_.fuse_unk && last_unk)) sym->push_back(*options_.unk);
    last_unk = true;
  }
}

void BpeModel::MergeSmall(std::vector<int32_t>* sym) const {
  std::vector<int32_t>& s = *sym;
  while (s.size() > 1) {
    int32_t best_rank = INT32_MAX, best_id = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const Merge* m = FindMerge(s[i], s[i + 1]);
      if (m && m->rank < best_rank) {
        best_rank = m->rank;
        best_id = m->id;
        best = i;
      }
    }
    if (best_id < 0) break;
    s[best] = best_id;
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

void BpeModel::MergeHeap(std::vector<int32_t>* sym) const {
  std::vector<int32_t>& s = *sym;
  const int n = static_cast<int>(s.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<bool> alive(n, true);
  // (rank, position of the left symbol): lowest rank first, then leftmost.
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> heap;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    if (const Merge* m = FindMerge(s[i], s[next[i]]))
      heap.push((static_cast<uint64_t>(m->rank) << 32) | static_cast<uint32_t>(i));
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const uint64_t top = heap.top();
    heap.pop();
    const int i = static_cast<int>(top & 0xffffffffu);
    const int32_t rank = static_cast<int32_t>(top >> 32);
    if (!alive[i] || next[i] < 0) continue;
    const Merge* m = FindMerge(s[i], s[next[i]]);
    if (!m || m->rank != rank) continue;  // stale: a neighbour changed since the push
    const int j = next[i];
    s[i] = m->id;
    alive[j] = false;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  int w = 0;
  for (int i = 0; i < n; i = next[i] < 0 ? n : next[i]) s[w++] = s[i];
  s.resize(w);
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = PieceId(word)) {
      ids->push_back(*id);
      return;
    }
  }
  thread_local std::vector<int32_t> sym;
  InitialSymbols(word, &sym);
  if (sym.size() <= kSmallWord) MergeSmall(&sym);
  else MergeHeap(&sym);
  ids->insert(ids->end(), sym.begin(), sym.end());
}

}  // namespace shard
