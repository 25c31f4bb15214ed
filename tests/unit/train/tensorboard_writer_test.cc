// TensorBoard event files read back by a decoder written here, independent of
// the writer: its own bitwise CRC32C, its own TFRecord and protobuf parsing.
// Covers the CRC32C test vectors, the framing and field numbers, and a real
// trainer run writing rank 0's events.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "shard/common/crc32c.h"
#include "shard/train/tensorboard_writer.h"
#include "shard/train/trainer.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

// ---- The independent reader -------------------------------------------------

uint32_t BitwiseCrc32c(const std::string& s) {
  uint32_t crc = 0xFFFFFFFF;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78 & (0u - (crc & 1)));
  }
  return ~crc;
}
uint32_t Masked(const std::string& s) {
  uint32_t c = BitwiseCrc32c(s);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
uint64_t LittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s.at(at + i));
  return v;
}

struct Event {
  double wall_time = 0;
  int64_t step = -1;
  std::string file_version;
  std::map<std::string, float> scalars;
};

// Protobuf fields: (field number, wire type, varint/fixed value or bytes).
struct Field {
  int number;
  int type;
  uint64_t value = 0;
  std::string bytes;
};
std::vector<Field> ParseMessage(const std::string& m) {
  std::vector<Field> out;
  size_t i = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const unsigned char b = m.at(i++);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (i < m.size()) {
    const uint64_t key = varint();
    Field f{static_cast<int>(key >> 3), static_cast<int>(key & 7), 0, {}};
    if (f.type == 0) f.value = varint();
    else if (f.type == 1) f.value = LittleEndian(m, i, 8), i += 8;
    else if (f.type == 5) f.value = LittleEndian(m, i, 4), i += 4;
    else if (f.type == 2) {
      const uint64_t n = varint();
      f.bytes = m.substr(i, n);
      EXPECT_LE(i + n, m.size());
      i += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.type;
      break;
    }
    out.push_back(f);
  }
  return out;
}

Event DecodeEvent(const std::string& data) {
  Event e;
  for (const Field& f : ParseMessage(data)) {
    if (f.number == 1 && f.type == 1) std::memcpy(&e.wall_time, &f.value, 8);
    else if (f.number == 2 && f.type == 0) e.step = static_cast<int64_t>(f.value);
    else if (f.number == 3 && f.type == 2) e.file_version = f.bytes;
    else if (f.number == 5 && f.type == 2) {
      for (const Field& v : ParseMessage(f.bytes)) {
        EXPECT_EQ(v.number, 1);  // Summary.value
        std::string tag;
        float x = NAN;
        for (const Field& g : ParseMessage(v.bytes)) {
          if (g.number == 1 && g.type == 2) tag = g.bytes;
          if (g.number == 2 && g.type == 5) {
            const uint32_t bits = static_cast<uint32_t>(g.value);
            std::memcpy(&x, &bits, 4);
          }
        }
        e.scalars[tag] = x;
      }
    } else ADD_FAILURE() << "unexpected Event field " << f.number;
  }
  return e;
}

std::vector<Event> ReadEvents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Event> events;
  size_t at = 0;
  while (at < s.size()) {
    EXPECT_LE(at + 12, s.size()) << "truncated record header";
    const std::string len_bytes = s.substr(at, 8);
    const uint64_t len = LittleEndian(s, at, 8);
    EXPECT_EQ(LittleEndian(s, at + 8, 4), Masked(len_bytes)) << "length CRC at " << at;
    EXPECT_LE(at + 12 + len + 4, s.size()) << "truncated record";
    const std::string data = s.substr(at + 12, len);
    EXPECT_EQ(LittleEndian(s, at + 12 + len, 4), Masked(data)) << "data CRC at " << at;
    events.push_back(DecodeEvent(data));
    at += 12 + len + 4;
  }
  return events;
}

// ---- Tests ------------------------------------------------------------------

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(BitwiseCrc32c("123456789"), 0xE3069283u);
  std::string rnd(1000, '\0');
  std::mt19937 g(1);
  for (auto& c : rnd) c = static_cast<char>(g());
  EXPECT_EQ(Crc32c(rnd.data(), rnd.size()), BitwiseCrc32c(rnd));
}

TEST(TensorBoardWriterTest, RecordsReadBackWithCrcsAndFields) {
  const std::string dir = testing::TempDir() + "/tb_basic";
  fs::remove_all(dir);
  std::string path;
  {
    auto w = TensorBoardWriter::Open(dir, /*flush_every_s=*/1000);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    path = (*w)->path();
    EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir));
    EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
    // The version record is on disk at once; buffered steps only after a flush.
    EXPECT_EQ(ReadEvents(path).size(), 1u);
    for (int s = 1; s <= 200; ++s)
      ASSERT_TRUE((*w)->WriteScalars(s, {{"loss", 5.0f / s}, {"lr", 1e-3f}, {"grad_norm", 0.5f}}).ok());
    EXPECT_EQ(ReadEvents(path).size(), 1u);
    ASSERT_TRUE((*w)->Flush().ok());
    EXPECT_EQ(ReadEvents(path).size(), 201u);
    ASSERT_TRUE((*w)->WriteScalars(201, {{"loss", NAN}}).ok());
  }  // the destructor flushes
  const std::vector<Event> ev = ReadEvents(path);
  ASSERT_EQ(ev.size(), 202u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_GT(ev[0].wall_time, 1.6e9);
  EXPECT_EQ(ev[1].step, 1);
  EXPECT_FLOAT_EQ(ev[1].scalars.at("loss"), 5.0f);
  EXPECT_FLOAT_EQ(ev[100].scalars.at("loss"), 0.05f);
  EXPECT_FLOAT_EQ(ev[100].scalars.at("lr"), 1e-3f);
  EXPECT_EQ(ev[200].step, 200);
  EXPECT_TRUE(std::isnan(ev[201].scalars.at("loss")));
  EXPECT_GE(ev[200].wall_time, ev[0].wall_time);
}

TEST(TensorBoardWriterTest, FlushesOnItsOwnAfterTheInterval) {
  const std::string dir = testing::TempDir() + "/tb_interval";
  fs::remove_all(dir);
  auto w = TensorBoardWriter::Open(dir, /*flush_every_s=*/0.05);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->WriteScalars(1, {{"loss", 1}}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  ASSERT_TRUE((*w)->WriteScalars(2, {{"loss", 2}}).ok());
  EXPECT_EQ(ReadEvents((*w)->path()).size(), 3u);  // no explicit Flush
}

TEST(TensorBoardWriterTest, UnwritableDirectoryIsAClearError) {
  const std::string file = testing::TempDir() + "/tb_not_a_dir";
  std::ofstream(file) << "x";
  auto w = TensorBoardWriter::Open(file + "/sub");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().ToString().find("tb_not_a_dir"), std::string::npos) << w.status().ToString();
}

TEST(TensorBoardWriterTest, TrainerRankZeroWritesEveryStep) {
  const std::string root = testing::TempDir() + "/tb_trainer";
  fs::remove_all(root);
  fs::create_directories(root);
  std::vector<uint32_t> toks(6000);
  std::mt19937 g(5);
  for (auto& t : toks) t = g() % 64;
  const std::string tokens = root + "/t.u32";
  std::ofstream(tokens, std::ios::binary).write(reinterpret_cast<const char*>(toks.data()), toks.size() * 4);
  auto job = ParseJobConfig("name: tbjob\nmodel: {preset: tiny}\ndata: {tokens: " + tokens +
                                ", seq_len: 16}\ntrain: {steps: 12, global_batch: 4, micro_batch: 4, lr: 1.0e-3, "
                                "warmup_steps: 2, log_every: 1000}\ncheckpoint: {dir: " + root + "/runs}\n",
                            "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  DistContext dist;
  dist.tensorboard = true;
  auto t = Trainer::Create(*job, dist);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<StepMetrics> seen;
  ASSERT_TRUE((*t)->Run([&](const StepMetrics& m) { seen.push_back(m); }).ok());
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(root + "/runs/tbjob"))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path().string());
  ASSERT_EQ(files.size(), 1u);
  const std::vector<Event> ev = ReadEvents(files[0]);
  ASSERT_EQ(ev.size(), 13u);
  for (int i = 0; i < 12; ++i) {
    const Event& e = ev[i + 1];
    EXPECT_EQ(e.step, seen[i].step);
    EXPECT_FLOAT_EQ(e.scalars.at("loss"), static_cast<float>(seen[i].loss));
    EXPECT_FLOAT_EQ(e.scalars.at("lr"), static_cast<float>(seen[i].lr));
    EXPECT_FLOAT_EQ(e.scalars.at("grad_norm"), static_cast<float>(seen[i].grad_norm));
    EXPECT_FLOAT_EQ(e.scalars.at("loss_scale"), 1.0f);
    EXPECT_GT(e.scalars.at("tokens_per_s"), 0);
    EXPECT_GT(e.scalars.at("step_time_s"), 0);
  }
}

}  // namespace
}  // namespace shard
