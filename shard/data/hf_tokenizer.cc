#include "shard/data/hf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/common/json_depth.h"
#include "shard/common/json_int.h"
#include "shard/data/text_util.h"

namespace shard {
namespace {

// "<0x41>" → 0x41; -1 for any other piece (a vocabulary may hold "<0xZZ>" as
// an ordinary token: std::stoi threw on it and ended the process).
int ByteFallbackValue(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

using json = nlohmann::json;
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // "▁"

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (size_t i = 0;;) {
    size_t k = s.find(from, i);
    if (k == std::string_view::npos) {
      out.append(s.substr(i));
      return out;
    }
    out.append(s.substr(i, k - i));
    out.append(to);
    i = k + from.size();
  }
}

bool IsSpaceAt(std::string_view s, size_t i, int* len) {
  char32_t c;
  *len = text::DecodeUtf8(s, i, &c);
  return text::Classify(c) == text::CharClass::kSpace || c == 0xFEFF;
}
std::string_view TrimEnd(std::string_view s) {
  // Walk forward to find the last non-space (UTF-8 cannot be walked backwards safely here).
  size_t keep = 0;
  for (size_t i = 0; i < s.size();) {
    int len;
    bool sp = IsSpaceAt(s, i, &len);
    i += len;
    if (!sp) keep = i;
  }
  return s.substr(0, keep);
}
std::string_view TrimStart(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    int len;
    if (!IsSpaceAt(s, i, &len)) break;
    i += len;
  }
  return s.substr(i);
}

// a + b (written out: GCC 12 warns falsely about operator+ on short strings).
std::string Concat(std::string_view a, std::string_view b) {
  std::string s;
  s.reserve(a.size() + b.size());
  s.append(a);
  s.append(b);
  return s;
}

std::string TokenName(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// Merges are "a b" strings (older files) or ["a", "b"] pairs (newer ones).
Status ParseMerge(const json& m, size_t r, std::string* a, std::string* b) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    size_t sp = s.find(' ', 1);
    if (sp == std::string::npos) return InvalidArgument("merge " + std::to_string(r) + " '" + s + "' has no space");
    *a = s.substr(0, sp);
    *b = s.substr(sp + 1);
    return OkStatus();
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    *a = m[0].get<std::string>();
    *b = m[1].get<std::string>();
    return OkStatus();
  }
  return InvalidArgument("merge " + std::to_string(r) + " is neither \"a b\" nor [\"a\", \"b\"]");
}

}  // namespace

void HfTokenizer::Splitter::Build(const std::vector<const AddedToken*>& tokens) {
  by_first.assign(256, {});
  empty = true;
  for (const AddedToken* t : tokens) {
    if (t->content.empty()) continue;
    by_first[static_cast<uint8_t>(t->content[0])].push_back(t);
    empty = false;
  }
  for (auto& v : by_first)
    std::stable_sort(v.begin(), v.end(), [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
}

size_t HfTokenizer::Splitter::Find(std::string_view s, size_t from, const AddedToken** tok) const {
  if (empty) return std::string_view::npos;
  for (size_t i = from; i < s.size(); ++i) {
    for (const AddedToken* t : by_first[static_cast<uint8_t>(s[i])]) {
      if (s.compare(i, t->content.size(), t->content) == 0) {
        *tok = t;
        return i;
      }
    }
  }
  return std::string_view::npos;
}

Status HfTokenizer::ParseNormalizer(const void* p, int depth) {
  const json& n = *static_cast<const json*>(p);
  if (n.is_null()) return OkStatus();
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    if (depth >= kMaxSequenceDepth)
      return InvalidArgument("normalizer Sequences nested deeper than " + std::to_string(kMaxSequenceDepth) + " levels");
    for (const auto& s : n.at("normalizers")) RETURN_IF_ERROR(ParseNormalizer(&s, depth + 1));
  } else if (type == "NFC") {
    norm_.push_back({NormStep::kNfc, "", ""});
  } else if (type == "Prepend") {
    norm_.push_back({NormStep::kPrepend, n.at("prepend").get<std::string>(), ""});
    if (norm_.back().a == kMetaspace) dummy_prefix_ = true;
  } else if (type == "Replace") {
    if (!n.at("pattern").contains("String"))
      return Unimplemented("normalizer Replace with a regex pattern (only String patterns are supported)");
    norm_.push_back({NormStep::kReplace, n["pattern"]["String"].get<std::string>(), n.at("content").get<std::string>()});
  } else {
    return Unimplemented("normalizer " + type + " (supported: NFC, Prepend, Replace, Sequence)");
  }
  return OkStatus();
}

Status HfTokenizer::ParsePreTokenizer(const void* p, int depth) {
  const json& n = *static_cast<const json*>(p);
  if (n.is_null()) return OkStatus();
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    if (depth >= kMaxSequenceDepth)
      return InvalidArgument("pre-tokenizer Sequences nested deeper than " + std::to_string(kMaxSequenceDepth) + " levels");
    for (const auto& s : n.at("pretokenizers")) RETURN_IF_ERROR(ParsePreTokenizer(&s, depth + 1));
  } else if (type == "Split") {
    if (n.value("behavior", "") != "Isolated" || n.value("invert", false))
      return Unimplemented("pre-tokenizer Split with behavior " + n.value("behavior", "?") +
                           (n.value("invert", false) ? " (inverted)" : "") + " (only Isolated is supported)");
    if (!n.at("pattern").contains("Regex")) return Unimplemented("pre-tokenizer Split on a String pattern");
    PreStep s;
    s.kind = PreStep::kSplit;
    ASSIGN_OR_RETURN(s.pattern, SplitPatternFromRegex(n["pattern"]["Regex"].get<std::string>()));
    pre_.push_back(s);
  } else if (type == "ByteLevel") {
    PreStep s;
    s.kind = PreStep::kByteLevel;
    s.add_prefix_space = n.value("add_prefix_space", false);
    s.use_regex = n.value("use_regex", true);
    s.pattern = SplitPattern::kGpt2;
    pre_.push_back(s);
  } else if (type == "Metaspace") {
    if (n.value("split", false)) return Unimplemented("pre-tokenizer Metaspace with split: true");
    PreStep s;
    s.kind = PreStep::kMetaspace;
    s.replacement = n.value("replacement", std::string(kMetaspace));
    s.prepend_scheme = n.value("prepend_scheme", n.value("add_prefix_space", true) ? "always" : "never");
    if (s.prepend_scheme != "never") dummy_prefix_ = true;
    pre_.push_back(s);
  } else {
    return Unimplemented("pre-tokenizer " + type + " (supported: Split, ByteLevel, Metaspace, Sequence)");
  }
  return OkStatus();
}

Status HfTokenizer::CheckGrowth() const {
  // A text of n bytes leaves the normalizer and pre-tokenizers at most
  // factor * n + extra bytes long (saturating: a chain of 50 doublings is 2^50).
  double factor = 1, extra = 0;
  auto scale = [&](double r) { factor *= r, extra *= r; };
  std::string worst;
  for (const NormStep& n : norm_) {
    if (n.kind == NormStep::kNfc) scale(3);  // NFC expands a code point's bytes at most 3-fold
    if (n.kind == NormStep::kPrepend) extra += static_cast<double>(n.a.size());
    if (n.kind == NormStep::kReplace && !n.a.empty() && n.b.size() > n.a.size()) {
      scale(std::ceil(static_cast<double>(n.b.size()) / static_cast<double>(n.a.size())));
      worst = "Replace of '" + n.a + "' by a " + std::to_string(n.b.size()) + "-byte text";
    }
  }
  for (const PreStep& p : pre_) {
    if (p.kind == PreStep::kByteLevel && p.add_prefix_space) extra += 1;
    if (p.kind == PreStep::kMetaspace) {
      scale(std::max<double>(1, static_cast<double>(p.replacement.size())));
      extra += static_cast<double>(p.replacement.size());
    }
  }
  if (factor > kMaxTextGrowth || extra > kMaxTextPrefix)
    return InvalidArgument("the normalizer and pre-tokenizer can make a text " +
                           (factor > kMaxTextGrowth ? "grow " + std::to_string(static_cast<int64_t>(std::min(factor, 1e18))) +
                                                          "-fold (at most " + std::to_string(kMaxTextGrowth) + ")"
                                                    : "longer by " + std::to_string(static_cast<int64_t>(std::min(extra, 1e18))) +
                                                          " bytes (at most " + std::to_string(kMaxTextPrefix) + ")") +
                           (worst.empty() ? std::string() : "; the last step that grows it: " + worst));
  return OkStatus();
}

namespace {

// A token id from tokenizer.json, bounded: 0 <= id < kMaxTokenId, and at most
// kMaxIdGap past the number of entries (real vocabularies are dense; one id of
// 2147483647 or 5000000000 made prepare-data abort or allocate 22 GB).
StatusOr<int32_t> ParseTokenId(const nlohmann::json& v, int64_t entries, const std::string& what, const std::string& origin) {
  if (!v.is_number_integer()) return InvalidArgument(origin + ": " + what + " has an id that is not an integer");
  const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
  const uint64_t id = negative ? 0 : v.get<uint64_t>();
  const uint64_t bound = std::min<uint64_t>(kMaxTokenId, static_cast<uint64_t>(entries) + kMaxIdGap);
  if (negative || id >= bound)
    return InvalidArgument(origin + ": " + what + " has id " + v.dump() + ", outside [0, " + std::to_string(bound) +
                           ") (ids must be below " + std::to_string(kMaxTokenId) + " and at most " +
                           std::to_string(kMaxIdGap) + " past the " + std::to_string(entries) + " entries)");
  return static_cast<int32_t>(id);
}

}  // namespace

namespace {

// The BPE variants shardd does not implement, refused by name.
Status CheckBpeModel(const json& m, const std::string& origin) {
  const std::string type = m.value("type", "BPE");
  if (type != "BPE") return Unimplemented(origin + ": model type " + type + " (shardd reads BPE tokenizer.json files)");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    return Unimplemented(origin + ": BPE dropout");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty())
      return Unimplemented(origin + ": BPE " + k);
  return OkStatus();
}

// The vocabulary's entries plus the added tokens: what token ids are bounded by.
int64_t EntryCount(const json& j) {
  return static_cast<int64_t>(j.at("model").at("vocab").size()) +
         (j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"].size() : 0);
}

}  // namespace

Status HfTokenizer::BuildModel(const void* p, const std::string& origin) {
  const json& j = *static_cast<const json*>(p);
  const json& m = j.at("model");
  BpeModel::Options o;
  o.byte_level = std::any_of(pre_.begin(), pre_.end(), [](const PreStep& s) { return s.kind == PreStep::kByteLevel; });
  o.byte_fallback = m.value("byte_fallback", false);
  o.ignore_merges = m.value("ignore_merges", false);
  o.fuse_unk = m.value("fuse_unk", false);
  // BPE's vocab maps each piece to its id; a list is another model's
  // (Unigram's [piece, score] pairs), and nothing would encode.
  const json& vocab_json = m.at("vocab");
  if (!vocab_json.is_object())
    return InvalidArgument(origin + ": model.vocab is " + (vocab_json.is_array() ? "a list" : "not an object") +
                           "; a BPE tokenizer.json maps each piece to its id ({\"piece\": id, ...})");
  if (vocab_json.empty()) return InvalidArgument(origin + ": model.vocab is empty");
  StringMap<int32_t> vocab;
  vocab.reserve(vocab_json.size());
  std::string bytes;
  // Ids size the id → piece tables: bound them before anything allocates.
  const int64_t entries = EntryCount(j);
  for (const auto& [k, v] : m.at("vocab").items()) {
    ASSIGN_OR_RETURN(int32_t id, ParseTokenId(v, entries, "vocabulary piece '" + k + "'", origin));
    if (o.byte_level && ByteLevelToBytes(k, &bytes)) vocab.emplace(bytes, id);
    else vocab.emplace(k, id);
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    std::string unk = m["unk_token"].get<std::string>();
    auto it = vocab.find(unk);
    if (it != vocab.end()) o.unk = it->second;
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m.at("merges").size());
  for (size_t r = 0; r < m["merges"].size(); ++r) {
    std::string a, b;
    if (auto st = ParseMerge(m["merges"][r], r, &a, &b); !st.ok()) return st.WithContext(origin);
    if (o.byte_level) {
      std::string ra, rb;
      if (ByteLevelToBytes(a, &ra) && ByteLevelToBytes(b, &rb)) {
        a = std::move(ra);
        b = std::move(rb);
      }
    }
    merges.emplace_back(std::move(a), std::move(b));
  }
  auto model = BpeModel::Create(std::move(vocab), merges, o);
  if (!model.ok()) return model.status().WithContext(origin);
  model_ = std::make_unique<BpeModel>(std::move(*model));
  vocab_size_ = model_->max_id() + 1;
  return OkStatus();
}

Status HfTokenizer::ParseAddedTokens(const void* p, const std::string& origin) {
  const json& j = *static_cast<const json*>(p);
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    const int64_t entries = EntryCount(j);
    for (const auto& a : j["added_tokens"]) {
      AddedToken at;
      at.content = a.at("content").get<std::string>();
      ASSIGN_OR_RETURN(at.id, ParseTokenId(a.at("id"), entries, "added token '" + at.content + "'", origin));
      at.special = a.value("special", false);
      at.lstrip = a.value("lstrip", false);
      at.rstrip = a.value("rstrip", false);
      at.normalized = a.value("normalized", !at.special);
      if (a.value("single_word", false))
        return Unimplemented(origin + ": added token '" + at.content + "' has single_word: true");
      added_.push_back(at);
      vocab_size_ = std::max<int64_t>(vocab_size_, at.id + 1);
    }
  }
  std::vector<const AddedToken*> raw, normalized;
  for (const auto& a : added_) {
    added_ids_[a.content] = a.id;
    (a.normalized && !norm_.empty() ? normalized : raw).push_back(&a);
  }
  raw_splitter_.Build(raw);
  normalized_splitter_.Build(normalized);
  return OkStatus();
}

// Decoding: SentencePiece-style decoders strip the dummy-prefix space.
Status HfTokenizer::ScanDecoder(const void* p, int depth, const std::string& origin) {
  const json& d = *static_cast<const json*>(p);
  if (d.is_null()) return OkStatus();
  const std::string dt = d.value("type", "");
  if (dt == "Sequence") {
    if (depth >= kMaxSequenceDepth)
      return InvalidArgument(origin + ": decoder Sequences nested deeper than " + std::to_string(kMaxSequenceDepth) +
                             " levels");
    for (const auto& x : d.at("decoders")) RETURN_IF_ERROR(ScanDecoder(&x, depth + 1, origin));
  } else if (dt == "Strip") {
    strip_decoded_prefix_ = JsonIntOr<int64_t>(d, "start", 0) > 0;
  } else if (dt == "Metaspace") {
    strip_decoded_prefix_ = d.value("prepend_scheme", d.value("add_prefix_space", true) ? "always" : "never") != "never";
  }
  return OkStatus();
}

Status HfTokenizer::ResolveBosEos(const std::string& tokenizer_config_json, const std::string& origin) {
  std::string bos_name, eos_name;
  if (!tokenizer_config_json.empty()) {
    // Its own file in errors: a broken tokenizer_config.json is not tokenizer.json's fault.
    const std::string config_origin = (std::filesystem::path(origin).parent_path() / "tokenizer_config.json").string();
    json c;
    try {
      c = json::parse(tokenizer_config_json);
    } catch (const json::exception& e) {
      return InvalidArgument(config_origin + ": " + e.what());
    }
    if (!c.is_object()) return InvalidArgument(config_origin + ": not a JSON object");
    if (c.contains("bos_token")) bos_name = TokenName(c["bos_token"]);
    if (c.contains("eos_token")) eos_name = TokenName(c["eos_token"]);
  }
  auto first_of = [&](std::initializer_list<std::string> names) -> std::optional<int32_t> {
    for (const auto& n : names)
      if (!n.empty())
        if (auto id = TokenId(n)) return id;
    return std::nullopt;
  };
  bos_ = first_of({bos_name, "<|begin_of_text|>", "<s>"});
  eos_ = first_of({eos_name, "<|end_of_text|>", "</s>", "<|endoftext|>"});
  return OkStatus();
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Parse(const std::string& tokenizer_json,
                                                          const std::string& tokenizer_config_json,
                                                          const std::string& origin) {
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  RETURN_IF_ERROR(CheckJsonDepth(tokenizer_json, origin));
  RETURN_IF_ERROR(CheckJsonDepth(tokenizer_config_json, "tokenizer_config.json beside " + origin));
  try {
    const json j = json::parse(tokenizer_json);
    static const json kNull;
    auto field = [&](const char* k) -> const json& { return j.contains(k) ? j[k] : kNull; };
    RETURN_IF_ERROR(CheckBpeModel(j.at("model"), origin));
    if (auto st = t->ParseNormalizer(&field("normalizer"), 0); !st.ok()) return st.WithContext(origin);
    if (auto st = t->ParsePreTokenizer(&field("pre_tokenizer"), 0); !st.ok()) return st.WithContext(origin);
    if (auto st = t->CheckGrowth(); !st.ok()) return st.WithContext(origin);
    RETURN_IF_ERROR(t->BuildModel(&j, origin));
    RETURN_IF_ERROR(t->ParseAddedTokens(&j, origin));
    RETURN_IF_ERROR(t->ScanDecoder(&field("decoder"), 0, origin));
    RETURN_IF_ERROR(t->ResolveBosEos(tokenizer_config_json, origin));
  } catch (const json::exception& e) {
    return InvalidArgument(origin + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return InvalidArgument(origin + ": out of memory reading the tokenizer (is it a tokenizer.json?)");
  } catch (const std::exception& e) {
    return InvalidArgument(origin + ": " + e.what());
  }
  Xxh64Stream h;
  h.Update("hf-bpe\n", 7);
  h.Update(tokenizer_json.data(), tokenizer_json.size());
  h.Update(tokenizer_config_json.data(), tokenizer_config_json.size());
  t->hash_ = h.Digest();
  return t;
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string tj, ReadFileToString(path));
  std::string config;
  const auto cfg = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(cfg)) {
    ASSIGN_OR_RETURN(config, ReadFileToString(cfg.string()));
  }
  return Parse(tj, config, path);
}

std::optional<int32_t> HfTokenizer::TokenId(std::string_view token) const {
  auto it = added_ids_.find(token);
  if (it != added_ids_.end()) return it->second;
  return model_->PieceId(token);
}

void HfTokenizer::EncodeSection(std::string_view section, bool first_section, std::vector<int32_t>* ids) const {
  std::string s(section);
  for (const NormStep& n : norm_) {
    switch (n.kind) {
      case NormStep::kNfc: s = text::ToNfc(s); break;
      case NormStep::kPrepend: if (!s.empty()) s = Concat(n.a, s); break;
      case NormStep::kReplace: s = ReplaceAll(s, n.a, n.b); break;
    }
  }
  if (s.empty()) return;
  // Added tokens that match normalized text.
  std::vector<std::string_view> parts;
  std::vector<const AddedToken*> part_tok;
  {
    size_t pos = 0;
    const AddedToken* tok = nullptr;
    for (size_t k; (k = normalized_splitter_.Find(s, pos, &tok)) != std::string_view::npos; pos = k + tok->content.size()) {
      parts.push_back(std::string_view(s).substr(pos, k - pos));
      part_tok.push_back(nullptr);
      parts.push_back(tok->content);
      part_tok.push_back(tok);
    }
    parts.push_back(std::string_view(s).substr(pos));
    part_tok.push_back(nullptr);
  }
  thread_local std::vector<std::pair<uint32_t, uint32_t>> ranges;
  std::deque<std::string> owned;  // pieces a pre-tokenizer rewrote
  std::vector<std::string_view> cur, next;
  for (size_t p = 0; p < parts.size(); ++p) {
    if (part_tok[p]) {
      ids->push_back(part_tok[p]->id);
      continue;
    }
    if (parts[p].empty()) continue;
    cur.assign(1, parts[p]);
    for (const PreStep& step : pre_) {
      next.clear();
      for (std::string_view piece : cur) {
        switch (step.kind) {
          case PreStep::kByteLevel:
            if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
              owned.push_back(Concat(" ", piece));
              piece = owned.back();
            }
            if (!step.use_regex) {
              next.push_back(piece);
              break;
            }
            [[fallthrough]];
          case PreStep::kSplit:
            ranges.clear();
            SplitText(step.pattern, piece, &ranges);
            for (auto [b, e] : ranges) next.push_back(piece.substr(b, e - b));
            break;
          case PreStep::kMetaspace: {
            std::string r = ReplaceAll(piece, " ", step.replacement);
            const bool prepend = step.prepend_scheme == "always" || (step.prepend_scheme == "first" && first_section);
            if (prepend && r.compare(0, step.replacement.size(), step.replacement) != 0) r = Concat(step.replacement, r);
            owned.push_back(std::move(r));
            next.push_back(owned.back());
            break;
          }
        }
      }
      std::swap(cur, next);
    }
    for (std::string_view piece : cur) model_->EncodeWord(piece, ids);
  }
}

void HfTokenizer::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  struct Section {
    std::string_view text;
    const AddedToken* tok = nullptr;
  };
  std::vector<Section> sections;
  size_t pos = 0;
  const AddedToken* tok = nullptr;
  for (size_t k; (k = raw_splitter_.Find(text, pos, &tok)) != std::string_view::npos; pos = k + tok->content.size()) {
    sections.push_back({text.substr(pos, k - pos)});
    sections.push_back({tok->content, tok});
  }
  sections.push_back({text.substr(pos)});
  for (size_t i = 0; i < sections.size(); ++i) {
    if (!sections[i].tok) continue;
    if (sections[i].tok->lstrip && i > 0) sections[i - 1].text = TrimEnd(sections[i - 1].text);
    if (sections[i].tok->rstrip && i + 1 < sections.size()) sections[i + 1].text = TrimStart(sections[i + 1].text);
  }
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].tok) ids->push_back(sections[i].tok->id);
    else if (!sections[i].text.empty()) EncodeSection(sections[i].text, i == 0, ids);
  }
}

std::string HfTokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  const bool byte_level = model_->options().byte_level;
  for (int32_t id : ids) {
    bool added = false;
    for (const auto& a : added_) {
      if (a.id == id) {
        out += a.content;
        added = true;
        break;
      }
    }
    if (added) continue;
    const std::string* piece = model_->Piece(id);
    if (!piece) continue;
    if (byte_level) {
      out += *piece;
    } else if (int byte = ByteFallbackValue(*piece); byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out += ReplaceAll(*piece, kMetaspace, " ");
    }
  }
  if (strip_decoded_prefix_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

}  // namespace shard
