// SafetensorsFile on files built byte by byte, as Hugging Face's library lays them out.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "shard/ckpt/safetensors.h"
#include "tests/unit/ckpt/ckpt_test_util.h"

namespace shard {
namespace {

using testing_util::CkptTest;
using testing_util::F32Bytes;
using testing_util::SafetensorsBytes;
using testing_util::U16Bytes;
using testing_util::WriteBytes;

class SafetensorsReaderTest : public CkptTest {};

// What safetensors.torch.save_file({"pos": int64 [7], "a": f32 [[1,2],[3,4]],
// "b": bf16 [1,-2], "c": f16 [0.5, 65504]}, metadata={"format": "pt"}) writes:
// length prefix, compact JSON with __metadata__ first and tensors sorted by
// alignment then name, space padding to a multiple of 8, then the data.
TEST_F(SafetensorsReaderTest, GoldenBytesFromReferenceLayout) {
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("pos":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                             R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
                             R"("c":{"dtype":"F16","shape":[2],"data_offsets":[28,32]}})"
                             "  ";
  ASSERT_EQ(header.size(), 256u);
  const unsigned char bytes[] = {
      0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // header length 256, little-endian
  };
  const unsigned char data[] = {
      0x07, 0,    0,    0,    0,    0,    0,    0,     // pos: int64 7
      0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,  // a: 1.0f, 2.0f
      0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40,  // a: 3.0f, 4.0f
      0x80, 0x3f, 0x00, 0xc0,                          // b: bf16 1.0, -2.0
      0x00, 0x38, 0xff, 0x7b,                          // c: f16 0.5, 65504
  };
  std::string file(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  file += header;
  file.append(reinterpret_cast<const char*>(data), sizeof(data));
  ASSERT_EQ(file.size(), 8u + 256u + 32u);
  WriteBytes(Path("golden.safetensors"), file);

  auto f = SafetensorsFile::Open(Path("golden.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  ASSERT_EQ(f->tensors().size(), 4u);
  // Listed in data order.
  EXPECT_EQ(f->tensors()[0].name, "pos");
  EXPECT_EQ(f->tensors()[1].name, "a");
  EXPECT_EQ(f->tensors()[3].name, "c");

  const TensorInfo* pos = f->Find("pos");
  ASSERT_NE(pos, nullptr);
  EXPECT_FALSE(pos->supported());
  EXPECT_EQ(pos->dtype_name, "I64");
  EXPECT_EQ(pos->numel, 1);

  const TensorInfo* a = f->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a->numel, 4);
  EXPECT_EQ(a->data_begin, 8u);
  EXPECT_EQ(a->data_end, 24u);

  float av[4];
  ASSERT_TRUE(f->ReadF32("a", {2, 2}, av).ok());
  EXPECT_EQ(av[0], 1.0f);
  EXPECT_EQ(av[1], 2.0f);
  EXPECT_EQ(av[2], 3.0f);
  EXPECT_EQ(av[3], 4.0f);
  float bv[2];
  ASSERT_TRUE(f->ReadF32("b", {2}, bv).ok());
  EXPECT_EQ(bv[0], 1.0f);
  EXPECT_EQ(bv[1], -2.0f);
  float cv[2];
  ASSERT_TRUE(f->ReadF32("c", {2}, cv).ok());
  EXPECT_EQ(cv[0], 0.5f);
  EXPECT_EQ(cv[1], 65504.0f);
  EXPECT_EQ(f->Find("nope"), nullptr);
}

TEST_F(SafetensorsReaderTest, EmptyHeaderAndScalarAndEmptyTensor) {
  WriteBytes(Path("empty.safetensors"), SafetensorsBytes("{}      ", ""));
  auto e = SafetensorsFile::Open(Path("empty.safetensors"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->tensors().empty());
  EXPECT_TRUE(e->metadata().empty());

  WriteBytes(Path("s.safetensors"),
             SafetensorsBytes(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                              R"("z":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})",
                              F32Bytes({2.5f})));
  auto s = SafetensorsFile::Open(Path("s.safetensors"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  float v = 0;
  ASSERT_TRUE(s->ReadF32("s", {}, &v).ok());
  EXPECT_EQ(v, 2.5f);
  EXPECT_EQ(s->Find("z")->numel, 0);
  EXPECT_TRUE(s->ReadF32("z", {0, 3}, nullptr).ok());
}

TEST_F(SafetensorsReaderTest, RangedReadsAllDTypes) {
  // The header length is made odd, so the 16-bit data sits at odd addresses
  // (the format does not promise alignment) and must still read correctly.
  std::vector<float> f32 = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<uint16_t> bf16, f16;
  for (float x : f32) {
    bf16.push_back(F32ToBF16(x));
    f16.push_back(F32ToF16(x));
  }
  std::string header = R"({"x":{"dtype":"F32","shape":[2,5],"data_offsets":[0,40]},)"
                       R"("y":{"dtype":"BF16","shape":[10],"data_offsets":[40,60]},)"
                       R"("w":{"dtype":"F16","shape":[5,2],"data_offsets":[60,80]}})";
  if (header.size() % 2 == 0) header += " ";
  WriteBytes(Path("r.safetensors"), SafetensorsBytes(header, F32Bytes(f32) + U16Bytes(bf16) + U16Bytes(f16)));
  auto f = SafetensorsFile::Open(Path("r.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (const char* name : {"x", "y", "w"}) {
    float out[4] = {-1, -1, -1, -1};
    ASSERT_TRUE(f->ReadF32Range(name, 3, 4, out).ok()) << name;
    EXPECT_EQ(out[0], 3.0f) << name;
    EXPECT_EQ(out[3], 6.0f) << name;
    float whole[10];
    ASSERT_TRUE(f->ReadF32Range(name, 0, 10, whole).ok());
    EXPECT_EQ(whole[9], 9.0f);
    EXPECT_TRUE(f->ReadF32Range(name, 10, 0, whole).ok());  // empty range at the end

    Status st = f->ReadF32Range(name, 7, 4, out);
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
    EXPECT_NE(st.message().find(name), std::string::npos);
    EXPECT_EQ(f->ReadF32Range(name, -1, 2, out).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(f->ReadF32Range(name, 0, -1, out).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(f->ReadF32Range(name, std::numeric_limits<int64_t>::max(), 2, out).code(),
              StatusCode::kOutOfRange);
  }
}

TEST_F(SafetensorsReaderTest, MovedFileStillReads) {
  WriteBytes(
      Path("m.safetensors"),
      SafetensorsBytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", F32Bytes({1.5f, -3.0f})));
  auto f = SafetensorsFile::Open(Path("m.safetensors"));
  ASSERT_TRUE(f.ok());
  SafetensorsFile moved = std::move(f).value();
  float v[2];
  ASSERT_TRUE(moved.ReadF32("t", {2}, v).ok());
  EXPECT_EQ(v[1], -3.0f);
  EXPECT_EQ(moved.path(), Path("m.safetensors"));
}

}  // namespace
}  // namespace shard
