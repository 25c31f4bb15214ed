// A test fixture for tests that spawn shell scripts: a fresh directory per
// test (removed after it) and SpawnOptions for `/bin/sh -c script` logging to
// out.log there. Shared by process_test.cc and supervisor_test.cc.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "shard/common/process.h"

namespace shard::testing_util {

class ShellFixture : public ::testing::Test {
 protected:
  explicit ShellFixture(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (prefix_ + "_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  SpawnOptions Sh(const std::string& script) const {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", script};
    o.log_path = Path("out.log");
    return o;
  }
  std::string prefix_;
  std::filesystem::path dir_;
};

}  // namespace shard::testing_util
