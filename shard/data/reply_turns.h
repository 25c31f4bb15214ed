// Where a chat template puts assistant replies in its whole rendering, for
// the loss masks of templates that render earlier replies differently once
// later messages follow (hf_chat_template.h). The conversation is rendered
// again with a marker in place of each reply's content; the text around the
// markers must be the whole rendering's own, and each reply lies between.
//
//   whole:   P0 X1 P1 X2 P2      (X: the replies as the template rendered them)
//   marked:  P0 M1 P1 M2 P2
//
// All replies are located by one marked rendering when each middle piece
// (P1 above) can lie in just one place of the whole; otherwise each reply by a
// rendering of its own (one marker: only the ends to check, so exact).
//
// Thread-safety: pure function (the render callback must be).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "shard/common/status.h"

namespace shard {

using RenderMessages = std::function<StatusOr<std::string>(const nlohmann::ordered_json& messages)>;

// For each index in `replies` (ascending; messages with a "content" key), the
// [begin, end) bytes of `full` where the template put that message's content,
// or nullopt when that cannot be told (the marked rendering fails, or its
// other text is not the whole rendering's: the template renders other text
// depending on the reply, or drops it).
std::vector<std::optional<std::pair<size_t, size_t>>> LocateReplyTurns(const std::string& full,
                                                                       const nlohmann::ordered_json& messages,
                                                                       const std::vector<size_t>& replies,
                                                                       const RenderMessages& render);

}  // namespace shard
