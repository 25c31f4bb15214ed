// Kubernetes names of one attempt's objects. Every object of an attempt (the
// Job, its headless Service, its token Secret) has the same name, derived
// deterministically from (job id, attempt), so a restarted coordinator finds
// them again from what it persisted, without having stored anything extra.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>

namespace shardd::k8s {

// Labels on every object and pod shardd creates.
inline constexpr const char* kManagedByLabel = "app.kubernetes.io/managed-by";
inline constexpr const char* kManagedByValue = "shardd";
inline constexpr const char* kJobLabel = "shardd.io/job";          // the sanitized job id
inline constexpr const char* kAttemptLabel = "shardd.io/attempt";  // "3"
inline constexpr const char* kJobIdAnnotation = "shardd.io/job-id";  // the job id as shardd spells it

// Longest object name: the Job controller names pod hostnames
// "<job>-<index>", which must stay a DNS label (63), so 10 characters are kept
// for "-<index>".
inline constexpr size_t kMaxObjectName = 52;

// "shardd-<job id lowercased, [a-z0-9-] only>-a<attempt>". When the job id
// had to be changed (other characters, upper case) or shortened, an 8-digit
// hash of the original id is added so two ids never share a name.
std::string ObjectName(const std::string& job_id, int attempt);

// The job id as a label value (63 characters at most, same rules and hash).
std::string JobLabelValue(const std::string& job_id);

// The labels that select one attempt's objects and pods, and their selector
// string for kubectl -l ("shardd.io/job=demo-1,shardd.io/attempt=2").
std::map<std::string, std::string> SelectorLabels(const std::string& job_id, int attempt);
std::string SelectorString(const std::string& job_id, int attempt);

// Kubernetes validation rules, for refusing bad input before kubectl does.
bool IsDns1123Label(const std::string& s);       // namespaces, object names
bool IsLabelValue(const std::string& s);         // "" or <=63 [A-Za-z0-9._-], alnum at both ends
bool IsQualifiedName(const std::string& s);      // label keys: [prefix/]name
bool IsEnvVarName(const std::string& s);         // [-._a-zA-Z][-._a-zA-Z0-9]*

}  // namespace shardd::k8s
