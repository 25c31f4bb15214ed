// Helpers shared by the libFuzzer targets in this folder. Readers that take a
// path get the input through a file in a per-process scratch directory (on
// tmpfs when /dev/shm exists), rewritten for every input.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "shard/common/status.h"

namespace shard::fuzz {

// The scratch directory, made once per process and removed at exit.
inline const std::string& ScratchDir() {
  // Never freed: the exit handler that removes it runs after static destructors.
  static const std::string* dir = [] {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    auto* d = new std::string(std::string(base) + "/shardd_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(ScratchDir(), ec);
    });
    return d;
  }();
  return *dir;
}

// Writes bytes to ScratchDir()/name and returns the path.
inline std::string WriteScratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = ScratchDir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// A refused input must say why: an error with an empty message is a bug.
inline void CheckRefusal(const Status& st) {
  if (!st.ok() && st.message().empty()) {
    std::fprintf(stderr, "refused without a message (code %d)\n", static_cast<int>(st.code()));
    std::abort();
  }
}

}  // namespace shard::fuzz
