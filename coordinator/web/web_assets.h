// The dashboard's files (coordinator/web/*.html|js|css), compiled into the
// binary by cmake/EmbedWebAssets.cmake.
#pragma once

#include <string_view>

namespace shardd {

struct WebAsset {
  std::string_view path;  // "/index.html"
  const char* content_type;
  std::string_view body;
};

// nullptr when no file has that path.
const WebAsset* FindWebAsset(std::string_view path);

}  // namespace shardd
