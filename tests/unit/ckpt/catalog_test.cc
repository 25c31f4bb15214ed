// Choosing the step to resume from: FindLatestGoodStep returns the newest
// committed step that opens and verifies, skipping a damaged newest step of
// each kind (flipped byte, truncated shard, missing shard, wrong header
// version, manifest naming a missing file, a garbled manifest, a shard of
// another step) and never an uncommitted one; with nothing usable it says
// NOT_FOUND and why.
#include <gtest/gtest.h>

#include <functional>

#include <cstring>

#include "shard/common/checksum.h"
#include "tests/unit/ckpt/ckpt_protocol_util.h"

namespace shard {
namespace {

using namespace ckpt_testing;

// Rewrites the COMMITTED manifest of step_dir through `edit`.
void EditManifest(const std::string& step_dir, const std::function<void(Manifest*)>& edit) {
  auto m = Manifest::FromJson(ReadBytes(step_dir + "/COMMITTED"), "COMMITTED");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  edit(&*m);
  WriteBytes(step_dir + "/COMMITTED", m->ToJson());
}

// Makes the manifest's size and checksum of `file` match its current bytes, so
// only the deeper checks can catch what was done to it.
void ResealFile(const std::string& step_dir, const std::string& file) {
  const std::string path = step_dir + "/" + file;
  auto h = Xxh64File(path);
  ASSERT_TRUE(h.ok());
  const uint64_t size = fs::file_size(path);
  EditManifest(step_dir, [&](Manifest* m) {
    for (auto& f : m->files)
      if (f.name == file) {
        f.size = size;
        f.xxh64 = *h;
      }
  });
}

struct Corruption {
  std::string what;
  std::function<void(const std::string& step_dir)> apply;
  std::string needle;  // in CheckpointReader::Open's error
};

std::vector<Corruption> Corruptions() {
  const std::string s1 = ShardFileName(1, 2);
  return {
      {"flipped data byte", [=](const std::string& d) { FlipByte(d + "/" + s1, -3); }, "checksum"},
      {"flipped header byte", [=](const std::string& d) { FlipByte(d + "/" + s1, 30); }, "checksum"},
      {"truncated shard",
       [=](const std::string& d) { fs::resize_file(d + "/" + s1, fs::file_size(d + "/" + s1) - 12); }, "bytes"},
      {"missing shard", [=](const std::string& d) { fs::remove(d + "/" + s1); }, "missing"},
      {"wrong header version (checksum resealed)",
       [=](const std::string& d) {
         std::string b = ReadBytes(d + "/" + s1);
         uint32_t v = kShardFormatVersion + 1;
         std::memcpy(b.data() + 8, &v, 4);
         WriteBytes(d + "/" + s1, b);
         ResealFile(d, s1);
       },
       "format version"},
      {"truncated shard (size and checksum resealed)",
       [=](const std::string& d) {
         fs::resize_file(d + "/" + s1, fs::file_size(d + "/" + s1) - 12);
         ResealFile(d, s1);
       },
       "truncated"},
      {"manifest names a missing file",
       [](const std::string& d) { EditManifest(d, [](Manifest* m) { m->files[1].name = ShardFileName(7, 8); }); },
       "missing"},
      {"garbled manifest", [](const std::string& d) { WriteBytes(d + "/COMMITTED", "{\"format_version\": 1, \"st"); },
       "not valid JSON"},
      {"empty manifest", [](const std::string& d) { WriteBytes(d + "/COMMITTED", ""); }, "not valid JSON"},
      {"shard of another step (resealed)",
       [=](const std::string& d) {
         const std::string other = d + "/../other";
         fs::create_directories(other);
         WriteShard(other, 999, 1, 2);
         fs::copy_file(other + "/" + s1, d + "/" + s1, fs::copy_options::overwrite_existing);
         fs::remove_all(other);
         ResealFile(d, s1);
       },
       "does not belong"},
      // Issue 18 item 1: a copy of files[0] in place of files[1] passed every
      // per-file check (same bytes, same checksum) and half of each unit read as 0.
      {"one shard file listed twice",
       [](const std::string& d) { EditManifest(d, [](Manifest* m) { m->files[1] = m->files[0]; }); }, "twice"},
      // Issue 18 item 2: the worker segfaulted resuming from this.
      {"negative samples_seen",
       [](const std::string& d) { EditManifest(d, [](Manifest* m) { m->samples_seen = -5; }); },
       "data.samples_seen -5"},
      {"shard file holding another shard (resealed)",
       [=](const std::string& d) {
         fs::copy_file(d + "/" + ShardFileName(0, 2), d + "/" + s1, fs::copy_options::overwrite_existing);
         ResealFile(d, s1);
       },
       "holds shard 0 of 2"},
      {"manifest of another model",
       [](const std::string& d) { EditManifest(d, [](Manifest* m) { m->model_hash ^= 1; }); }, "does not belong"},
  };
}

class CatalogTest : public ProtocolTest {
 protected:
  std::string Job() const { return Path("job"); }
};

TEST_F(CatalogTest, NewestCommittedStepWins) {
  MakeCommittedStep(Job(), 10, 2);
  MakeCommittedStep(Job(), 20, 2);
  MakePartialStep(Job(), 30, 2);  // an interrupted save is never chosen
  auto s = FindLatestGoodStep(Job(), true);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, Job() + "/" + StepDirName(20));
}

TEST_F(CatalogTest, FallsBackPastEachKindOfDamage) {
  for (const auto& c : Corruptions()) {
    SCOPED_TRACE(c.what);
    fs::remove_all(Job());
    MakeCommittedStep(Job(), 10, 2);
    const std::string newest = MakeCommittedStep(Job(), 20, 2);
    c.apply(newest);
    auto open = CheckpointReader::Open(newest, true);
    ASSERT_FALSE(open.ok()) << "the damage went unnoticed";
    EXPECT_NE(open.status().message().find(c.needle), std::string::npos) << open.status().ToString();
    auto s = FindLatestGoodStep(Job(), true);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(*s, Job() + "/" + StepDirName(10));
    // The fallback step reads back exactly.
    auto r = CheckpointReader::Open(*s, true);
    ASSERT_TRUE(r.ok());
    std::vector<float> p(101);
    ASSERT_TRUE(r->ReadUnitRange(1, 0, 101, p.data(), nullptr, nullptr).ok());
    EXPECT_EQ(p[100], Value(10, 1, 0, 100));
  }
}

TEST_F(CatalogTest, NotFoundWhenNothingIsUsable) {
  auto empty = FindLatestGoodStep(Job(), true);
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_NE(empty.status().message().find(Job()), std::string::npos) << empty.status().ToString();

  MakePartialStep(Job(), 5, 1);
  auto partial_only = FindLatestGoodStep(Job(), true);
  EXPECT_EQ(partial_only.status().code(), StatusCode::kNotFound) << "an uncommitted step is not a checkpoint";

  const auto corruptions = Corruptions();
  const std::string a = MakeCommittedStep(Job(), 10, 2);
  const std::string b = MakeCommittedStep(Job(), 20, 2);
  corruptions[0].apply(a);  // flipped byte
  corruptions[3].apply(b);  // missing shard
  auto none = FindLatestGoodStep(Job(), true);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  const std::string msg = none.status().message();
  EXPECT_NE(msg.find(Job()), std::string::npos) << msg;
  // Says how many committed steps were rejected and why the newest was.
  EXPECT_NE(msg.find("2 committed"), std::string::npos) << msg;
  EXPECT_NE(msg.find(StepDirName(20)), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
}

// Without checksum verification a flipped data byte is not seen (the headers
// are intact), but structural damage still is.
TEST_F(CatalogTest, VerificationIsWhatCatchesFlippedData) {
  MakeCommittedStep(Job(), 10, 2);
  const std::string newest = MakeCommittedStep(Job(), 20, 2);
  Corruptions()[0].apply(newest);
  auto unverified = FindLatestGoodStep(Job(), false);
  ASSERT_TRUE(unverified.ok());
  EXPECT_EQ(*unverified, newest);
  Corruptions()[3].apply(newest);
  auto s = FindLatestGoodStep(Job(), false);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, Job() + "/" + StepDirName(10));
}

}  // namespace
}  // namespace shard
