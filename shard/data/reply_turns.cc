#include "shard/data/reply_turns.h"

#include <string_view>

namespace shard {
namespace {

// A text found nowhere in `full` that stands in for reply k: digits and
// punctuation, so the case changes, trims and splits templates apply to
// content leave it whole; ":k@#" keeps the markers of different replies apart.
std::string MarkerFor(const std::string& full, size_t k) {
  for (size_t zeros = 0;; ++zeros) {
    std::string m = "#@";
    m.append(zeros, '0');
    m.append("27182818:");
    m.append(std::to_string(k));
    m.append("@#");
    if (full.find(m) == std::string::npos) return m;
  }
}

// The n + 1 texts around n markers in `marked`, or nullopt unless each
// marker occurs exactly once, in order.
std::optional<std::vector<std::string_view>> Around(std::string_view marked, const std::vector<std::string>& markers) {
  std::vector<std::string_view> pieces;
  size_t pos = 0;
  for (const std::string& m : markers) {
    const size_t at = marked.find(m, pos);
    if (at == std::string_view::npos || marked.find(m, at + 1) != std::string_view::npos) return std::nullopt;
    pieces.push_back(marked.substr(pos, at - pos));
    pos = at + m.size();
  }
  pieces.push_back(marked.substr(pos));
  return pieces;
}

// full = P0 X1 P1 ... Pn for the pieces P: the [begin, end) of each X, or
// nullopt unless the ends match and each middle piece can lie in one place only.
std::optional<std::vector<std::pair<size_t, size_t>>> Align(std::string_view full,
                                                            const std::vector<std::string_view>& p) {
  const size_t n = p.size() - 1;
  if (p[0].size() + p[n].size() > full.size() || full.substr(0, p[0].size()) != p[0] ||
      full.substr(full.size() - p[n].size()) != p[n])
    return std::nullopt;
  const size_t limit = full.size() - p[n].size();  // every X and middle piece ends by here
  std::vector<std::pair<size_t, size_t>> out;
  size_t pos = p[0].size();
  for (size_t k = 1; k < n; ++k) {
    if (p[k].empty()) return std::nullopt;  // two replies side by side: no boundary between them
    const size_t at = full.find(p[k], pos);
    if (at == std::string_view::npos || at + p[k].size() > limit) return std::nullopt;
    const size_t again = full.find(p[k], at + 1);
    if (again != std::string_view::npos && again + p[k].size() <= limit) return std::nullopt;
    out.emplace_back(pos, at);
    pos = at + p[k].size();
  }
  if (pos > limit) return std::nullopt;
  out.emplace_back(pos, limit);
  return out;
}

}  // namespace

std::vector<std::optional<std::pair<size_t, size_t>>> LocateReplyTurns(const std::string& full,
                                                                       const nlohmann::ordered_json& messages,
                                                                       const std::vector<size_t>& replies,
                                                                       const RenderMessages& render) {
  auto attempt = [&](const std::vector<size_t>& which) -> std::optional<std::vector<std::pair<size_t, size_t>>> {
    std::vector<std::string> markers;
    nlohmann::ordered_json marked = messages;
    for (size_t k = 0; k < which.size(); ++k) {
      markers.push_back(MarkerFor(full, k));
      marked[which[k]]["content"] = markers.back();
    }
    auto text = render(marked);
    if (!text.ok()) return std::nullopt;
    auto pieces = Around(*text, markers);
    if (!pieces) return std::nullopt;
    return Align(full, *pieces);
  };
  std::vector<std::optional<std::pair<size_t, size_t>>> out(replies.size());
  if (replies.size() > 1)
    if (auto all = attempt(replies)) {
      for (size_t k = 0; k < replies.size(); ++k) out[k] = (*all)[k];
      return out;
    }
  for (size_t k = 0; k < replies.size(); ++k)
    if (auto one = attempt({replies[k]})) out[k] = (*one)[0];
  return out;
}

}  // namespace shard
