#include "coordinator/launchers/kubernetes/k8s_names.h"

#include <cstdint>
#include <cstdio>

namespace shardd::k8s {

namespace {

// FNV-1a: stable across builds and platforms, unlike std::hash.
std::string Hash8(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(h ^ (h >> 32)));
  return buf;
}

// Lower case, [a-z0-9-] only, no leading, trailing or doubled '-'.
std::string Sanitize(const std::string& id) {
  std::string out;
  for (char c : id) {
    char l = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9');
    if (ok) {
      out += l;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

// The sanitized id, shortened to `room` characters with the hash when it
// differs from the original or does not fit.
std::string Fit(const std::string& id, size_t room) {
  std::string s = Sanitize(id);
  if (s == id && s.size() <= room && !s.empty()) return s;
  const std::string h = Hash8(id);
  const size_t keep = room > h.size() + 1 ? room - h.size() - 1 : 0;
  if (s.size() > keep) s.resize(keep);
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? h : s + "-" + h;
}

bool Alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

}  // namespace

std::string ObjectName(const std::string& job_id, int attempt) {
  const std::string prefix = "shardd-";
  const std::string suffix = "-a" + std::to_string(attempt);
  return prefix + Fit(job_id, kMaxObjectName - prefix.size() - suffix.size()) + suffix;
}

std::string JobLabelValue(const std::string& job_id) { return Fit(job_id, 63); }

std::map<std::string, std::string> SelectorLabels(const std::string& job_id, int attempt) {
  return {{kJobLabel, JobLabelValue(job_id)}, {kAttemptLabel, std::to_string(attempt)}};
}

std::string SelectorString(const std::string& job_id, int attempt) {
  std::string out;
  for (const auto& [k, v] : SelectorLabels(job_id, attempt)) out += (out.empty() ? "" : ",") + k + "=" + v;
  return out;
}

bool IsDns1123Label(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return s.front() != '-' && s.back() != '-';
}

bool IsLabelValue(const std::string& s) {
  if (s.empty()) return true;
  if (s.size() > 63 || !Alnum(s.front()) || !Alnum(s.back())) return false;
  for (char c : s)
    if (!(Alnum(c) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

bool IsQualifiedName(const std::string& s) {
  std::string name = s;
  if (size_t slash = s.find('/'); slash != std::string::npos) {
    const std::string prefix = s.substr(0, slash);
    name = s.substr(slash + 1);
    // The prefix is a DNS subdomain: dot-separated DNS labels, 253 at most.
    if (prefix.empty() || prefix.size() > 253) return false;
    size_t start = 0;
    while (start <= prefix.size()) {
      size_t dot = prefix.find('.', start);
      if (dot == std::string::npos) dot = prefix.size();
      if (!IsDns1123Label(prefix.substr(start, dot - start))) return false;
      start = dot + 1;
    }
  }
  return !name.empty() && IsLabelValue(name);
}

bool IsEnvVarName(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-' || c == '.' ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

}  // namespace shardd::k8s
