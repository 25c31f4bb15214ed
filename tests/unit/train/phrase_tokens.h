// A repetitive token file for trainer tests: random phrases (5-10 tokens over
// `vocab`) repeated in a seeded order, so a tiny model can learn them. Written
// to testing::TempDir()/NAME.u32; returns the path.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace shard::testing_tokens {

inline std::string MakePhraseTokens(const std::string& name, int n, int vocab, uint32_t seed = 3) {
  std::string path = ::testing::TempDir() + "/" + name + ".u32";
  std::mt19937 rng(seed);
  std::vector<std::vector<uint32_t>> phrases(8);
  for (auto& p : phrases) {
    p.resize(5 + rng() % 6);
    for (auto& t : p) t = rng() % vocab;
  }
  std::vector<uint32_t> toks;
  while (static_cast<int>(toks.size()) < n) {
    auto& p = phrases[rng() % phrases.size()];
    toks.insert(toks.end(), p.begin(), p.end());
  }
  toks.resize(n);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(toks.data()), toks.size() * 4);
  return path;
}

}  // namespace shard::testing_tokens
