// Host memory of a real multi-process run from an HF checkpoint: writes a
// random-weight HF folder at a Llama shape (~168M parameters), trains one step
// at W = 4 processes (gloo, CPU) starting from it (model.from_hf: each rank
// reads only its own shard's bytes), and prints each rank's peak RSS beside
// the planner's per-rank figure for the CPU engine and beside the
// whole-model-per-rank figure (every rank holding the fp32 model, what the
// loader did before issue 19). Exits 1 when a rank's peak is more than 10%
// from the planner's figure; --smoke runs a tiny model at W = 2 and judges
// nothing (CI: it starts, runs and prints its table). --precision P,
// --seq N, --micro-batch M and --world W change the job (defaults: fp32, 128,
// 1, 4): a longer micro-batch under bf16 shows the two-byte activations;
// --file-dtype fp32|bf16 (default bf16) is the safetensors' type; --keep-hf DIR
// writes the HF folder to DIR and keeps it; --shape V,D,F,L,H,K sets vocab,
// hidden, ffn, layers, heads and KV heads (default 32000,1024,2816,8,16,4) (to run the same model as a real
// job: `shardctl plan` / `shardctl run` with model.from_hf: DIR).
//
// --steps N trains N steps (default 1).
//
// Run: build/tests/bench/host_memory_bench [--smoke] [--precision bf16] [--file-dtype fp32] [--seq 512] [--micro-batch 2] [--world 2] [--keep-hf DIR] [--shape 50257,768,2048,12,12,12]
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "shard/common/kv_stores.h"
#include "shard/model/hf_io.h"
#include "shard/model/init.h"
#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "shard/train/trainer.h"

namespace fs = std::filesystem;
using namespace shard;

namespace {

int64_t StatusKiB(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream in(line.substr(key.size() + 1));
      int64_t kib = 0;
      in >> kib;
      return kib;
    }
  }
  return -1;
}

struct Shape {
  int vocab, d, ffn, layers, heads, kv_heads, seq, world;
};

// A random-weight HF folder (config.json + safetensors), one unit at a time.
Status WriteHfFolder(const std::string& dir, const LlamaConfig& c, DType file_dtype) {
  const ParamLayout layout = ParamLayout::ForLlama(c);
  return ExportHf(dir, c, layout, [&](int u, std::vector<float>* buf) {
    buf->assign(layout.units[u].numel, 0.0f);
    InitUnitParams(layout.units[u], u, /*seed=*/7, 0.02f, 0, layout.units[u].numel, buf->data());
    return OkStatus();
  }, file_dtype);
}

std::string WriteTokens(const std::string& path, int vocab) {
  std::mt19937 rng(5);
  std::vector<uint32_t> t(200000);
  for (auto& x : t) x = rng() % vocab;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  return path;
}

// One rank: train one step from the HF folder, then report the peak RSS.
int RunRank(const JobConfig& job, int steps, int rank, int world, const std::string& store_dir, const std::string& out) {
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);  // big buffers come from mmap: RSS follows what is held
  DistContext d;
  d.rank = rank;
  d.world = world;
  d.comm_backend = "gloo";
  d.store = std::make_shared<FileKvStore>(store_dir);
  d.prefix = "hostmem/";
  auto t = Trainer::Create(job, d);
  if (!t.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, t.status().ToString().c_str());
    return 1;
  }
  for (int i = 0; i < steps; ++i) {
    auto m = (*t)->Step();
    if (!m.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, m.status().ToString().c_str());
      return 1;
    }
  }
  std::ofstream(out) << StatusKiB("VmHWM") * 1024 << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  std::string precision = "fp32";
  DType file_dtype = DType::kBF16;
  int seq = 0, micro = 1, world = 0, steps = 1;
  std::string keep_hf;
  int shape[6] = {0, 0, 0, 0, 0, 0};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--smoke") {
      smoke = true;
    } else if (a == "--precision" && has_value) {
      precision = argv[++i];
    } else if (a == "--shape" && has_value) {
      if (std::sscanf(argv[++i], "%d,%d,%d,%d,%d,%d", &shape[0], &shape[1], &shape[2], &shape[3], &shape[4],
                      &shape[5]) != 6 ||
          *std::min_element(shape, shape + 6) <= 0) {
        std::fprintf(stderr, "host_memory_bench: --shape wants six positive integers V,D,F,L,H,K, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (a == "--keep-hf" && has_value) {
      keep_hf = argv[++i];
    } else if (a == "--file-dtype" && has_value) {
      const std::string v = argv[++i];
      if (v != "fp32" && v != "bf16") {
        std::fprintf(stderr, "host_memory_bench: --file-dtype wants fp32 or bf16, got '%s'\n", v.c_str());
        return 2;
      }
      file_dtype = v == "fp32" ? DType::kF32 : DType::kBF16;
    } else if ((a == "--seq" || a == "--micro-batch" || a == "--world" || a == "--steps") && has_value) {
      const int v = std::atoi(argv[++i]);
      if (v <= 0) {
        std::fprintf(stderr, "host_memory_bench: %s wants a positive integer, got '%s'\n", a.c_str(), argv[i]);
        return 2;
      }
      (a == "--seq" ? seq : a == "--world" ? world : a == "--steps" ? steps : micro) = v;
    } else {
      std::fprintf(stderr, "host_memory_bench: unknown or incomplete argument '%s'\n", a.c_str());
      return 2;
    }
  }
  // ~168M parameters: vocab 32000, d 1024, 8 layers, 16 heads (4 KV), ffn 2816, untied head.
  Shape s = smoke ? Shape{512, 128, 352, 2, 4, 2, 64, 2} : Shape{32000, 1024, 2816, 8, 16, 4, 128, 4};
  if (shape[0] > 0) {
    s.vocab = shape[0], s.d = shape[1], s.ffn = shape[2], s.layers = shape[3], s.heads = shape[4], s.kv_heads = shape[5];
  }
  if (seq > 0) s.seq = seq;
  if (world > 0) s.world = world;
  const std::string root = (fs::temp_directory_path() / ("shardd_host_memory_bench_" + std::to_string(getpid()))).string();
  fs::remove_all(root);
  fs::create_directories(root + "/store");
  LlamaConfig c;
  c.vocab_size = s.vocab;
  c.hidden_size = s.d;
  c.intermediate_size = s.ffn;
  c.num_layers = s.layers;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.max_position_embeddings = 2048;
  if (Status st = c.Validate(); !st.ok()) {
    std::fprintf(stderr, "host_memory_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  const std::string hf = keep_hf.empty() ? root + "/model" : keep_hf;
  if (Status st = WriteHfFolder(hf, c, file_dtype); !st.ok()) {
    std::fprintf(stderr, "host_memory_bench: writing %s: %s\n", hf.c_str(), st.ToString().c_str());
    return 1;
  }
  const std::string yaml = "name: hostmem\nmodel: {from_hf: " + hf + "}\ndata: {tokens: " +
                           WriteTokens(root + "/tokens.u32", s.vocab) + ", seq_len: " + std::to_string(s.seq) +
                           "}\ntrain: {steps: " + std::to_string(steps) + ", global_batch: " + std::to_string(s.world * micro) +
                           ", micro_batch: " + std::to_string(micro) + ", log_every: 1000, precision: " + precision +
                           "}\nparallel: {world_size: " + std::to_string(s.world) +
                           "}\ncheckpoint: {dir: " + root + "/ckpt, every_steps: 0, resume: none}\n"
                           "resources: {device: cpu}\n";
  auto job = ParseJobConfig(yaml, "host_memory_bench.yaml");
  if (!job.ok()) {
    std::fprintf(stderr, "host_memory_bench: %s\n", job.status().ToString().c_str());
    return 1;
  }
  // The ranks are processes, forked before this one starts any thread.
  std::vector<pid_t> pids;
  for (int r = 0; r < s.world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(RunRank(*job, steps, r, s.world, root + "/store", root + "/rss" + std::to_string(r)));
    pids.push_back(pid);
  }
  bool failed = false;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  if (failed) {
    std::fprintf(stderr, "host_memory_bench: a rank failed (see above)\n");
    return 1;
  }
  auto cat = plan::LoadDefaultHardwareCatalog();
  auto p = cat.ok() ? plan::PlanJob(*job, *cat, "") : StatusOr<plan::Plan>(cat.status());
  if (!p.ok()) {
    std::fprintf(stderr, "host_memory_bench: plan: %s\n", p.status().ToString().c_str());
    return 1;
  }
  const int64_t planned = p->memory.device_total;  // the CPU engine: per rank, in host RAM
  const int64_t whole = c.NumParams() * 4;
  std::printf("host memory: %.1fM-parameter HF model (%s safetensors), %d step(s) at W = %d processes, "
              "micro-batch %d x seq %d, precision %s\n",
              c.NumParams() / 1e6, DTypeName(file_dtype), steps, s.world, micro, s.seq, precision.c_str());
  std::printf("%6s %16s %16s %10s %22s\n", "rank", "peak RSS", "planner (CPU)", "ratio", "whole model per rank");
  double worst = 0;
  for (int r = 0; r < s.world; ++r) {
    int64_t peak = 0;
    std::ifstream(root + "/rss" + std::to_string(r)) >> peak;
    const double ratio = static_cast<double>(peak) / static_cast<double>(planned);
    worst = std::max(worst, std::abs(ratio - 1));
    std::printf("%6d %16s %16s %10.3f %22s\n", r, plan::FormatBytes(peak).c_str(), plan::FormatBytes(planned).c_str(),
                ratio, plan::FormatBytes(whole).c_str());
  }
  std::printf("worst rank vs planner: %.1f%% (%s)\n", 100 * worst,
              smoke ? "smoke: not judged" : worst <= 0.10 ? "within 10%" : "OUTSIDE 10%");
  fs::remove_all(root);
  return smoke || worst <= 0.10 ? 0 : 1;
}
