// Writes JSON values as block-style YAML, the way people read Kubernetes
// manifests. The manifests are built as nlohmann::ordered_json (so tests can
// inspect the structure and key order is kept) and only written as YAML at the
// end. Strings that YAML could read as something else (true, 1.0, null, "a: b")
// are written JSON-quoted, which is valid YAML; multi-line strings are written
// as literal blocks.
//
// Thread-safety: pure function.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace shardd::k8s {

// One YAML document (no leading "---"), ending in a newline.
std::string ToYaml(const nlohmann::ordered_json& doc);

}  // namespace shardd::k8s
