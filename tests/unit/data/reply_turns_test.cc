// Locating replies in a whole rendering by marked renderings (reply_turns.h),
// with a template written out in C++: one rendering for every reply when the
// text between them can lie in one place only, else one per reply.
#include <gtest/gtest.h>

#include <cctype>

#include "shard/data/reply_turns.h"

namespace shard {
namespace {

using ojson = nlohmann::ordered_json;

ojson Conversation(std::initializer_list<std::pair<const char*, const char*>> turns) {
  ojson ms = ojson::array();
  for (auto [role, content] : turns) ms.push_back({{"role", role}, {"content", content}});
  return ms;
}

// "U<content>;" for users, "A<content>;" for replies; with `upper`, every
// reply but the last is upper-cased (a template that rewrites earlier replies).
struct FakeTemplate {
  bool upper = false;
  int renders = 0;
  StatusOr<std::string> operator()(const ojson& ms) {
    ++renders;
    std::string out;
    for (size_t i = 0; i < ms.size(); ++i) {
      std::string c = ms[i]["content"];
      const bool reply = ms[i]["role"] == "assistant";
      if (reply && upper && i + 1 < ms.size())
        for (char& ch : c) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      out += (reply ? "A" : "U") + c + ";";
    }
    return out;
  }
};

std::string At(const std::string& full, const std::optional<std::pair<size_t, size_t>>& turn) {
  return turn ? full.substr(turn->first, turn->second - turn->first) : "<none>";
}

TEST(ReplyTurns, OneMarkedRenderingLocatesEveryReply) {
  FakeTemplate t{.upper = true};
  const ojson ms = Conversation({{"user", "q1"}, {"assistant", "x"}, {"user", "q2"}, {"assistant", "y"}, {"user", "q3"}});
  const std::string full = *t(ms);
  ASSERT_EQ(full, "Uq1;AX;Uq2;AY;Uq3;");
  t.renders = 0;
  auto turns = LocateReplyTurns(full, ms, {1, 3}, std::ref(t));
  EXPECT_EQ(t.renders, 1);
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(At(full, turns[0]), "X");
  EXPECT_EQ(At(full, turns[1]), "Y");
}

TEST(ReplyTurns, TextThatCouldLieInTwoPlacesIsLocatedOneReplyAtATime) {
  FakeTemplate t;
  // The first reply holds the text between the replies (";U;A"): in one
  // marked rendering the boundary is ambiguous, so each reply gets its own.
  const ojson ms = Conversation({{"user", ""}, {"assistant", ";U;A"}, {"user", ""}, {"assistant", "b"}});
  const std::string full = *t(ms);
  t.renders = 0;
  auto turns = LocateReplyTurns(full, ms, {1, 3}, std::ref(t));
  EXPECT_EQ(t.renders, 3);
  EXPECT_EQ(At(full, turns[0]), ";U;A");
  EXPECT_EQ(At(full, turns[1]), "b");
}

TEST(ReplyTurns, ATemplateThatRendersOtherTextFromTheReplyIsNotLocated) {
  // Renders each reply's length into the next user turn: the text around the
  // marker is not the whole rendering's own.
  auto render = [](const ojson& ms) -> StatusOr<std::string> {
    std::string out, last;
    for (const auto& m : ms) {
      const std::string c = m["content"];
      out += m["role"] == "assistant" ? "A" + c + ";" : "U" + c + std::to_string(last.size()) + ";";
      if (m["role"] == "assistant") last = c;
    }
    return out;
  };
  const ojson ms = Conversation({{"user", "q"}, {"assistant", "abc"}, {"user", "q"}});
  auto turns = LocateReplyTurns(*render(ms), ms, {1}, render);
  EXPECT_FALSE(turns[0].has_value());
  auto failing = [](const ojson&) -> StatusOr<std::string> { return InvalidArgument("boom"); };
  EXPECT_FALSE(LocateReplyTurns(*render(ms), ms, {1}, failing)[0].has_value());
}

}  // namespace
}  // namespace shard
