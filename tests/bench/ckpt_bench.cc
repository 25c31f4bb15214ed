// Checkpoint I/O and training stall.
//
//   1. Save: WriteShardFile (header, 3 arrays per unit, xxh64 while writing,
//      fsync, rename, directory fsync) vs. a plain sequential write + fsync of
//      the same bytes from the same memory to the same directory.
//   2. Load: CheckpointReader::ReadUnitRange of every unit (params, m, v) vs. a
//      plain sequential read of the file, with the page cache warm and cold
//      (the file's pages dropped with posix_fadvise(DONTNEED) after fsync),
//      plus CheckpointReader::Open with checksum verification (what resume does).
//   3. Stall: the bench model training with checkpoint.every_steps=3; the time
//      the training thread spends inside Checkpointer::Save per save, as a
//      fraction of a step, for async and sync saves, and how much slower the
//      steps overlapping a background write are; plus the cost of the host
//      snapshot (most of the async stall) with fresh vs. reused buffers.
//
// Shards: the "bench" preset (≈5M params, one rank: ~60 MB) and a synthetic
// d=1024, 8-layer, vocab-32000 model (134M params) seen as one rank of 8
// (~200 MB per shard).
//
// usage: ckpt_bench [dir=/tmp/shardd_ckpt_bench] [reps=7] [train_steps=12]
//        ckpt_bench --smoke   (the bench preset's shard twice, 2 training steps per mode, in a fresh
//                              temp dir: that it starts and prints its figures)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/committer.h"
#include "shard/ckpt/shard_file.h"
#include "shard/common/logging.h"
#include "shard/common/thread_pool.h"
#include "shard/spec/shard_layout.h"
#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"
#include "shard/train/trainer.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ckpt_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const shard::Status& st, const char* what) {
  if (!st.ok()) Die(std::string(what) + ": " + st.ToString());
}

// Drops a file's (clean) pages from the page cache so the next read hits the disk.
void DropCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("open " + path);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// One rank's shard of a model: unit ranges and the three arrays per unit.
struct Shard {
  std::string label;
  shard::ShardHeader header;
  std::vector<std::vector<float>> arrays;  // 3 per unit: params, m, v
  uint64_t bytes = 0;                      // of the arrays
};

Shard MakeShard(const std::string& label, const shard::LlamaConfig& config, int rank, int world) {
  Shard s;
  s.label = label;
  const shard::ParamLayout layout = shard::ParamLayout::ForLlama(config);
  s.header.step = 100;
  s.header.world = world;
  s.header.rank = rank;
  // Stored as "shard 0 of 1" (the file a one-file step names) holding this
  // rank's ranges: what is measured is the bytes, not the layout.
  s.header.shard_rank = 0;
  s.header.shard_count = 1;
  s.header.model_hash = config.ShapeHash();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const auto& u : layout.units) {
    auto sl = shard::ComputeShardLayout(u.numel, world);
    if (!sl.ok()) Die(sl.status().ToString());
    shard::ShardUnit su;
    su.name = u.name;
    su.numel = u.numel;
    su.begin = std::min(sl->begin(rank), u.numel);
    su.count = sl->real_in(rank);
    s.header.units.push_back(su);
    for (int a = 0; a < 3; ++a) {
      std::vector<float> v(static_cast<size_t>(su.count));
      for (auto& x : v) x = a == 2 ? normal(rng) * normal(rng) : normal(rng);
      s.arrays.push_back(std::move(v));
      s.bytes += static_cast<uint64_t>(su.count) * 4;
    }
  }
  return s;
}

std::vector<shard::ShardUnitData> DataOf(const Shard& s) {
  std::vector<shard::ShardUnitData> d;
  for (size_t u = 0; u < s.header.units.size(); ++u)
    d.push_back({s.arrays[3 * u].data(), s.arrays[3 * u + 1].data(), s.arrays[3 * u + 2].data()});
  return d;
}

// The baseline: the same arrays written back to back with write(2), then fsync.
double PlainWrite(const Shard& s, const std::string& path) {
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) Die("open " + path);
  for (const auto& a : s.arrays) {
    const char* p = reinterpret_cast<const char*>(a.data());
    size_t n = a.size() * 4;
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w <= 0) Die("write " + path);
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  if (::fsync(fd) != 0) Die("fsync " + path);
  ::close(fd);
  return Since(t0);
}

// The baseline: the whole file read sequentially (8 MB read(2) calls) into a
// pre-faulted buffer of its size, as a loader holding it in memory would.
double PlainRead(const std::string& path, std::vector<char>* buf) {
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("open " + path);
  size_t total = 0;
  while (true) {
    const size_t want = std::min<size_t>(8 << 20, buf->size() - total);
    if (want == 0) break;
    ssize_t r = ::read(fd, buf->data() + total, want);
    if (r < 0) Die("read " + path);
    if (r == 0) break;
    total += static_cast<size_t>(r);
  }
  ::close(fd);
  if (total == 0) Die("empty " + path);
  return Since(t0);
}

void BenchIo(const Shard& s, const std::string& dir, int reps) {
  const double mb = s.bytes / 1e6;
  std::printf("\n== %s: %.1f MB of params+m+v (%zu units)\n", s.label.c_str(), mb, s.header.units.size());
  const std::string step_dir = dir + "/" + shard::StepDirName(100);
  const std::string plain = dir + "/plain.bin";
  fs::remove_all(step_dir);
  fs::create_directories(step_dir);
  const auto data = DataOf(s);
  std::vector<double> t_shard, t_plain;
  shard::WrittenFile wf;
  for (int r = 0; r < reps; ++r) {
    // Alternate which goes first so neither always meets a busier disk.
    for (int k = 0; k < 2; ++k) {
      if ((r + k) % 2 == 0) {
        fs::remove(plain);
        t_plain.push_back(PlainWrite(s, plain));
      } else {
        fs::remove(step_dir + "/" + shard::ShardFileName(0, 1));
        auto t0 = Clock::now();
        auto w = shard::WriteShardFile(step_dir, s.header, data);
        t_shard.push_back(Since(t0));
        if (!w.ok()) Die(w.status().ToString());
        wf = *w;
      }
    }
  }
  const double ws = Median(t_shard), wp = Median(t_plain);
  std::printf("  save  WriteShardFile   %8.1f MB/s  (%.3f s, file %.1f MB)\n", wf.size / 1e6 / ws, ws, wf.size / 1e6);
  std::printf("        plain write+fsync %7.1f MB/s  (%.3f s)\n", s.bytes / 1e6 / wp, wp);
  std::printf("        ratio            %8.0f %%   (target >= 70 %%)\n", 100.0 * (wf.size / ws) / (s.bytes / wp));

  // Commit the step so the real reader can open it.
  Check(shard::WriteShardReport(step_dir, wf, 0), "report");
  shard::Manifest m;
  m.job = "bench";
  m.step = 100;
  m.world = s.header.world;
  m.strategy = "full_shard";
  m.shard_count = 1;
  m.global_batch = 8;  // a real run's figures: the reader range-checks every field
  m.total_steps = 100;
  m.model_hash = s.header.model_hash;
  for (const auto& u : s.header.units) m.units.emplace_back(u.name, u.numel);
  fs::remove(step_dir + "/COMMITTED");
  Check(shard::CommitStep(step_dir, m, std::chrono::milliseconds(5000)), "commit");
  const std::string shard_path = step_dir + "/" + shard::ShardFileName(0, 1);

  std::vector<double> t_open, t_read_warm, t_read_cold, t_plain_warm, t_plain_cold;
  // Destinations allocated and touched once (as resume reuses its buffers), so
  // page faults are not measured on either side.
  std::vector<std::vector<float>> dst(s.arrays.size());
  for (size_t i = 0; i < dst.size(); ++i) dst[i].assign(s.arrays[i].size(), 1.0f);
  std::vector<char> buf(fs::file_size(plain), 1);
  auto read_all = [&](const shard::CheckpointReader& reader) {
    auto t0 = Clock::now();
    for (size_t u = 0; u < s.header.units.size(); ++u) {
      const auto& su = s.header.units[u];
      Check(reader.ReadUnitRange(static_cast<int>(u), su.begin, su.begin + su.count, dst[3 * u].data(),
                                 dst[3 * u + 1].data(), dst[3 * u + 2].data()),
            "read");
    }
    return Since(t0);
  };
  for (int r = 0; r < reps; ++r) {
    DropCache(shard_path);
    auto t0 = Clock::now();
    auto reader = shard::CheckpointReader::Open(step_dir, /*verify_checksums=*/true);
    t_open.push_back(Since(t0));
    if (!reader.ok()) Die(reader.status().ToString());
    auto fast = shard::CheckpointReader::Open(step_dir, /*verify_checksums=*/false);
    if (!fast.ok()) Die(fast.status().ToString());
    DropCache(shard_path);
    t_read_cold.push_back(read_all(*fast));
    t_read_warm.push_back(read_all(*fast));
    DropCache(plain);
    t_plain_cold.push_back(PlainRead(plain, &buf));
    t_plain_warm.push_back(PlainRead(plain, &buf));
  }
  // Check the last read against what was written.
  for (size_t i = 0; i < dst.size(); ++i)
    if (dst[i] != s.arrays[i]) Die("read back different data");
  const double rc = Median(t_read_cold), rw = Median(t_read_warm), pc = Median(t_plain_cold), pw = Median(t_plain_warm);
  std::printf("  load  ReadUnitRange    %8.1f MB/s cold, %8.1f MB/s warm\n", mb / rc, mb / rw);
  std::printf("        plain read       %8.1f MB/s cold, %8.1f MB/s warm\n", mb / pc, mb / pw);
  std::printf("        ratio            %8.0f %% cold, %8.0f %% warm\n", 100.0 * pc / rc, 100.0 * pw / rw);
  std::printf("        Open with xxh64 verification (cold): %.3f s = %.1f MB/s\n", Median(t_open),
              wf.size / 1e6 / Median(t_open));
  fs::remove_all(step_dir);
  fs::remove(plain);

  // The async save's stall is mostly its host snapshot: Checkpointer::Save
  // copies params/m/v into freshly allocated vectors each time. Fresh
  // (zero-initialised, page-faulting) buffers vs. buffers kept between saves:
  std::vector<double> t_fresh, t_reuse;
  std::vector<std::vector<float>> kept(s.arrays.size());
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    std::vector<std::vector<float>> fresh;
    for (const auto& a : s.arrays) {
      std::vector<float> b(a.size());
      std::memcpy(b.data(), a.data(), a.size() * 4);
      fresh.push_back(std::move(b));
    }
    t_fresh.push_back(Since(t0));
    t0 = Clock::now();
    for (size_t i = 0; i < s.arrays.size(); ++i) {
      kept[i].resize(s.arrays[i].size());
      std::memcpy(kept[i].data(), s.arrays[i].data(), s.arrays[i].size() * 4);
    }
    if (r > 0) t_reuse.push_back(Since(t0));  // the first fills `kept`
  }
  std::printf("  snapshot (save stall) fresh buffers %.4f s, reused buffers %.4f s\n", Median(t_fresh),
              Median(t_reuse));
}

struct StallResult {
  double step_clean = 0;     // mean seconds of steps with no save and no write in flight
  double step_overlap = 0;   // mean seconds (minus stall) of steps that ran beside a background write
  double stall_per_save = 0;
  int saves = 0;
};

StallResult BenchStall(const std::string& dir, const std::string& tokens, int steps, int every, bool async) {
  const std::string yaml = "name: bench\nmodel: {preset: bench}\ndata: {tokens: " + tokens +
                           ", seq_len: 256}\ntrain: {steps: " + std::to_string(steps + 2) +
                           ", global_batch: 8, micro_batch: 8, lr: 1.0e-4, log_every: 1000}\n"
                           "checkpoint: {dir: " + dir + ", every_steps: " + std::to_string(every) +
                           ", keep_last: 2, async: " + (async ? "true" : "false") + ", resume: none}\n";
  auto job = shard::ParseJobConfig(yaml, "bench.yaml");
  if (!job.ok()) Die(job.status().ToString());
  auto trainer = shard::Trainer::Create(*job);
  if (!trainer.ok()) Die(trainer.status().ToString());
  shard::Trainer& t = **trainer;
  shard::Checkpointer* ck = t.checkpointer();
  for (int i = 0; i < 2; ++i) {
    auto m = t.Step();  // warm-up
    if (!m.ok()) Die(m.status().ToString());
  }
  Check(ck->Wait(), "wait");
  StallResult r;
  double clean = 0, overlap = 0;
  int n_clean = 0, n_overlap = 0;
  const double stall0 = ck->stall_seconds();
  bool in_flight = false;
  for (int i = 0; i < steps; ++i) {
    const double before = ck->stall_seconds();
    auto m = t.Step();
    if (!m.ok()) Die(m.status().ToString());
    const double stall = ck->stall_seconds() - before;
    const bool saved = every > 0 && (m->step % every == 0 || m->step == steps + 2);
    if (saved) ++r.saves;
    const double compute = m->seconds - stall;
    if (in_flight) {
      overlap += compute;
      ++n_overlap;
    } else if (!saved) {
      clean += compute;
      ++n_clean;
    }
    in_flight = async && saved;  // the next step runs beside the write
  }
  Check(ck->Wait(), "wait");
  r.stall_per_save = r.saves ? (ck->stall_seconds() - stall0) / r.saves : 0;
  r.step_clean = n_clean ? clean / n_clean : 0;
  r.step_overlap = n_overlap ? overlap / n_overlap : 0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const bool smoke = argc > 1 && std::string(argv[1]) == "--smoke";
  const std::string dir = smoke ? "/tmp/shardd_ckpt_bench_smoke_" + std::to_string(::getpid())
                          : argc > 1 ? argv[1]
                                     : "/tmp/shardd_ckpt_bench";
  const int reps = smoke ? 2 : argc > 2 ? std::atoi(argv[2]) : 7;
  const int train_steps = smoke ? 2 : argc > 3 ? std::atoi(argv[3]) : 12;
  if (reps < 1 || train_steps < 1) {
    std::fprintf(stderr, "usage: ckpt_bench [dir] [reps=7] [train_steps=12] | --smoke\n");
    return 2;
  }
  shard::InitLogging("warn");
  fs::create_directories(dir);
  std::printf("ckpt_bench: dir %s, %d reps (medians), %d compute threads\n", dir.c_str(), reps,
              shard::NumComputeThreads());

  auto bench = shard::LlamaPreset("bench");
  if (!bench.ok()) Die(bench.status().ToString());
  {
    Shard s = MakeShard("bench preset (" + std::to_string(bench->NumParams() / 1000) + "K params), one rank",
                        *bench, 0, 1);
    BenchIo(s, dir, reps);
  }
  if (!smoke) {
    shard::LlamaConfig big = *bench;
    big.vocab_size = 32000;
    big.hidden_size = 1024;
    big.intermediate_size = 2816;
    big.num_layers = 8;
    big.num_heads = 16;
    big.num_kv_heads = 16;
    Check(big.Validate(), "synthetic config");
    Shard s = MakeShard("d=1024 L=8 vocab 32000 (" + std::to_string(big.NumParams() / 1000000) +
                            "M params), rank 0 of 8",
                        big, 0, 8);
    BenchIo(s, dir, std::max(2, reps / 2));
  }

  // Training stall, bench model (seq 256, micro-batch 8).
  const std::string tokens = dir + "/tokens.u32";
  {
    std::mt19937 rng(1);
    std::vector<uint32_t> t(200000);
    for (auto& x : t) x = rng() % 4096;
    std::ofstream(tokens, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  }
  // Saves every 3 steps: each save is followed by one step beside the
  // background write (async) and one clean step, so the step time the stall is
  // compared with comes from the same run (this machine's load drifts).
  std::printf("\n== training stall: bench model, seq 256, micro-batch 8, checkpoint every 3 steps\n");
  for (bool async : {true, false}) {
    fs::remove_all(dir + "/run");
    const StallResult r = BenchStall(dir + "/run", tokens, train_steps, 3, async);
    std::printf("  %-5s saves: %d  stall/save %.4f s = %.2f %% of a clean step (%.3f s)%s\n", async ? "async" : "sync",
                r.saves, r.stall_per_save, 100.0 * r.stall_per_save / r.step_clean, r.step_clean,
                async ? "  (target <= 5 %)" : "");
    if (async)
      std::printf("        steps beside a background write: %.3f s (%+.1f %% vs clean steps)\n", r.step_overlap,
                  100.0 * (r.step_overlap / r.step_clean - 1));
  }
  fs::remove_all(dir);
  return 0;
}
