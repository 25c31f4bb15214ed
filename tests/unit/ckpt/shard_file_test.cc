// The shard file format: a written shard reads back exactly, the size and
// checksum WriteShardFile returns are those of the file on disk, and every kind
// of damage to the fixed header, the JSON header or the data is refused with an
// error naming the file.
#include <gtest/gtest.h>

#include <functional>

#include <cstring>

#include "shard/common/checksum.h"
#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard {
namespace {

using namespace ckpt_testing;

class ShardFileTest : public ProtocolTest {};

TEST_F(ShardFileTest, FileNameIsZeroPadded) {
  EXPECT_EQ(ShardFileName(3, 8), "rank_00003-of-00008.shard");
  EXPECT_EQ(ShardFileName(0, 1), "rank_00000-of-00001.shard");
}

TEST_F(ShardFileTest, RoundTripsEveryArrayOfEveryUnit) {
  for (int n : {1, 3}) {
    for (int r = 0; r < n; ++r) {
      WrittenFile wf = WriteShard(dir_, 42, r, n);
      const std::string path = Path(wf.name);
      EXPECT_EQ(wf.name, ShardFileName(r, n));
      EXPECT_FALSE(fs::exists(path + ".tmp")) << "the temp file must be renamed away";
      EXPECT_EQ(wf.size, fs::file_size(path));
      auto h = Xxh64File(path);
      ASSERT_TRUE(h.ok());
      EXPECT_EQ(wf.xxh64, *h) << "the checksum computed while writing must be the file's";

      auto reader = ShardFileReader::Open(path);
      ASSERT_TRUE(reader.ok()) << reader.status().ToString();
      const ShardHeader& got = reader->header();
      const ShardHeader want = HeaderFor(42, r, n);
      EXPECT_EQ(got.step, 42);
      EXPECT_EQ(got.world, n);
      EXPECT_EQ(got.rank, r);
      EXPECT_EQ(got.shard_rank, r);
      EXPECT_EQ(got.shard_count, n);
      EXPECT_EQ(got.model_hash, kModelHash);
      ASSERT_EQ(got.units.size(), want.units.size());
      for (size_t u = 0; u < want.units.size(); ++u) {
        EXPECT_EQ(got.units[u].name, want.units[u].name);
        EXPECT_EQ(got.units[u].numel, want.units[u].numel);
        EXPECT_EQ(got.units[u].begin, want.units[u].begin);
        EXPECT_EQ(got.units[u].count, want.units[u].count);
        const int64_t b = want.units[u].begin, c = want.units[u].count;
        for (int which = 0; which < 3; ++which) {
          std::vector<float> buf(static_cast<size_t>(c));
          ASSERT_TRUE(reader->Read(static_cast<int>(u), which, b, c, buf.data()).ok());
          for (int64_t i = 0; i < c; ++i)
            ASSERT_EQ(buf[i], Value(42, static_cast<int>(u), which, b + i)) << "unit " << u << " array " << which;
          // A sub-range in the middle reads the right elements too.
          if (c >= 3) {
            float two[2];
            ASSERT_TRUE(reader->Read(static_cast<int>(u), which, b + 1, 2, two).ok());
            EXPECT_EQ(two[0], Value(42, static_cast<int>(u), which, b + 1));
            EXPECT_EQ(two[1], Value(42, static_cast<int>(u), which, b + 2));
          }
        }
      }
    }
  }
}

TEST_F(ShardFileTest, DataSectionIsAlignedAndFollowsTheFixedHeader) {
  WrittenFile wf = WriteShard(dir_, 1, 0, 1);
  const std::string b = ReadBytes(Path(wf.name));
  ASSERT_GE(b.size(), 24u);
  EXPECT_EQ(std::memcmp(b.data(), kShardMagic, 8), 0);
  uint32_t version;
  uint64_t header_len;
  std::memcpy(&version, b.data() + 8, 4);
  std::memcpy(&header_len, b.data() + 16, 8);
  EXPECT_EQ(version, kShardFormatVersion);
  const uint64_t data_start = (24 + header_len + 63) / 64 * 64;
  int64_t elems = 0;
  for (const auto& [name, numel] : Units()) elems += numel;
  EXPECT_EQ(b.size(), data_start + static_cast<uint64_t>(elems) * 12);
  // The first float of the data section is unit 0's first parameter.
  float first;
  std::memcpy(&first, b.data() + data_start, 4);
  EXPECT_EQ(first, Value(1, 0, 0, 0));
}

// optim.state_dtype: bf16 shards hold the state as held (2 B per element,
// format version 2, "dtype": "bf16" per unit) and read back widened exactly;
// a dtype key in a version-1 file, an unknown dtype, or a version-2 file
// without a bf16 unit are refused.
TEST_F(ShardFileTest, Bf16UnitsAreVersionTwoAndReadBackWidened) {
  ShardHeader h = HeaderFor(3, 0, 1);
  std::vector<std::vector<uint16_t>> storage;
  std::vector<ShardUnitData> data;
  int64_t elems = 0;
  for (size_t u = 0; u < h.units.size(); ++u) {
    h.units[u].dtype = DType::kBF16;
    elems += h.units[u].count;
    for (int which = 0; which < 3; ++which) {
      std::vector<uint16_t> a(static_cast<size_t>(h.units[u].count));
      for (int64_t i = 0; i < h.units[u].count; ++i) a[i] = F32ToBF16(Value(3, static_cast<int>(u), which, i));
      storage.push_back(std::move(a));
    }
    data.push_back({storage[3 * u].data(), storage[3 * u + 1].data(), storage[3 * u + 2].data()});
  }
  auto wf = WriteShardFile(dir_, h, data);
  ASSERT_TRUE(wf.ok()) << wf.status().ToString();
  const std::string path = Path(wf->name);
  const std::string b = ReadBytes(path);
  uint32_t version;
  uint64_t header_len;
  std::memcpy(&version, b.data() + 8, 4);
  std::memcpy(&header_len, b.data() + 16, 8);
  EXPECT_EQ(version, kShardFormatVersionBf16);
  EXPECT_EQ(b.size(), (24 + header_len + 63) / 64 * 64 + static_cast<uint64_t>(elems) * 6);
  auto reader = ShardFileReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  for (size_t u = 0; u < h.units.size(); ++u) {
    EXPECT_EQ(reader->header().units[u].dtype, DType::kBF16);
    const int64_t c = h.units[u].count;
    for (int which = 0; which < 3; ++which) {
      std::vector<float> got(c);
      ASSERT_TRUE(reader->Read(static_cast<int>(u), which, 0, c, got.data()).ok());
      for (int64_t i = 0; i < c; ++i)
        ASSERT_EQ(got[i], BF16ToF32(storage[3 * u + which][i])) << "unit " << u << " array " << which << " elem " << i;
      if (c >= 3) {  // an odd-length sub-range
        float three[3];
        ASSERT_TRUE(reader->Read(static_cast<int>(u), which, 1, 1, three).ok());
        EXPECT_EQ(three[0], BF16ToF32(storage[3 * u + which][1]));
      }
    }
  }
  // Damage to the dtype marking, resealed where the header length changes.
  auto rewrite = [&](const std::string& from, const std::string& to, uint32_t ver) {
    std::string j = b.substr(24, header_len);
    for (size_t at = j.find(from); at != std::string::npos; at = j.find(from, at + to.size())) j.replace(at, from.size(), to);
    std::string out = b.substr(0, 8);
    out.append(reinterpret_cast<const char*>(&ver), 4);
    out.append(4, '\0');
    const uint64_t len = j.size();
    out.append(reinterpret_cast<const char*>(&len), 8);
    out += j;
    const uint64_t start = (24 + len + 63) / 64 * 64;
    out.append(start - out.size(), '\0');
    out += b.substr((24 + header_len + 63) / 64 * 64);
    WriteBytes(path, out);
    return ShardFileReader::Open(path);
  };
  auto v1 = rewrite("\"bf16\"", "\"bf16\"", kShardFormatVersion);
  ASSERT_FALSE(v1.ok());
  EXPECT_NE(v1.status().message().find("format version 1 holds fp32 only"), std::string::npos) << v1.status().ToString();
  auto f16 = rewrite("\"bf16\"", "\"fp16\"", kShardFormatVersionBf16);
  ASSERT_FALSE(f16.ok());
  EXPECT_NE(f16.status().message().find("state dtype 'fp16'"), std::string::npos) << f16.status().ToString();
  auto none = rewrite(",\"dtype\":\"bf16\"", "", kShardFormatVersionBf16);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no bf16 unit"), std::string::npos) << none.status().ToString();
}

TEST_F(ShardFileTest, ReadOutsideTheHeldRangeIsRefused) {
  WrittenFile wf = WriteShard(dir_, 1, 1, 3);  // holds the middle third
  auto reader = ShardFileReader::Open(Path(wf.name));
  ASSERT_TRUE(reader.ok());
  const ShardUnit& u = reader->header().units[1];
  std::vector<float> buf(200);
  EXPECT_EQ(reader->Read(1, 0, u.begin - 1, 2, buf.data()).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(reader->Read(1, 0, u.begin, u.count + 1, buf.data()).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(reader->Read(1, 3, u.begin, 1, buf.data()).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(reader->Read(1, -1, u.begin, 1, buf.data()).code(), StatusCode::kOutOfRange);
}

TEST_F(ShardFileTest, WriteIntoAMissingDirectoryFailsAndLeavesNothing) {
  ShardHeader h = HeaderFor(1, 0, 1);
  std::vector<float> z(200, 0.0f);
  std::vector<ShardUnitData> data(h.units.size(), ShardUnitData{z.data(), z.data(), z.data()});
  auto wf = WriteShardFile(Path("no/such/dir"), h, data);
  ASSERT_FALSE(wf.ok());
  EXPECT_NE(wf.status().message().find("no/such/dir"), std::string::npos) << wf.status().ToString();
  // Data that does not match the header is an internal error, not a file.
  data.pop_back();
  EXPECT_FALSE(WriteShardFile(dir_, h, data).ok());
  EXPECT_TRUE(fs::is_empty(dir_));
}

// Damage to the fixed header or the JSON header: each is refused by Open with
// DATA_LOSS (NOT_FOUND for a missing file) and a message naming the file and
// what is wrong.
struct Damage {
  std::string what;
  std::function<void(std::string*)> apply;
  std::string needle;
};

TEST_F(ShardFileTest, DamagedHeadersAreRefusedWithTheFileNamed) {
  WrittenFile wf = WriteShard(dir_, 5, 0, 2);
  const std::string good = ReadBytes(Path(wf.name));
  uint64_t header_len;
  std::memcpy(&header_len, good.data() + 16, 8);
  auto set_u64 = [](std::string* b, size_t at, uint64_t v) { std::memcpy(b->data() + at, &v, 8); };
  auto set_u32 = [](std::string* b, size_t at, uint32_t v) { std::memcpy(b->data() + at, &v, 4); };
  // Replaces the JSON header by `json` padded with spaces to the same length.
  auto with_json = [header_len](std::string json) {
    return [header_len, json](std::string* b) {
      std::string j = json;
      j.resize(header_len, ' ');
      b->replace(24, header_len, j);
    };
  };
  const std::vector<Damage> cases = {
      {"empty file", [](std::string* b) { b->clear(); }, "truncated"},
      {"shorter than the fixed header", [](std::string* b) { b->resize(20); }, "truncated"},
      {"bad magic", [](std::string* b) { (*b)[0] = 'X'; }, "bad magic"},
      {"a safetensors file", [](std::string* b) { std::memcpy(b->data(), "\x10\0\0\0\0\0\0\0{\"__meta", 16); },
       "bad magic"},
      {"wrong version", [&](std::string* b) { set_u32(b, 8, kShardFormatVersion + 1); }, "format version 2"},
      {"version 0", [&](std::string* b) { set_u32(b, 8, 0); }, "format version 0"},
      {"header longer than the file", [&](std::string* b) { set_u64(b, 16, b->size()); }, "exceeds the file size"},
      {"absurd header length", [&](std::string* b) { set_u64(b, 16, ~0ull - 8); }, "header length"},
      {"header cut off", [&](std::string* b) { b->resize(24 + header_len / 2); }, "exceeds the file size"},
      {"truncated data", [](std::string* b) { b->resize(b->size() - 4); }, "is truncated"},
      {"data section gone", [&](std::string* b) { b->resize(24 + header_len); }, "is truncated"},
      {"header not JSON", with_json("not json at all"), "not JSON"},
      {"header a JSON array", with_json("[1,2,3]"), "not JSON"},
      {"header lacks units",
       with_json(R"({"step":5,"world":2,"rank":0,"shard_rank":0,"shard_count":2,"model_hash":"1234abcd5678ef00"})"),
       "malformed header"},
      {"model hash not hex",
       with_json(R"({"step":5,"world":2,"rank":0,"shard_rank":0,"shard_count":2,"model_hash":"zz","units":[]})"),
       "zz"},
      {"unit range past numel",
       with_json(R"({"step":5,"world":2,"rank":0,"shard_rank":0,"shard_count":2,"model_hash":"1234abcd5678ef00",)"
                 R"("units":[{"name":"embed","numel":10,"begin":5,"count":6,"offset":0}]})"),
       "outside the unit"},
      {"negative count",
       with_json(R"({"step":5,"world":2,"rank":0,"shard_rank":0,"shard_count":2,"model_hash":"1234abcd5678ef00",)"
                 R"("units":[{"name":"embed","numel":10,"begin":0,"count":-1,"offset":0}]})"),
       "outside the unit"},
      {"unit offset past the end",
       with_json(R"({"step":5,"world":2,"rank":0,"shard_rank":0,"shard_count":2,"model_hash":"1234abcd5678ef00",)"
                 R"("units":[{"name":"embed","numel":10,"begin":0,"count":10,"offset":100000}]})"),
       "is truncated"},
      {"wrong field type",
       with_json(R"({"step":"five","world":2,"rank":0,"shard_rank":0,"shard_count":2,"model_hash":"1234abcd5678ef00",)"
                 R"("units":[]})"),
       "malformed header"},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::string b = good;
    c.apply(&b);
    const std::string path = Path("damaged" + std::to_string(i++) + ".shard");
    WriteBytes(path, b);
    auto r = ShardFileReader::Open(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().ToString();
  }
  auto missing = ShardFileReader::Open(Path("missing.shard"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.shard"), std::string::npos);
}

// A flipped byte in the data section parses fine (the header is intact) but
// CheckpointReader with verification refuses the step, naming the file and
// both checksums; without verification the damage goes unseen, which is why
// resume verifies.
TEST_F(ShardFileTest, FlippedDataByteIsCaughtByTheChecksum) {
  const std::string job = Path("job");
  const std::string step = MakeCommittedStep(job, 10, 2);
  ASSERT_TRUE(CheckpointReader::Open(step, true).ok());
  const std::string victim = step + "/" + ShardFileName(1, 2);
  FlipByte(victim, -5);
  EXPECT_TRUE(ShardFileReader::Open(victim).ok()) << "the header is intact";
  EXPECT_TRUE(CheckpointReader::Open(step, /*verify_checksums=*/false).ok());
  auto r = CheckpointReader::Open(step, /*verify_checksums=*/true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(victim), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace shard
