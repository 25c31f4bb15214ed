#include "shard/data/prepare_sft.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "shard/common/checksum.h"
#include "shard/common/logging.h"
#include "shard/data/chat_format.h"
#include "shard/data/preference_jsonl.h"
#include "shard/data/sft_jsonl.h"

namespace shard {
namespace {

constexpr size_t kBatchLines = 4096;

struct RowResult {
  Status status;
  TokenizedSample sample;
  TokenizedSample rejected;  // pairs: sample is the chosen reply
};

// One line into `r`: a conversation, or (format preference) a pair.
void TokenizeRow(std::string_view line, SftFormat format, SftFormat also, const ChatFormat& tpl, const Tokenizer& tok,
                 TrainOn on, RowResult* r) {
  if (format == SftFormat::kPreference) {
    auto row = ParsePreferenceRow(line);
    if (!row.ok()) {
      r->status = row.status();
      return;
    }
    TokenizedPair pair;
    r->status = RenderPreferencePair(*row, tpl, tok, &pair);
    r->sample = std::move(pair.chosen);
    r->rejected = std::move(pair.rejected);
    return;
  }
  auto msgs = ParseSftRow(line, format, also);
  if (!msgs.ok()) {
    r->status = msgs.status();
    return;
  }
  r->status = tpl.Apply(*msgs, tok, on, &r->sample);
}

// Tokenizes lines[i] into results[i] on `threads` threads (the caller is one).
void TokenizeBatch(const std::vector<std::string_view>& lines, SftFormat format, SftFormat also, const ChatFormat& tpl,
                   const Tokenizer& tok, TrainOn on, int threads, std::vector<RowResult>* results) {
  results->resize(lines.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(16)) < lines.size();) {
      for (size_t k = i; k < std::min(i + 16, lines.size()); ++k) {
        TokenizeRow(lines[k], format, also, tpl, tok, on, &(*results)[k]);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

// Every file prepare-data reads: the JSONL and, unless built in, the tokenizer
// (a file, or every file of a tokenizer folder).
std::vector<std::filesystem::path> InputFiles(const PrepareSftOptions& o) {
  namespace fs = std::filesystem;
  std::vector<fs::path> in{o.input};
  std::error_code ec;
  if (fs::is_directory(o.tokenizer, ec)) {
    for (const auto& e : fs::directory_iterator(o.tokenizer, ec))
      if (e.is_regular_file(ec)) in.push_back(e.path());
  } else if (fs::exists(o.tokenizer, ec)) {
    in.push_back(o.tokenizer);
  }
  return in;
}

// format auto: the format of the file's first row that has one (blank and
// unparseable rows are skipped here; they fail on their own later).
SftFormat FileFormat(std::string_view text, SftFormat asked) {
  if (asked != SftFormat::kAuto) return asked;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    pos = end + 1;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (auto f = DetectSftFormat(l); f.ok()) return *f;
  }
  return SftFormat::kAuto;
}

}  // namespace

Status CheckOutputsSpareInputs(const PrepareSftOptions& o) {
  namespace fs = std::filesystem;
  const PreparedPaths out(o.out);
  std::vector<std::string> outputs;
  for (const std::string* p : {&out.tokens, &out.mask, &out.index, &out.header}) {
    outputs.push_back(*p);
    outputs.push_back(*p + ".tmp");
  }
  for (const fs::path& in : InputFiles(o)) {
    std::error_code ec;
    const fs::path in_real = fs::weakly_canonical(in, ec);
    for (const std::string& o_path : outputs) {
      std::error_code ec2, ec3;
      // Same resolved path, or the same file under another name (a hard link).
      const bool same = (!ec && fs::weakly_canonical(o_path, ec2) == in_real && !ec2) ||
                        (fs::exists(o_path, ec3) && fs::equivalent(o_path, in, ec3) && !ec3);
      if (same)
        return InvalidArgument("prepare-data: output " + o_path + " would overwrite the input " + in.string() +
                               " (choose another --out / data.prepared prefix: the outputs are PREFIX.tokens, "
                               ".mask, .index and .json)");
    }
  }
  return OkStatus();
}

Status PrepareSftOptions::Validate() const {
  if (input.empty()) return InvalidArgument("prepare-data: --input (a JSONL file) is required");
  if (out.empty()) return InvalidArgument("prepare-data: --out PREFIX is required");
  if (seq_len <= 0) return InvalidArgument("prepare-data: --seq-len must be > 0");
  if (!IsChatFormatSpec(chat_template))
    return InvalidArgument("prepare-data: template '" + chat_template +
                           "' is not one of auto, hf, hf:NAME, plain, llama2, llama3, chatml");
  // Here, so every entry point (shardctl prepare-data, a job's EnsurePrepared)
  // refuses before loading or writing anything.
  return CheckOutputsSpareInputs(*this);
}

StatusOr<PrepareSftResult> PrepareSftData(const PrepareSftOptions& o) {
  RETURN_IF_ERROR(o.Validate());
  ASSIGN_OR_RETURN(auto tok, LoadTokenizer(o.tokenizer));
  return PrepareSftData(o, *tok);
}

namespace {

// The header of what PrepareSftData writes, before any row is read.
PreparedHeader NewHeader(const PrepareSftOptions& o, const Tokenizer& tok, const ChatFormat& tpl,
                         std::string_view text, bool pairs) {
  PreparedHeader h;
  h.tokenizer_kind = tok.kind();
  h.tokenizer_hash = tok.hash();
  h.vocab_size = tok.vocab_size();
  h.tokenizer_spec = o.tokenizer;
  h.chat_template = tpl.Name();
  h.train_on = TrainOnName(o.train_on);
  h.seq_len = o.seq_len;
  h.source_path = o.input;
  h.source_bytes = static_cast<int64_t>(text.size());
  h.source_hash = Xxh64(text.data(), text.size());
  if (pairs) {
    h.pairs = true;
    h.overlong = OverlongName(o.overlong);
  }
  return h;
}

// The next kBatchLines non-blank lines of text from *pos on (a trailing CR dropped),
// each with its 1-based line number; *line counts every line read.
void NextLines(std::string_view text, size_t* pos, int64_t* line, std::vector<std::string_view>* lines,
               std::vector<int64_t>* line_no) {
  lines->clear();
  line_no->clear();
  while (*pos < text.size() && lines->size() < kBatchLines) {
    size_t end = text.find('\n', *pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(*pos, end - *pos);
    *pos = end + 1;
    ++*line;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank
    lines->push_back(l);
    line_no->push_back(*line);
  }
}

// One tokenized row into the writer: a preference pair fitted to seq_len + 1
// (or left out, counted), else the sample; rows longer than that counted.
Status AddRow(const PrepareSftOptions& o, bool pairs, RowResult& row, PreparedHeader& h, PreparedWriter& writer) {
  if (pairs) {
    TokenizedPair pair{std::move(row.sample), std::move(row.rejected)};
    const int64_t longest = static_cast<int64_t>(std::max(pair.chosen.tokens.size(), pair.rejected.tokens.size()));
    if (longest > o.seq_len + 1) ++h.longer_than_seq_len;
    if (!FitPair(&pair, o.seq_len, o.overlong)) {
      ++h.overlong_pairs_dropped;
      return OkStatus();
    }
    if (pair.chosen.tokens == pair.rejected.tokens && pair.chosen.mask == pair.rejected.mask)
      ++h.identical_pairs;  // kept (a valid row), but its margin is 0 at every step: reported once
    RETURN_IF_ERROR(writer.Add(pair.chosen));
    return writer.Add(pair.rejected);
  }
  if (static_cast<int64_t>(row.sample.tokens.size()) > o.seq_len + 1) ++h.longer_than_seq_len;
  return writer.Add(row.sample);
}

}  // namespace

StatusOr<PrepareSftResult> PrepareSftData(const PrepareSftOptions& o, const Tokenizer& tok) {
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(o.Validate());
  ASSIGN_OR_RETURN(ChatFormat tpl, ResolveChatFormat(o.chat_template, o.tokenizer));
  RETURN_IF_ERROR(tpl.CheckTokens(tok));
  if (std::filesystem::exists(o.input) && std::filesystem::file_size(o.input) == 0)
    return InvalidArgument("prepare-data: " + o.input + " is empty");
  ASSIGN_OR_RETURN(MappedFile in, MappedFile::Open(o.input));
  const std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
  const int threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  const SftFormat asked = o.format;
  const SftFormat format = FileFormat(text, asked);
  // auto: the two formats shardd always read together may still share a file.
  const SftFormat also = asked != SftFormat::kAuto       ? SftFormat::kAuto
                         : format == SftFormat::kMessages ? SftFormat::kPromptResponse
                         : format == SftFormat::kPromptResponse ? SftFormat::kMessages
                                                               : SftFormat::kAuto;

  const bool pairs = format == SftFormat::kPreference;
  PrepareSftResult res;
  res.header = NewHeader(o, tok, tpl, text, pairs);
  PreparedHeader& h = res.header;

  ASSIGN_OR_RETURN(auto writer, PreparedWriter::Create(o.out));
  std::vector<std::string_view> lines;
  std::vector<int64_t> line_no;
  std::vector<RowResult> results;
  int64_t line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    NextLines(text, &pos, &line, &lines, &line_no);
    TokenizeBatch(lines, format, also, tpl, tok, o.train_on, threads, &results);
    for (size_t i = 0; i < lines.size(); ++i) {
      ++h.rows_read;
      if (!results[i].status.ok()) {
        const std::string msg = o.input + ":" + std::to_string(line_no[i]) + ": " + results[i].status.message();
        if (o.bad_rows == BadRows::kFail)
          return InvalidArgument(msg + " (pass --bad-rows skip to leave such rows out)");
        ++h.bad_rows_skipped;
        if (static_cast<int>(res.bad_rows.size()) < o.report_bad_rows) {
          res.bad_rows.push_back(msg);
          LOG_WARN("skipping bad row {}", msg);
        }
        continue;
      }
      const int64_t identical = h.identical_pairs;
      RETURN_IF_ERROR(AddRow(o, pairs, results[i], h, *writer));
      if (identical == 0 && h.identical_pairs > 0) res.identical_pairs_first_line = line_no[i];
    }
  }
  if (h.bad_rows_skipped > 0)
    LOG_WARN("{}: skipped {} bad rows of {}", o.input, h.bad_rows_skipped, h.rows_read);
  if (h.overlong_pairs_dropped > 0)
    LOG_WARN("{}: left out {} pairs longer than seq_len + 1 = {} tokens (overlong {}) or with a reply cut to no "
             "target", o.input, h.overlong_pairs_dropped, o.seq_len + 1, h.overlong);
  if (h.identical_pairs > 0)
    LOG_WARN("{}: {} pairs have the same chosen and rejected reply (the first at line {}); they train nothing",
             o.input, h.identical_pairs, res.identical_pairs_first_line);
  auto st = writer->Finish(h);
  if (!st.ok()) return st.WithContext("prepare-data " + o.out + " from " + o.input);
  ASSIGN_OR_RETURN(PreparedDataset check,
                   PreparedDataset::Open(o.out, {.verify_contents = false, .verify_checksums = false}));
  res.header = check.header();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

StatusOr<bool> PreparedIsCurrent(const PrepareSftOptions& o, const Tokenizer& tok) {
  RETURN_IF_ERROR(o.Validate());
  // The checksums are what catches a flipped token inside the vocabulary: a
  // cache that fails them is not current, so the job prepares it again (and
  // says why). One written before checksums were recorded is prepared again
  // too, so every reused cache is a verified one.
  auto ds = PreparedDataset::Open(o.out, {.verify_contents = false, .verify_checksums = true});
  if (!ds.ok()) {
    if (ds.status().code() == StatusCode::kDataLoss) LOG_WARN("not reusing {}: {}", o.out, ds.status().message());
    return false;
  }
  const PreparedHeader& h = ds->header();
  if (!h.has_file_hashes) {
    LOG_WARN("not reusing {}: its header has no checksums of its files (an older shardd wrote it)", o.out);
    return false;
  }
  ASSIGN_OR_RETURN(ChatFormat tpl, ResolveChatFormat(o.chat_template, o.tokenizer));
  if (h.tokenizer_hash != tok.hash() || h.chat_template != tpl.Name() || h.train_on != TrainOnName(o.train_on) ||
      h.seq_len != o.seq_len || (h.bad_rows_skipped > 0 && o.bad_rows == BadRows::kFail))
    return false;
  // Pairs are fitted to seq_len when prepared: another overlong is another dataset.
  if (o.format != SftFormat::kAuto && h.pairs != (o.format == SftFormat::kPreference)) return false;
  if (h.pairs && h.overlong != OverlongName(o.overlong)) return false;
  ASSIGN_OR_RETURN(MappedFile in, MappedFile::Open(o.input));
  return static_cast<int64_t>(in.size()) == h.source_bytes && Xxh64(in.data(), in.size()) == h.source_hash;
}

StatusOr<bool> EnsurePrepared(const PrepareSftOptions& o) {
  RETURN_IF_ERROR(o.Validate());
  ASSIGN_OR_RETURN(auto tok, LoadTokenizer(o.tokenizer));
  ASSIGN_OR_RETURN(bool current, PreparedIsCurrent(o, *tok));
  if (current) {
    LOG_INFO("reusing the prepared dataset {} (same input, tokenizer, template, train_on, seq_len)", o.out);
    return false;
  }
  ASSIGN_OR_RETURN(PrepareSftResult r, PrepareSftData(o, *tok));
  LOG_INFO("prepared {}: {} samples, {} tokens, {} targets from {} in {:.1f} s", o.out, r.header.num_samples,
           r.header.num_tokens, r.header.num_target_tokens, o.input, r.seconds);
  return true;
}

}  // namespace shard
