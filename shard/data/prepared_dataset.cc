#include "shard/data/prepared_dataset.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "shard/common/checksum.h"
#include "shard/common/json_int.h"

namespace shard {
namespace {

using json = nlohmann::json;
constexpr const char* kFormat = "shardd-sft";

std::string Errno() { return std::strerror(errno); }

Status CloseSynced(std::FILE** f, const std::string& path) {
  if (!*f) return OkStatus();
  bool ok = std::fflush(*f) == 0 && ::fsync(::fileno(*f)) == 0;
  ok &= std::fclose(*f) == 0;
  *f = nullptr;
  return ok ? OkStatus() : DataLoss("writing " + path + ": " + Errno());
}

std::string DirOf(const std::string& path) {
  auto d = std::filesystem::path(path).parent_path();
  return d.empty() ? "." : d.string();
}

}  // namespace

std::string PreparedHeader::ToJson() const {
  json j;
  j["format"] = kFormat;
  j["version"] = version;
  j["tokenizer"] = {{"kind", tokenizer_kind}, {"hash", HashToHex(tokenizer_hash)}, {"vocab_size", vocab_size},
                    {"spec", tokenizer_spec}};
  j["template"] = chat_template;
  j["train_on"] = train_on;
  j["seq_len"] = seq_len;
  j["num_samples"] = num_samples;
  j["num_tokens"] = num_tokens;
  j["num_target_tokens"] = num_target_tokens;
  j["max_token_id"] = max_token_id;
  j["longer_than_seq_len"] = longer_than_seq_len;
  j["source"] = {{"path", source_path}, {"bytes", source_bytes}, {"xxh64", HashToHex(source_hash)}};
  j["rows"] = {{"read", rows_read}, {"bad_skipped", bad_rows_skipped}};
  if (has_file_hashes)
    j["files"] = {{"tokens_xxh64", HashToHex(tokens_hash)}, {"mask_xxh64", HashToHex(mask_hash)},
                  {"index_xxh64", HashToHex(index_hash)}};
  if (pairs)
    j["pairs"] = {{"overlong", overlong}, {"overlong_dropped", overlong_pairs_dropped}, {"identical", identical_pairs}};
  return j.dump(2) + "\n";
}

StatusOr<PreparedHeader> PreparedHeader::FromJson(const std::string& text, const std::string& origin) {
  PreparedHeader h;
  try {
    const json j = json::parse(text);
    if (!j.is_object() || j.value("format", "") != kFormat)
      return DataLoss(origin + ": not a shardd prepared-dataset header (format is not \"shardd-sft\")");
    h.version = JsonInt<int>(j.at("version"));
    if (h.version != kPreparedFormatVersion)
      return InvalidArgument(origin + ": format version " + std::to_string(h.version) + ", this shardd reads version " +
                                std::to_string(kPreparedFormatVersion) + " (prepare the data again)");
    const json& t = j.at("tokenizer");
    h.tokenizer_kind = t.at("kind").get<std::string>();
    ASSIGN_OR_RETURN(h.tokenizer_hash, HashFromHex(t.at("hash").get<std::string>()));
    h.vocab_size = JsonInt<int64_t>(t.at("vocab_size"));
    h.tokenizer_spec = t.value("spec", "");
    h.chat_template = j.at("template").get<std::string>();
    h.train_on = j.at("train_on").get<std::string>();
    h.seq_len = JsonInt<int64_t>(j.at("seq_len"));
    h.num_samples = JsonInt<int64_t>(j.at("num_samples"));
    h.num_tokens = JsonInt<int64_t>(j.at("num_tokens"));
    h.num_target_tokens = JsonInt<int64_t>(j.at("num_target_tokens"));
    h.max_token_id = JsonInt<int64_t>(j.at("max_token_id"));
    h.longer_than_seq_len = JsonIntOr<int64_t>(j, "longer_than_seq_len", 0);
    if (j.contains("source")) {
      h.source_path = j["source"].value("path", "");
      h.source_bytes = JsonIntOr<int64_t>(j["source"], "bytes", 0);
      ASSIGN_OR_RETURN(h.source_hash, HashFromHex(j["source"].value("xxh64", std::string(16, '0'))));
    }
    if (j.contains("rows")) {
      h.rows_read = JsonIntOr<int64_t>(j["rows"], "read", 0);
      h.bad_rows_skipped = JsonIntOr<int64_t>(j["rows"], "bad_skipped", 0);
    }
    if (j.contains("files")) {
      const json& f = j.at("files");
      ASSIGN_OR_RETURN(h.tokens_hash, HashFromHex(f.at("tokens_xxh64").get<std::string>()));
      ASSIGN_OR_RETURN(h.mask_hash, HashFromHex(f.at("mask_xxh64").get<std::string>()));
      ASSIGN_OR_RETURN(h.index_hash, HashFromHex(f.at("index_xxh64").get<std::string>()));
      h.has_file_hashes = true;
    }
    if (j.contains("pairs")) {
      h.pairs = true;
      h.overlong = j["pairs"].value("overlong", "");
      h.overlong_pairs_dropped = JsonIntOr<int64_t>(j["pairs"], "overlong_dropped", 0);
      h.identical_pairs = JsonIntOr<int64_t>(j["pairs"], "identical", 0);
      if (h.num_samples % 2 != 0)
        return DataLoss(origin + ": a dataset of pairs holds an odd number of samples (" +
                        std::to_string(h.num_samples) + ")");
    }
  } catch (const json::exception& e) {
    return DataLoss(origin + ": bad header: " + e.what());
  }
  if (h.num_samples <= 0 || h.num_tokens < 2 * h.num_samples || h.num_target_tokens < 0 || h.vocab_size <= 0 ||
      h.max_token_id >= h.vocab_size || h.seq_len <= 0)
    return DataLoss(origin + ": header counts are inconsistent (samples " + std::to_string(h.num_samples) + ", tokens " +
                    std::to_string(h.num_tokens) + ", vocab " + std::to_string(h.vocab_size) + ", max id " +
                    std::to_string(h.max_token_id) + ", seq_len " + std::to_string(h.seq_len) + ")");
  return h;
}

// ---- Writer -------------------------------------------------------------------

StatusOr<std::unique_ptr<PreparedWriter>> PreparedWriter::Create(const std::string& prefix) {
  std::unique_ptr<PreparedWriter> w(new PreparedWriter(prefix));
  std::error_code ec;
  std::filesystem::create_directories(DirOf(prefix), ec);
  for (auto [f, path] : {std::pair{&w->tokens_, &w->paths_.tokens}, {&w->mask_, &w->paths_.mask}, {&w->index_, &w->paths_.index}}) {
    *f = std::fopen((*path + ".tmp").c_str(), "wb");
    if (!*f) return NotFound("cannot create " + *path + ".tmp: " + Errno());
    std::setvbuf(*f, nullptr, _IOFBF, 1 << 20);
  }
  const uint64_t zero = 0;
  RETURN_IF_ERROR(w->Write(w->index_, &w->index_hash_, &zero, sizeof(zero), w->paths_.index));
  return w;
}

PreparedWriter::~PreparedWriter() {
  for (std::FILE* f : {tokens_, mask_, index_})
    if (f) std::fclose(f);
  if (!finished_)
    for (const std::string* p : {&paths_.tokens, &paths_.mask, &paths_.index}) std::remove((*p + ".tmp").c_str());
}

Status PreparedWriter::Write(std::FILE* f, Xxh64Stream* hash, const void* p, size_t n, const std::string& path) {
  hash->Update(p, n);
  if (n && std::fwrite(p, 1, n, f) != n) return DataLoss("writing " + path + ".tmp: " + Errno());
  return OkStatus();
}

Status PreparedWriter::Add(const TokenizedSample& s) {
  SHARD_CHECK(s.tokens.size() == s.mask.size());
  static_assert(std::endian::native == std::endian::little, "the prepared format is little-endian");
  for (int32_t t : s.tokens) {
    if (t < 0) return InvalidArgument("negative token id " + std::to_string(t));
    max_id_ = std::max<int64_t>(max_id_, t);
  }
  RETURN_IF_ERROR(Write(tokens_, &tokens_hash_, s.tokens.data(), s.tokens.size() * sizeof(int32_t), paths_.tokens));
  RETURN_IF_ERROR(Write(mask_, &mask_hash_, s.mask.data(), s.mask.size(), paths_.mask));
  tokens_n_ += static_cast<int64_t>(s.tokens.size());
  const uint64_t end = static_cast<uint64_t>(tokens_n_);
  RETURN_IF_ERROR(Write(index_, &index_hash_, &end, sizeof(end), paths_.index));
  targets_ += s.targets();
  ++samples_;
  return OkStatus();
}

Status PreparedWriter::Finish(PreparedHeader h) {
  if (samples_ == 0) return InvalidArgument("no usable rows: the prepared dataset would be empty");
  h.version = kPreparedFormatVersion;
  h.num_samples = samples_;
  h.num_tokens = tokens_n_;
  h.num_target_tokens = targets_;
  h.max_token_id = max_id_;
  h.has_file_hashes = true;
  h.tokens_hash = tokens_hash_.Digest();
  h.mask_hash = mask_hash_.Digest();
  h.index_hash = index_hash_.Digest();
  RETURN_IF_ERROR(CloseSynced(&tokens_, paths_.tokens));
  RETURN_IF_ERROR(CloseSynced(&mask_, paths_.mask));
  RETURN_IF_ERROR(CloseSynced(&index_, paths_.index));
  // An old header must never describe the new files: remove it first.
  std::remove(paths_.header.c_str());
  for (const std::string* p : {&paths_.tokens, &paths_.mask, &paths_.index})
    if (std::rename((*p + ".tmp").c_str(), p->c_str()) != 0) return DataLoss("renaming " + *p + ".tmp: " + Errno());
  RETURN_IF_ERROR(FsyncDir(DirOf(paths_.header)));
  RETURN_IF_ERROR(WriteFileAtomic(paths_.header, h.ToJson()));
  finished_ = true;
  return OkStatus();
}

// ---- Reader -------------------------------------------------------------------

StatusOr<PreparedDataset> PreparedDataset::Open(const std::string& prefix, const OpenOptions& options) {
  const PreparedPaths paths(prefix);
  PreparedDataset d;
  d.prefix_ = prefix;
  auto text = ReadFileToString(paths.header);
  if (!text.ok())
    return text.status().WithContext("prepared dataset " + prefix + " (run shardctl prepare-data first)");
  ASSIGN_OR_RETURN(d.header_, PreparedHeader::FromJson(*text, paths.header));
  const PreparedHeader& h = d.header_;
  ASSIGN_OR_RETURN(d.tokens_file_, MappedFile::Open(paths.tokens));
  ASSIGN_OR_RETURN(d.mask_file_, MappedFile::Open(paths.mask));
  ASSIGN_OR_RETURN(d.index_file_, MappedFile::Open(paths.index));
  auto size_check = [](const MappedFile& f, uint64_t want, const std::string& what) -> Status {
    if (f.size() != want)
      return DataLoss(f.path() + ": " + std::to_string(f.size()) + " bytes, the header's counts need " + std::to_string(want) +
                      " (" + what + "); the files do not belong together or are truncated");
    return OkStatus();
  };
  RETURN_IF_ERROR(size_check(d.tokens_file_, 4ull * h.num_tokens, "4 bytes per token"));
  RETURN_IF_ERROR(size_check(d.mask_file_, 1ull * h.num_tokens, "1 byte per token"));
  RETURN_IF_ERROR(size_check(d.index_file_, 8ull * (h.num_samples + 1), "8 bytes per sample + 1"));
  d.tokens_ = reinterpret_cast<const uint32_t*>(d.tokens_file_.data());
  d.mask_ = d.mask_file_.data();
  d.index_ = reinterpret_cast<const uint64_t*>(d.index_file_.data());
  if (d.index_[0] != 0 || d.index_[h.num_samples] != static_cast<uint64_t>(h.num_tokens))
    return DataLoss(paths.index + ": offsets must run from 0 to num_tokens " + std::to_string(h.num_tokens));
  for (int64_t i = 0; i < h.num_samples; ++i)
    if (d.index_[i + 1] < d.index_[i] + 2)
      return DataLoss(paths.index + ": sample " + std::to_string(i) + " has offsets " + std::to_string(d.index_[i]) + ".." +
                      std::to_string(d.index_[i + 1]) + " (out of order or shorter than 2 tokens)");
  if (options.verify_contents) {
    int64_t targets = 0, max_id = -1;
    for (int64_t i = 0; i < h.num_samples; ++i) {
      for (uint64_t k = d.index_[i]; k < d.index_[i + 1]; ++k) {
        const uint8_t m = d.mask_[k];
        if (m > 1) return DataLoss(paths.mask + ": byte " + std::to_string(k) + " is " + std::to_string(m) + ", not 0 or 1");
        if (k > d.index_[i]) targets += m;
        max_id = std::max<int64_t>(max_id, d.tokens_[k]);
      }
    }
    if (max_id >= h.vocab_size)
      return DataLoss(paths.tokens + ": token id " + std::to_string(max_id) + " is outside the tokenizer's vocabulary of " +
                      std::to_string(h.vocab_size));
    if (targets != h.num_target_tokens || max_id != h.max_token_id)
      return DataLoss(prefix + ": the files hold " + std::to_string(targets) + " target tokens (max id " +
                      std::to_string(max_id) + ") but the header says " + std::to_string(h.num_target_tokens) +
                      " (max id " + std::to_string(h.max_token_id) + ")");
  }
  // Last: the checks above name the problem when they can; this catches the
  // rest (a token flipped to another valid id, a mask bit 1 ↔ 0).
  if (options.verify_checksums && h.has_file_hashes) {
    for (auto [f, want] : {std::pair<const MappedFile*, uint64_t>{&d.tokens_file_, h.tokens_hash},
                           {&d.mask_file_, h.mask_hash},
                           {&d.index_file_, h.index_hash}}) {
      const uint64_t got = Xxh64(f->data(), f->size());
      if (got != want)
        return DataLoss(f->path() + " fails its checksum (xxh64 " + HashToHex(got) + ", " + paths.header + " says " +
                        HashToHex(want) + "): the prepared data was changed after it was written; prepare it again");
    }
  }
  return d;
}

Status PreparedDataset::CheckVocab(int64_t model_vocab_size) const {
  if (header_.max_token_id >= model_vocab_size)
    return InvalidArgument("prepared dataset " + prefix_ + " holds token id " + std::to_string(header_.max_token_id) +
                              " but the model's vocabulary has " + std::to_string(model_vocab_size) +
                              " entries (tokenizer " + header_.tokenizer_kind + " " + header_.tokenizer_spec +
                              " does not match the model)");
  return OkStatus();
}

}  // namespace shard
