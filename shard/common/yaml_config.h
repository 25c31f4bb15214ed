// Strict YAML → typed config mapping. YAML is only the format: each component
// owns a plain struct; a loader walks a YamlMap, which records every key it was
// asked for, so Finish() can name any key nobody asked for (a typo) and wrong
// types come back as errors naming the file and dotted key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shard {

// Refuses text that is not valid UTF-8 (a stray byte, an overlong form, a
// surrogate, past U+10FFFF), naming `what`, the line and the byte within it:
// a job file travels as a protobuf string, which must be UTF-8. Every
// YamlMap::Load* checks its text, and so does shardctl before it sends one.
Status CheckUtf8(const std::string& text, const std::string& what);

class YamlMap {
 public:
  // `file` names the source in errors; `prefix` is the dotted path of this map
  // ("" for the document root).
  YamlMap(YAML::Node node, std::string file, std::string prefix);

  // Loads a file and checks its root is a mapping.
  static StatusOr<YamlMap> LoadFile(const std::string& path);
  static StatusOr<YamlMap> LoadString(const std::string& text, const std::string& name);

  bool Has(const std::string& key) const;  // also marks the key as one this map knows

  // Optional keys: absent keeps *out unchanged (the struct's default).
  Status Get(const std::string& key, int* out);
  Status Get(const std::string& key, int64_t* out);
  Status Get(const std::string& key, double* out);
  Status Get(const std::string& key, bool* out);
  Status Get(const std::string& key, std::string* out);
  Status Get(const std::string& key, std::vector<double>* out);
  Status Get(const std::string& key, std::vector<std::string>* out);
  // A mapping of string keys to scalar values (labels, environment).
  Status Get(const std::string& key, std::map<std::string, std::string>* out);
  // A string key restricted to `allowed` values.
  Status GetEnum(const std::string& key, const std::vector<std::string>& allowed, std::string* out);

  // A nested mapping; absent yields an empty map (all defaults).
  StatusOr<YamlMap> Sub(const std::string& key);

  // Error if the map holds a key nobody asked for.
  Status Finish() const;

  // "file: a.b.key" — for error messages about a value.
  std::string Where(const std::string& key) const;
  YAML::Node& node() { return node_; }

 private:
  StatusOr<YAML::Node> Scalar(const std::string& key, bool* present);
  // Get of one scalar: unset or null leaves *out; else converts, `what` naming
  // the expected kind ("an integer") in the error.
  template <typename T>
  Status GetScalar(const std::string& key, const char* what, T* out);

  YAML::Node node_;
  std::string file_;
  std::string prefix_;
  // Every key a reader asked about (Get, Sub or Has): what Finish calls known.
  mutable std::set<std::string> asked_;
};

// Applies `--set a.b.c=value` overrides to a YAML document before it is mapped.
// The value is parsed as YAML ("3", "1e-3", "[0.9, 0.95]", "true", "text").
// Intermediate maps are created, so an unknown key still fails in Finish().
Status ApplyOverride(YAML::Node root, const std::string& assignment);

}  // namespace shard
