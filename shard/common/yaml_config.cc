#include "shard/common/yaml_config.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <yaml-cpp/depthguard.h>

namespace shard {
namespace {

const char* TypeName(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: return "a scalar";
    default: return "nothing";
  }
}

template <typename T>
Status Convert(const YAML::Node& n, const std::string& where, const char* expected, T* out) {
  try {
    *out = n.as<T>();
    return OkStatus();
  } catch (const YAML::Exception&) {
    return InvalidArgument(where + ": expected " + expected + ", got '" + n.Scalar() + "'");
  }
}

// Deeper than any config shardd reads; yaml-cpp's own limit (2000) reports
// itself as "bad file", so a document is refused here first with its place.
constexpr int kMaxDepth = 64;

// The most values one walk of a document visits: at least kMinNodeBudget,
// more for a large file (a value takes at least one byte of text, so a file
// without aliases always fits). yaml-cpp resolves an alias to the anchored
// node itself, so a small file of nested aliases ("billion laughs": 1.3 KB,
// 9 levels of 10) is 10^9 values to any walk: it is refused here, before
// anything walks it.
constexpr int64_t kMinNodeBudget = 1'000'000;
struct NodeBudget {
  explicit NodeBudget(size_t text_bytes)
      : limit(std::max<int64_t>(kMinNodeBudget, 2 * static_cast<int64_t>(text_bytes))), left(limit) {}
  int64_t limit;
  int64_t left;
};

// Walks the whole document once: every mapping key must be a single value and
// appear once (yaml-cpp keeps a repeated key in the map and `node[key]` returns
// the first, so a second `train:` block would be silently ignored), nesting
// stays under kMaxDepth, and the walk visits at most *budget values (aliases
// expanded).
Status CheckTree(const YAML::Node& n, const std::string& file, const std::string& path, int depth,
                 NodeBudget* budget) {
  if (--budget->left < 0)
    return InvalidArgument(file + ": more than " + std::to_string(budget->limit) +
                           " values once its aliases (*name) are expanded (at " + (path.empty() ? "the top" : path) +
                           ", line " + std::to_string(n.Mark().line + 1) +
                           "); nested aliases multiply: expand fewer, or write the values out");
  if (depth > kMaxDepth)
    return InvalidArgument(file + ": " + (path.empty() ? "the document" : path) + ": nested deeper than " +
                           std::to_string(kMaxDepth) + " levels (line " + std::to_string(n.Mark().line + 1) + ")");
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      RETURN_IF_ERROR(CheckTree(n[i], file, path + "[" + std::to_string(i) + "]", depth + 1, budget));
    return OkStatus();
  }
  if (!n.IsMap()) return OkStatus();
  std::map<std::string, int> seen;  // key -> 1-based line of its first use
  for (const auto& kv : n) {
    const int line = kv.first.Mark().line + 1;
    if (!kv.first.IsScalar())
      return InvalidArgument(file + ": " + (path.empty() ? "" : path + ": ") + "line " + std::to_string(line) +
                             ": a key must be a single value, got " + TypeName(kv.first));
    const std::string& key = kv.first.Scalar();
    const std::string dotted = path.empty() ? key : path + "." + key;
    auto [it, fresh] = seen.emplace(key, line);
    if (!fresh)
      return InvalidArgument(file + ": " + dotted + ": duplicate key (line " + std::to_string(it->second) +
                             " and line " + std::to_string(line) + "); keep one");
    RETURN_IF_ERROR(CheckTree(kv.second, file, dotted, depth + 1, budget));
  }
  return OkStatus();
}

// The length of the UTF-8 sequence at s[i], or 0 when it is not a valid one.
size_t Utf8SequenceLength(const unsigned char* s, size_t n, size_t i) {
  const unsigned char c = s[i];
  if (c < 0x80) return 1;
  size_t len = 0;
  uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
  else return 0;
  if (i + len > n) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  static constexpr uint32_t kMinOfLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinOfLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// Parses text, naming the file and line of any error, and checks the tree.
StatusOr<YAML::Node> ParseDocumentText(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    return InvalidArgument(name + ": not valid YAML: nested too deeply (line " + std::to_string(e.mark.line + 1) +
                           ")");
  } catch (const YAML::Exception& e) {
    return InvalidArgument(name + ": not valid YAML: line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) return InvalidArgument(name + ": the top level must be a mapping of keys");
  NodeBudget budget(text.size());
  RETURN_IF_ERROR(CheckTree(root, name, "", 0, &budget));
  return root;
}

}  // namespace

Status CheckUtf8(const std::string& text, const std::string& what) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t len = Utf8SequenceLength(s, text.size(), i);
    if (len == 0) {
      char byte[8];
      std::snprintf(byte, sizeof(byte), "0x%02X", s[i]);
      return InvalidArgument(what + ": not valid UTF-8: byte " + byte + " at line " + std::to_string(line) +
                             ", byte " + std::to_string(i - line_start + 1) + " of the line (save it as UTF-8)");
    }
    if (s[i] == '\n') ++line, line_start = i + 1;
    i += len;
  }
  return OkStatus();
}

YamlMap::YamlMap(YAML::Node node, std::string file, std::string prefix)
    : node_(node), file_(std::move(file)), prefix_(std::move(prefix)) {}

StatusOr<YamlMap> YamlMap::LoadString(const std::string& text, const std::string& name) {
  RETURN_IF_ERROR(CheckUtf8(text, name));
  ASSIGN_OR_RETURN(YAML::Node root, ParseDocumentText(text, name));
  return YamlMap(root, name, "");
}

StatusOr<YamlMap> YamlMap::LoadFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return NotFound("job file " + path + " does not exist");
  if (!std::filesystem::is_regular_file(path, ec))  // /dev/zero, a FIFO, a folder: never read
    return InvalidArgument("job file " + path + " is not a regular file");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return InvalidArgument(path + ": cannot be read");
  return LoadString(text.str(), path);
}

std::string YamlMap::Where(const std::string& key) const {
  return file_ + ": " + (prefix_.empty() ? key : prefix_ + "." + key);
}

bool YamlMap::Has(const std::string& key) const {
  asked_.insert(key);
  return node_[key].IsDefined();
}

StatusOr<YAML::Node> YamlMap::Scalar(const std::string& key, bool* present) {
  asked_.insert(key);
  YAML::Node n = node_[key];
  *present = n.IsDefined() && !n.IsNull();
  if (*present && !n.IsScalar())
    return InvalidArgument(Where(key) + ": expected a single value, got " + TypeName(n));
  return n;
}

template <typename T>
Status YamlMap::GetScalar(const std::string& key, const char* what, T* out) {
  bool present;
  ASSIGN_OR_RETURN(YAML::Node n, Scalar(key, &present));
  return present ? Convert(n, Where(key), what, out) : OkStatus();
}

Status YamlMap::Get(const std::string& key, int* out) { return GetScalar(key, "an integer", out); }
Status YamlMap::Get(const std::string& key, int64_t* out) { return GetScalar(key, "an integer", out); }
Status YamlMap::Get(const std::string& key, double* out) { return GetScalar(key, "a number", out); }
Status YamlMap::Get(const std::string& key, bool* out) { return GetScalar(key, "true or false", out); }
Status YamlMap::Get(const std::string& key, std::string* out) { return GetScalar(key, "a string", out); }

Status YamlMap::Get(const std::string& key, std::vector<double>* out) {
  asked_.insert(key);
  YAML::Node n = node_[key];
  if (!n.IsDefined() || n.IsNull()) return OkStatus();
  if (!n.IsSequence()) return InvalidArgument(Where(key) + ": expected a list of numbers, got " + TypeName(n));
  std::vector<double> v;
  for (size_t i = 0; i < n.size(); ++i) {
    double x;
    RETURN_IF_ERROR(Convert(n[i], Where(key) + "[" + std::to_string(i) + "]", "a number", &x));
    v.push_back(x);
  }
  *out = std::move(v);
  return OkStatus();
}

Status YamlMap::Get(const std::string& key, std::vector<std::string>* out) {
  asked_.insert(key);
  YAML::Node n = node_[key];
  if (!n.IsDefined() || n.IsNull()) return OkStatus();
  if (!n.IsSequence()) return InvalidArgument(Where(key) + ": expected a list of strings, got " + TypeName(n));
  std::vector<std::string> v;
  for (size_t i = 0; i < n.size(); ++i) {
    std::string x;
    RETURN_IF_ERROR(Convert(n[i], Where(key) + "[" + std::to_string(i) + "]", "a string", &x));
    v.push_back(x);
  }
  *out = std::move(v);
  return OkStatus();
}

Status YamlMap::Get(const std::string& key, std::map<std::string, std::string>* out) {
  asked_.insert(key);
  YAML::Node n = node_[key];
  if (!n.IsDefined() || n.IsNull()) return OkStatus();
  if (!n.IsMap()) return InvalidArgument(Where(key) + ": expected a mapping of names to strings, got " + TypeName(n));
  std::map<std::string, std::string> v;
  for (const auto& kv : n) {
    std::string k, x;
    RETURN_IF_ERROR(Convert(kv.first, Where(key), "a string key", &k));
    RETURN_IF_ERROR(Convert(kv.second, Where(key) + "." + k, "a string", &x));
    v[k] = x;
  }
  *out = std::move(v);
  return OkStatus();
}

Status YamlMap::GetEnum(const std::string& key, const std::vector<std::string>& allowed, std::string* out) {
  std::string v = *out;
  RETURN_IF_ERROR(Get(key, &v));
  for (const auto& a : allowed) {
    if (a == v) {
      *out = v;
      return OkStatus();
    }
  }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return InvalidArgument(Where(key) + ": '" + v + "' is not one of: " + list);
}

StatusOr<YamlMap> YamlMap::Sub(const std::string& key) {
  asked_.insert(key);
  std::string prefix = prefix_.empty() ? key : prefix_ + "." + key;
  YAML::Node n = node_[key];
  if (!n.IsDefined() || n.IsNull()) return YamlMap(YAML::Node(YAML::NodeType::Map), file_, prefix);
  if (!n.IsMap()) return InvalidArgument(Where(key) + ": expected a mapping of keys, got " + TypeName(n));
  return YamlMap(n, file_, prefix);
}

Status YamlMap::Finish() const {
  for (const auto& kv : node_) {
    const std::string key = kv.first.Scalar();
    if (asked_.count(key)) continue;
    std::string known;
    for (const auto& a : asked_) known += (known.empty() ? "" : ", ") + a;
    return InvalidArgument(Where(key) + ": unknown key (" + (known.empty() ? "no key is read here" : "known here: " + known) +
                           ")");
  }
  return OkStatus();
}

Status ApplyOverride(YAML::Node root, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    return InvalidArgument("--set '" + assignment + "': expected key.path=value");
  std::string path = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);
  // An empty value would parse as null, which every Get() reads as "absent":
  // the key would silently keep its default. It is the empty string instead:
  // it clears a text key, and a number or flag refuses it by name.
  const bool blank = value.find_first_not_of(" \t") == std::string::npos;
  YAML::Node parsed;
  try {
    parsed = blank ? YAML::Node(std::string()) : YAML::Load(value);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("--set '" + assignment + "': value is not valid YAML: " + e.msg);
  }
  NodeBudget budget(value.size());
  RETURN_IF_ERROR(CheckTree(parsed, "--set '" + assignment + "'", "", 1, &budget));
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // yaml-cpp nodes are handles; walking with operator[] on a copy rebinds, so
  // keep a chain of nodes and assign leaf-first.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i].empty()) return InvalidArgument("--set '" + assignment + "': empty key in path");
    YAML::Node next = chain.back()[parts[i]];
    if (next.IsDefined() && !next.IsNull() && !next.IsMap())
      return InvalidArgument("--set '" + assignment + "': '" + parts[i] + "' is not a mapping");
    if (!next.IsDefined() || next.IsNull()) {
      chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = chain.back()[parts[i]];
    }
    chain.push_back(next);
  }
  if (parts.back().empty()) return InvalidArgument("--set '" + assignment + "': empty key in path");
  chain.back()[parts.back()] = parsed;
  return OkStatus();
}

}  // namespace shard
