#include "coordinator/launchers/kubernetes/yaml_writer.h"

#include <cctype>

namespace shardd::k8s {

namespace {

using Json = nlohmann::ordered_json;

// A plain scalar only when YAML 1.1 and 1.2 readers both see this exact
// string: a conservative character set, and not a word or number YAML gives
// another type.
bool PlainSafe(const std::string& s) {
  if (s.empty()) return false;
  static const char* kTyped[] = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"};
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* w : kTyped)
    if (lower == w) return false;
  bool numeric = true;
  for (char c : s)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E' ||
          c == '_' || c == ':'))
      numeric = false;
  if (numeric) return false;
  if (!std::isalpha(static_cast<unsigned char>(s[0])) && s[0] != '/' && s[0] != '_') return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/' || c == '@' ||
          c == '='))
      return false;
  return true;
}

// Multi-line text as a literal block: every line kept as is. Only when the
// first line does not start with a space (that would need an indentation
// indicator) and no line ends in a space (invisible, easily mangled).
bool LiteralSafe(const std::string& s) {
  if (s.find('\n') == std::string::npos || s[0] == ' ' || s[0] == '\n') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = s[i];
    if (c == '\t' || c == '\r' || (c < 0x20 && c != '\n')) return false;
    if (c == ' ' && (i + 1 == s.size() || s[i + 1] == '\n')) return false;
  }
  return true;
}

std::string Scalar(const Json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    return PlainSafe(s) ? s : v.dump();
  }
  return v.dump();  // numbers, booleans, null
}

bool Inline(const Json& v) { return !v.is_structured() || v.empty(); }

void Write(const Json& v, int indent, std::string* out);

void WriteLiteral(const std::string& s, int indent, std::string* out) {
  const bool trailing_newline = s.back() == '\n';
  *out += trailing_newline ? "|\n" : "|-\n";
  size_t start = 0;
  const std::string body = trailing_newline ? s.substr(0, s.size() - 1) : s;
  while (start <= body.size()) {
    size_t nl = body.find('\n', start);
    if (nl == std::string::npos) nl = body.size();
    const std::string line = body.substr(start, nl - start);
    if (!line.empty()) *out += std::string(indent, ' ') + line;
    *out += "\n";
    start = nl + 1;
  }
}

// Writes the value that follows "key:" or "- ".
void WriteValueAfter(const Json& v, int indent, std::string* out) {
  if (v.is_string() && LiteralSafe(v.get_ref<const std::string&>())) {
    *out += " ";
    WriteLiteral(v.get_ref<const std::string&>(), indent + 2, out);
  } else if (Inline(v)) {
    *out += " " + (v.is_object() ? std::string("{}") : v.is_array() ? std::string("[]") : Scalar(v)) + "\n";
  } else {
    *out += "\n";
    Write(v, v.is_array() ? indent : indent + 2, out);
  }
}

void Write(const Json& v, int indent, std::string* out) {
  const std::string pad(indent, ' ');
  if (v.is_object()) {
    for (const auto& [k, child] : v.items()) {
      *out += pad + Scalar(Json(k)) + ":";
      WriteValueAfter(child, indent, out);
    }
  } else if (v.is_array()) {
    for (const Json& item : v) {
      if (item.is_object() && !item.empty()) {
        // "- first: x" then the other keys under it.
        std::string sub;
        Write(item, indent + 2, &sub);
        *out += pad + "- " + sub.substr(indent + 2);
      } else if (item.is_array() && !item.empty()) {
        *out += pad + "-\n";
        Write(item, indent + 2, out);
      } else {
        *out += pad + "-";
        WriteValueAfter(item, indent, out);
      }
    }
  } else {
    *out += pad + Scalar(v) + "\n";
  }
}

}  // namespace

std::string ToYaml(const nlohmann::ordered_json& doc) {
  std::string out;
  if (Inline(doc)) return (doc.is_object() ? std::string("{}") : doc.is_array() ? "[]" : Scalar(doc)) + "\n";
  Write(doc, 0, &out);
  return out;
}

}  // namespace shardd::k8s
