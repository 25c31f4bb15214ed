// SafetensorsWriter: layout on disk, round trips through the reader, rounding,
// ordering rules and failure cleanup.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "shard/ckpt/safetensors.h"
#include "tests/unit/ckpt/ckpt_test_util.h"

namespace shard {
namespace {

using testing_util::CkptTest;
using testing_util::ReadBytes;

class SafetensorsWriterTest : public CkptTest {
 protected:
  // Names of every entry in the scratch dir (to catch leftover temp files).
  std::vector<std::string> DirEntries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::vector<float> Iota(size_t n, float start, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

TEST_F(SafetensorsWriterTest, F32RoundTripWithMetadataAndLayout) {
  const std::string path = Path("out.safetensors");
  std::vector<TensorDecl> decls = {{"z.last", {3}}, {"a.first", {2, 3}}, {"scalar", {}}, {"empty", {0, 4}}};
  auto w = SafetensorsWriter::Create(path, decls, DType::kF32, {{"format", "pt"}, {"step", "100"}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::vector<float> z = {1.5f, -2.25f, 1e-30f};
  const std::vector<float> a = Iota(6, -1.0f, 0.5f);
  const float s = std::numeric_limits<float>::max();
  ASSERT_TRUE(w->Write("z.last", z.data()).ok());
  ASSERT_TRUE(w->Write("a.first", a.data()).ok());
  ASSERT_TRUE(w->Write("scalar", &s).ok());
  ASSERT_TRUE(w->Write("empty", nullptr).ok());
  EXPECT_FALSE(std::filesystem::exists(path)) << "visible before Finish";
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_EQ(w->data_bytes(), (3u + 6u + 1u) * 4u);
  EXPECT_EQ(DirEntries(), std::vector<std::string>{"out.safetensors"});  // no temp files left

  // Raw layout: LE length, header padded with spaces to a multiple of 8,
  // tensors back to back in declaration order.
  const std::string bytes = ReadBytes(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + w->data_bytes());
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find('\n'), std::string::npos);
  EXPECT_LT(header.find("\"z.last\""), header.find("\"a.first\""));
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(n - (last + 1), 8u);
  auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"]["step"], "100");
  EXPECT_EQ(j["z.last"]["dtype"], "F32");
  EXPECT_EQ(j["z.last"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(j["a.first"]["data_offsets"], nlohmann::json::array({12, 36}));
  EXPECT_EQ(j["a.first"]["shape"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(j["scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(j["empty"]["data_offsets"], nlohmann::json::array({40, 40}));

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("step"), "100");
  ASSERT_EQ(f->tensors().size(), 4u);
  std::vector<float> zr(3), ar(6);
  float sr = 0;
  ASSERT_TRUE(f->ReadF32("z.last", {3}, zr.data()).ok());
  ASSERT_TRUE(f->ReadF32("a.first", {2, 3}, ar.data()).ok());
  ASSERT_TRUE(f->ReadF32("scalar", {}, &sr).ok());
  EXPECT_EQ(zr, z);
  EXPECT_EQ(ar, a);
  EXPECT_EQ(sr, s);
}

TEST_F(SafetensorsWriterTest, BF16RoundsToNearestEven) {
  // bf16 keeps 8 significant bits: around 1.0 the step is 2^-7.
  const std::vector<float> in = {1.0f + 0x1p-8f,             // tie -> even (1.0)
                                 1.0f + 3 * 0x1p-8f,         // tie -> even (1 + 2^-6)
                                 1.0f + 0x1p-8f + 0x1p-12f,  // above tie -> up
                                 -3.0f,
                                 0.0f,
                                 std::numeric_limits<float>::infinity()};
  const std::vector<float> want = {1.0f,  1.0f + 0x1p-6f, 1.0f + 0x1p-7f,
                                   -3.0f, 0.0f,           std::numeric_limits<float>::infinity()};
  auto w = SafetensorsWriter::Create(Path("b.safetensors"), {{"t", {6}}}, DType::kBF16);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Write("t", in.data()).ok());
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_EQ(w->data_bytes(), 12u);
  auto f = SafetensorsFile::Open(Path("b.safetensors"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Find("t")->dtype_name, "BF16");
  std::vector<float> out(6);
  ASSERT_TRUE(f->ReadF32("t", {6}, out.data()).ok());
  EXPECT_EQ(out, want);
}

TEST_F(SafetensorsWriterTest, F16RoundsAndSaturates) {
  const std::vector<float> in = {1.0f + 0x1p-11f,      // tie -> even (1.0)
                                 1.0f + 3 * 0x1p-11f,  // tie -> even (1 + 2^-9)
                                 65504.0f,             // largest half
                                 70000.0f,             // overflow -> inf
                                 0x1p-24f,             // smallest subnormal
                                 1e-8f};               // underflow -> 0
  const std::vector<float> want = {
      1.0f, 1.0f + 0x1p-9f, 65504.0f, std::numeric_limits<float>::infinity(), 0x1p-24f, 0.0f};
  auto w = SafetensorsWriter::Create(Path("h.safetensors"), {{"t", {2, 3}}}, DType::kF16);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Write("t", in.data()).ok());
  ASSERT_TRUE(w->Finish().ok());
  auto f = SafetensorsFile::Open(Path("h.safetensors"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Find("t")->dtype_name, "F16");
  std::vector<float> out(6);
  ASSERT_TRUE(f->ReadF32("t", {2, 3}, out.data()).ok());
  EXPECT_EQ(out, want);
}

TEST_F(SafetensorsWriterTest, LargeTensorCrossesConversionChunks) {
  const size_t n = (size_t{1} << 20) * 2 + 17;  // more than two staging chunks
  std::vector<float> in(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 256) - 128.0f;  // exact in bf16
  auto w =
      SafetensorsWriter::Create(Path("big.safetensors"), {{"big", {static_cast<int64_t>(n)}}}, DType::kBF16);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Write("big", in.data()).ok());
  ASSERT_TRUE(w->Finish().ok());
  auto f = SafetensorsFile::Open(Path("big.safetensors"));
  ASSERT_TRUE(f.ok());
  std::vector<float> out(n);
  ASSERT_TRUE(f->ReadF32("big", {static_cast<int64_t>(n)}, out.data()).ok());
  EXPECT_EQ(out, in);
  float tail[17];
  ASSERT_TRUE(f->ReadF32Range("big", static_cast<int64_t>(n - 17), 17, tail).ok());
  EXPECT_EQ(tail[16], in[n - 1]);
}

TEST_F(SafetensorsWriterTest, OverwritesExistingFileAtomically) {
  const std::string path = Path("x.safetensors");
  testing_util::WriteBytes(path, "old contents");
  auto w = SafetensorsWriter::Create(path, {{"t", {1}}}, DType::kF32);
  ASSERT_TRUE(w.ok());
  const float v = 4.0f;
  ASSERT_TRUE(w->Write("t", &v).ok());
  EXPECT_EQ(ReadBytes(path), "old contents");  // untouched until Finish
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_TRUE(SafetensorsFile::Open(path).ok());
}

TEST_F(SafetensorsWriterTest, OutOfOrderAndIncompleteWritesFail) {
  const std::string path = Path("o.safetensors");
  auto w = SafetensorsWriter::Create(path, {{"a", {1}}, {"b", {1}}}, DType::kF32);
  ASSERT_TRUE(w.ok());
  const float v = 1.0f;
  Status st = w->Write("b", &v);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("next declared tensor is 'a'"), std::string::npos) << st.ToString();
  EXPECT_EQ(w->Write("nope", &v).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(w->Write("a", &v).ok());
  st = w->Finish();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("'b'"), std::string::npos) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_TRUE(w->Write("b", &v).ok());
  EXPECT_EQ(w->Write("b", &v).code(), StatusCode::kFailedPrecondition);  // all written
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_EQ(w->Finish().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(w->Write("a", &v).code(), StatusCode::kFailedPrecondition);
}

TEST_F(SafetensorsWriterTest, AbandonedWriterLeavesNothing) {
  {
    auto w = SafetensorsWriter::Create(Path("gone.safetensors"), {{"a", {4}}}, DType::kF32);
    ASSERT_TRUE(w.ok());
    SafetensorsWriter moved = std::move(w).value();  // moving keeps one owner of the temp file
    EXPECT_FALSE(DirEntries().empty());
  }
  EXPECT_TRUE(DirEntries().empty());
}

TEST_F(SafetensorsWriterTest, BadDeclarationsAreRejected) {
  const std::string path = Path("d.safetensors");
  struct Case {
    std::vector<TensorDecl> decls;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{{"a", {1}}, {"a", {2}}}, "declared twice"},
      {{{"a", {2, -1}}}, "negative dimension"},
      {{{"", {1}}}, "empty tensor name"},
      {{{"__metadata__", {1}}}, "reserved"},
  };
  for (const Case& c : cases) {
    auto w = SafetensorsWriter::Create(path, c.decls, DType::kF32);
    ASSERT_FALSE(w.ok()) << c.needle;
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find(c.needle), std::string::npos) << w.status().ToString();
    EXPECT_NE(w.status().message().find(path), std::string::npos) << w.status().ToString();
  }
  EXPECT_TRUE(DirEntries().empty());
}

TEST_F(SafetensorsWriterTest, MissingDirectoryIsNotFound) {
  auto w = SafetensorsWriter::Create(Path("no/such/dir/x.safetensors"), {{"a", {1}}}, DType::kF32);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_NE(w.status().message().find("no/such/dir/x.safetensors"), std::string::npos);
}

TEST_F(SafetensorsWriterTest, WriteErrorIsLoudAndCleansUp) {
  // A file size limit makes write() fail with EFBIG, like a full disk would.
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  auto w = SafetensorsWriter::Create(Path("full.safetensors"), {{"a", {4096}}, {"b", {1}}}, DType::kF32);
  ASSERT_TRUE(w.ok());
  struct rlimit lim = old;
  lim.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::vector<float> data(4096, 1.0f);
  Status st = w->Write("a", data.data());
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("full.safetensors"), std::string::npos) << st.ToString();
  // The writer stays dead and says why; nothing is left behind.
  EXPECT_EQ(w->Write("b", data.data()).message(), st.message());
  EXPECT_EQ(w->Finish().message(), st.message());
  EXPECT_TRUE(DirEntries().empty());
}

}  // namespace
}  // namespace shard
