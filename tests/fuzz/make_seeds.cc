// Writes one small valid input per fuzz target, made by shardd's own writers,
// so the committed seed corpora (tests/fuzz/corpus/<target>/) track the
// formats: `make_fuzz_seeds OUT_DIR` then copy what changed. Not a test.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shard/ckpt/copy_header.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/safetensors.h"
#include "shard/ckpt/shard_file.h"
#include "shard/common/file_util.h"
#include "shard/data/prepared_dataset.h"
#include "shard/data/reference_file.h"
#include "shard/spec/llama_config.h"

namespace fs = std::filesystem;
using namespace shard;

namespace {

void Put(const fs::path& dir, const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir / target);
  std::ofstream(dir / target / name, std::ios::binary) << bytes;
}

std::string Slurp(const fs::path& p) {
  auto s = ReadFileToString(p.string());
  return s.ok() ? *s : "";
}

int Fail(const Status& st) {
  std::fprintf(stderr, "make_fuzz_seeds: %s\n", st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path tmp = out / ".tmp";
  fs::create_directories(tmp);

  LlamaConfig tiny = *LlamaPreset("tiny");
  Put(out, "fuzz_config_json", "tiny.json", tiny.ToHfConfigJson());
  Put(out, "fuzz_config_json", "llama3.1-8b.json", LlamaPreset("llama3.1-8b")->ToHfConfigJson());

  // A two-file step: the manifest and the shard file of rank 0.
  ShardHeader h;
  h.step = 10, h.world = 2, h.rank = 0, h.shard_rank = 0, h.shard_count = 2, h.model_hash = tiny.ShapeHash();
  h.units = {{"embed", 8, 0, 4, 0}, {"layer0", 6, 0, 3, 48}};
  std::vector<float> p(4, 0.5f), m(4, 0.01f), v(4, 0.001f);
  auto written = WriteShardFile(tmp.string(), h, {{p.data(), m.data(), v.data()}, {p.data(), m.data(), v.data()}});
  if (!written.ok()) return Fail(written.status());
  Put(out, "fuzz_shard_file", "rank0.shard", Slurp(tmp / written->name));
  Manifest man;
  man.job = "tiny", man.step = 10, man.world = 2, man.strategy = "full_shard", man.shard_count = 2;
  man.model_hash = tiny.ShapeHash(), man.model_config = tiny.ToHfConfigJson();
  man.units = {{"embed", 8}, {"layer0", 6}};
  man.files = {{written->name, 0, written->size, written->xxh64}, {"rank_00001-of-00002.shard", 1, 512, 7}};
  man.samples_seen = 80, man.seed = 1234, man.global_batch = 8, man.total_steps = 100, man.tokens_seen = 1280;
  man.optimizer_steps = 10, man.data_fingerprint = "sft:0123456789abcdef";
  Put(out, "fuzz_manifest", "COMMITTED", man.ToJson());

  // safetensors: an F32 and a BF16 tensor.
  const std::string st_path = (tmp / "model.safetensors").string();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    auto w = SafetensorsWriter::Create(st_path, {{"a", {2, 2}}, {"b", {3}}}, dt, {{"format", "pt"}});
    if (!w.ok()) return Fail(w.status());
    std::vector<float> x{1, -2, 3.5f, 0.25f};
    if (Status st = w->Write("a", x.data()); !st.ok()) return Fail(st);
    if (Status st = w->Write("b", x.data()); !st.ok()) return Fail(st);
    if (Status st = w->Finish(); !st.ok()) return Fail(st);
    Put(out, "fuzz_safetensors", dt == DType::kF32 ? "f32.safetensors" : "bf16.safetensors", Slurp(st_path));
  }
  // The index beside the fuzzer's two one-tensor shards ("a" and "b").
  Put(out, "fuzz_hf_index", "index.json",
      "{\"metadata\": {\"total_size\": 16}, \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
      "\"b\": \"model-00002-of-00002.safetensors\"}}\n");

  PreparedHeader ph;
  ph.tokenizer_kind = "hf-bpe", ph.tokenizer_hash = 42, ph.vocab_size = 128256, ph.tokenizer_spec = "tok.json";
  ph.chat_template = "llama3", ph.train_on = "assistant", ph.seq_len = 512, ph.num_samples = 3;
  ph.num_tokens = 300, ph.num_target_tokens = 120, ph.max_token_id = 128000, ph.source_path = "data.jsonl";
  ph.source_bytes = 999, ph.source_hash = 77, ph.rows_read = 4, ph.bad_rows_skipped = 1;
  Put(out, "fuzz_prepared_header", "prepared.json", ph.ToJson());

  Put(out, "fuzz_jsonl_row", "messages.json",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, )"
      R"({"role": "assistant", "content": "Hello!"}]})");
  Put(out, "fuzz_jsonl_row", "prompt.json", R"({"prompt": "2+2?", "response": "4", "system": "math", "id": 7})");
  Put(out, "fuzz_jsonl_row", "pair.json", R"({"prompt": "2+2?", "chosen": "4", "rejected": "5", "system": "math"})");
  Put(out, "fuzz_jsonl_row", "pair-messages.json",
      R"({"prompt": [{"role": "user", "content": "Hi"}], "chosen": [{"role": "assistant", "content": "Hello!"}], )"
      R"("rejected": [{"role": "assistant", "content": "Go away."}]})");

  // A partner copy's PUT and GET headers, and a reference file of 3 pairs.
  CopyHeader put;
  put.key = "0123456789abcdef0123456789abcdef", put.op = kCopyPut, put.step = "step_00000030";
  put.name = "rank_00000_of_00002.shard", put.size = 4096, put.xxh64 = 0x1234abcdULL;
  Put(out, "fuzz_copy_header", "put.bin", EncodeCopyHeader(put));
  CopyHeader get = put;
  get.op = kCopyGet;
  Put(out, "fuzz_copy_header", "get.bin", EncodeCopyHeader(get));
  Put(out, "fuzz_reference_file", "three-pairs.f64", EncodeReferenceFile({-12.5, -14.25, -3.0, -3.5, -40.0, -39.0}));
  fs::remove_all(tmp);
  return 0;
}
