// Every way a safetensors file can be broken must fail at Open (or at the read)
// with one line naming the file and the problem.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "shard/ckpt/safetensors.h"
#include "tests/unit/ckpt/ckpt_test_util.h"

namespace shard {
namespace {

using testing_util::CkptTest;
using testing_util::F32Bytes;
using testing_util::SafetensorsBytes;
using testing_util::WriteBytes;

class SafetensorsErrorsTest : public CkptTest {
 protected:
  // Writes `bytes`, opens them, and checks the error's code, that it names the
  // file, contains `needle`, and is a single line.
  void ExpectOpenError(const std::string& bytes, StatusCode code, const std::string& needle) {
    const std::string path = Path("bad.safetensors");
    WriteBytes(path, bytes);
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok()) << "opened a broken file; expected " << StatusCodeName(code) << " with '" << needle
                         << "'";
    const Status& st = f.status();
    EXPECT_EQ(st.code(), code) << st.ToString();
    EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.ToString();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.ToString();
  }

  static std::string Valid() {
    return SafetensorsBytes(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
                            F32Bytes({1, 2, 3, 4}));
  }
  static std::string OneTensor(const std::string& entry, const std::string& data = std::string(16, '\0')) {
    return SafetensorsBytes(R"({"w":)" + entry + "}", data);
  }
};

TEST_F(SafetensorsErrorsTest, ValidBaselineOpens) {
  WriteBytes(Path("ok.safetensors"), Valid());
  EXPECT_TRUE(SafetensorsFile::Open(Path("ok.safetensors")).ok());
}

TEST_F(SafetensorsErrorsTest, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open(Path("absent.safetensors"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("absent.safetensors"), std::string::npos);
}

TEST_F(SafetensorsErrorsTest, ShorterThanLengthField) {
  ExpectOpenError("", StatusCode::kDataLoss, "too short");
  ExpectOpenError(Valid().substr(0, 5), StatusCode::kDataLoss, "too short");
}

TEST_F(SafetensorsErrorsTest, TruncatedInsideHeader) {
  ExpectOpenError(Valid().substr(0, 8 + 10), StatusCode::kDataLoss, "header length");
}

TEST_F(SafetensorsErrorsTest, TruncatedInsideData) {
  const std::string v = Valid();
  ExpectOpenError(v.substr(0, v.size() - 2), StatusCode::kDataLoss, "ends past the data section");
}

TEST_F(SafetensorsErrorsTest, HeaderLengthLargerThanFile) {
  std::string v = Valid();
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(v.data(), &huge, 8);
  ExpectOpenError(v, StatusCode::kDataLoss, "header length 1099511627776 exceeds");
}

TEST_F(SafetensorsErrorsTest, HeaderLengthOverLimit) {
  // A sparse file just big enough that the length fits the file but not the cap.
  const std::string path = Path("huge.safetensors");
  const uint64_t len = kSafetensorsMaxHeaderBytes + 1;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, &len, 8), 8);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(8 + len + 8)), 0);
  ::close(fd);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find("limit"), std::string::npos) << f.status().ToString();
}

TEST_F(SafetensorsErrorsTest, HeaderNotJson) {
  ExpectOpenError(SafetensorsBytes("{\"w\": {\"dtype\": ", ""), StatusCode::kDataLoss, "not valid JSON");
  ExpectOpenError(SafetensorsBytes("\x89PNG garbage", ""), StatusCode::kDataLoss, "not valid JSON");
}

TEST_F(SafetensorsErrorsTest, HeaderNotAnObject) {
  ExpectOpenError(SafetensorsBytes("[1, 2, 3]", ""), StatusCode::kDataLoss, "not an object");
  ExpectOpenError(SafetensorsBytes(R"({"w": 3})", ""), StatusCode::kDataLoss, "'w'");
}

TEST_F(SafetensorsErrorsTest, OffsetsPastTheEnd) {
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[2,2],"data_offsets":[8,24]})"), StatusCode::kDataLoss,
                  "ends past the data section");
}

TEST_F(SafetensorsErrorsTest, OffsetsReversed) {
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[0],"data_offsets":[16,0]})"), StatusCode::kDataLoss,
                  "begin > end");
}

TEST_F(SafetensorsErrorsTest, OffsetsDoNotMatchShapeTimesDType) {
  // 16 bytes for a [2,2] BF16 (needs 8) and for a [3,2] F32 (needs 24).
  ExpectOpenError(OneTensor(R"({"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]})"), StatusCode::kDataLoss,
                  "needs 4 x 2");
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,16]})"), StatusCode::kDataLoss,
                  "spans 16 bytes");
  // Unsupported dtypes are size-checked too.
  ExpectOpenError(OneTensor(R"({"dtype":"I64","shape":[1],"data_offsets":[0,16]})"), StatusCode::kDataLoss,
                  "needs 1 x 8");
}

// Two tensors sharing bytes would read as each other (an adapter's A as its
// B); the official reader refuses them, and any gap or tail, too.
TEST_F(SafetensorsErrorsTest, OverlappingTensorsAreRefusedNamingBoth) {
  ExpectOpenError(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                   std::string(16, '\0')),
                  StatusCode::kDataLoss, "tensors 'a' [0, 16] and 'b' [8, 16] overlap");
  // The same range twice (an alias), in either order of the header.
  ExpectOpenError(SafetensorsBytes(R"({"y":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                   R"("x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                                   std::string(16, '\0')),
                  StatusCode::kDataLoss, "tensors 'x' [0, 16] and 'y' [0, 16] overlap");
  // One inside another, of other dtypes.
  ExpectOpenError(SafetensorsBytes(R"({"big":{"dtype":"BF16","shape":[8],"data_offsets":[0,16]},)"
                                   R"("small":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}})",
                                   std::string(16, '\0')),
                  StatusCode::kDataLoss, "'big' [0, 16] and 'small' [4, 8] overlap");
}

TEST_F(SafetensorsErrorsTest, BytesNoTensorOwnsAreRefused) {
  ExpectOpenError(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                   std::string(12, '\0')),
                  StatusCode::kDataLoss, "bytes [4, 8) of the data section belong to no tensor (before 'b')");
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})"), StatusCode::kDataLoss,
                  "bytes [0, 8)");
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), StatusCode::kDataLoss,
                  "8 bytes after the last tensor's end 8");
  // Back to back, an empty tensor between, in any header order: opens.
  WriteBytes(Path("ok.safetensors"),
             SafetensorsBytes(R"({"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                              R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                              R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                              F32Bytes({1, 2, 3})));
  auto f = SafetensorsFile::Open(Path("ok.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->tensors().size(), 3u);
}

TEST_F(SafetensorsErrorsTest, MalformedEntries) {
  ExpectOpenError(OneTensor(R"({"shape":[4],"data_offsets":[0,16]})"), StatusCode::kDataLoss, "\"dtype\"");
  ExpectOpenError(OneTensor(R"({"dtype":"F32","data_offsets":[0,16]})"), StatusCode::kDataLoss, "\"shape\"");
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[-4],"data_offsets":[0,16]})"), StatusCode::kDataLoss,
                  "non-negative");
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,16]})"), StatusCode::kDataLoss,
                  "non-negative");
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0]})"), StatusCode::kDataLoss,
                  "data_offsets");
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,-16]})"), StatusCode::kDataLoss,
                  "data_offsets");
  ExpectOpenError(OneTensor(R"({"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,16]})"),
                  StatusCode::kDataLoss, "overflows");
  ExpectOpenError(SafetensorsBytes(R"({"__metadata__":{"format":3}})", ""), StatusCode::kDataLoss,
                  "__metadata__");
  ExpectOpenError(SafetensorsBytes(R"({"__metadata__":[1]})", ""), StatusCode::kDataLoss, "__metadata__");
}

TEST_F(SafetensorsErrorsTest, UnsupportedDTypeFailsOnlyWhenRead) {
  WriteBytes(Path("mixed.safetensors"),
             SafetensorsBytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("ids":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},)"
                              R"("q":{"dtype":"F4","shape":[7],"data_offsets":[16,20]}})",
                              F32Bytes({1, 2}) + std::string(12, '\0')));
  auto f = SafetensorsFile::Open(Path("mixed.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  float v[8];
  EXPECT_TRUE(f->ReadF32("w", {2}, v).ok());
  for (const char* name : {"ids", "q"}) {
    Status st = f->ReadF32(name, {1}, v);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(st.message().find(Path("mixed.safetensors")), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find(std::string("'") + name + "'"), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("cannot convert"), std::string::npos) << st.ToString();
    EXPECT_EQ(f->ReadF32Range(name, 0, 1, v).code(), StatusCode::kInvalidArgument) << name;
  }
  EXPECT_NE(f->ReadF32("ids", {1}, v).message().find("I64"), std::string::npos);
}

TEST_F(SafetensorsErrorsTest, ShapeMismatchOnRead) {
  WriteBytes(Path("ok.safetensors"), Valid());
  auto f = SafetensorsFile::Open(Path("ok.safetensors"));
  ASSERT_TRUE(f.ok());
  float v[4] = {-7, -7, -7, -7};
  for (const std::vector<int64_t>& wrong : {std::vector<int64_t>{4}, {2, 2, 1}, {1, 4}, {}}) {
    Status st = f->ReadF32("w", wrong, v);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << ShapeToString(wrong);
    EXPECT_NE(st.message().find(Path("ok.safetensors")), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("'w'"), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("[2, 2]"), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("expected " + ShapeToString(wrong)), std::string::npos) << st.ToString();
  }
  EXPECT_EQ(v[0], -7.0f);  // nothing written on failure
}

TEST_F(SafetensorsErrorsTest, MissingTensorName) {
  WriteBytes(Path("ok.safetensors"), Valid());
  auto f = SafetensorsFile::Open(Path("ok.safetensors"));
  ASSERT_TRUE(f.ok());
  float v[4];
  Status st = f->ReadF32("model.embed_tokens.weight", {2, 2}, v);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("model.embed_tokens.weight"), std::string::npos);
  EXPECT_NE(st.message().find(Path("ok.safetensors")), std::string::npos);
  EXPECT_EQ(f->ReadF32Range("missing", 0, 1, v).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace shard
