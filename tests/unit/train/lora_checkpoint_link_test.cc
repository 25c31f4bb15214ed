// LoRA checkpoints (shard/train/lora_checkpoint.h) never count a step folder
// that links out of the job's directory: run B never resumes from run A's
// lora_step_N through a link, whatever its fingerprint says.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "shard/train/lora_checkpoint.h"

namespace shard {
namespace {

namespace fs = std::filesystem;

void WriteState(const std::string& step_dir, const std::string& fingerprint) {
  fs::create_directories(step_dir);
  std::ofstream(step_dir + "/state.json") << R"({"format": "shardd-lora-checkpoint", "run_fingerprint": ")"
                                          << fingerprint << "\"}\n";
}

TEST(LoraCheckpointLinks, AStepLinkedFromAnotherRunIsNotThisRunsStep) {
  const std::string root = testing::TempDir() + "/lora_ckpt_links";
  fs::remove_all(root);
  WriteState(root + "/A/lora_step_10", "fp");
  WriteState(root + "/B/lora_step_5", "fp");
  fs::create_symlink(root + "/A/lora_step_10", root + "/B/lora_step_10");
  auto found = FindLoraCheckpoint(root + "/B", "fp");
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, root + "/B/lora_step_5");
  // A link inside the directory is one of its steps.
  fs::create_symlink("lora_step_5", root + "/B/lora_step_7");
  found = FindLoraCheckpoint(root + "/B", "fp");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, root + "/B/lora_step_7");
  fs::remove_all(root);
}

}  // namespace
}  // namespace shard
