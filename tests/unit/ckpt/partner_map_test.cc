// The memory tier's partner map (shard/ckpt/partner_map.h): pure.
#include <gtest/gtest.h>

#include "shard/ckpt/partner_map.h"

namespace shard {
namespace {

TEST(PartnerMapTest, OneHostHasNoPartners) {
  EXPECT_EQ(PartnerRanks({"a", "a", "a", "a"}), (std::vector<int>{-1, -1, -1, -1}));
  EXPECT_TRUE(HostsToAsk({"a", "a"}, 1).empty());
}

TEST(PartnerMapTest, TwoHostsPairSameLocalIndexBothWays) {
  // World 4, 2 + 2: rank 0 <-> rank 2, rank 1 <-> rank 3.
  EXPECT_EQ(PartnerRanks({"A", "A", "B", "B"}), (std::vector<int>{2, 3, 0, 1}));
  EXPECT_EQ(HostsToAsk({"A", "A", "B", "B"}, 3), (std::vector<int>{1}));
}

TEST(PartnerMapTest, ThreeHostsFormARing) {
  const std::vector<int> p = PartnerRanks({"A", "A", "B", "B", "C", "C"});
  EXPECT_EQ(p, (std::vector<int>{2, 3, 4, 5, 0, 1}));
  for (int r = 0; r < 6; ++r) EXPECT_NE(r / 2, p[r] / 2) << "rank " << r << "'s partner shares its host";
  // Its partner's host first, then the host after it.
  EXPECT_EQ(HostsToAsk({"A", "A", "B", "B", "C", "C"}, 1), (std::vector<int>{3, 5}));
}

TEST(PartnerMapTest, InterleavedAndUnevenHosts) {
  // Hosts ordered by their lowest rank; B holds one rank, so both of A's
  // ranks send to it, and it sends to A's first.
  EXPECT_EQ(PartnerRanks({"A", "B", "A"}), (std::vector<int>{1, 0, 1}));
}

TEST(PartnerMapTest, HostFolderStaysOneComponent) {
  EXPECT_EQ(MemoryHostFolder("10.213.0.2"), "host-10.213.0.2");
  EXPECT_EQ(MemoryHostFolder("../../etc"), "host-.._.._etc");
  EXPECT_EQ(MemoryHostFolder("node 1/x"), "host-node_1_x");
}

}  // namespace
}  // namespace shard
