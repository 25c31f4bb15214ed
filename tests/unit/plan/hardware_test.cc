// The hardware catalog: the shipped data files load strictly and hold the GPUs
// and clusters the planner promises; malformed entries fail naming the key.
#include <gtest/gtest.h>

#include "shard/plan/hardware.h"

namespace shard::plan {
namespace {

HardwareCatalog Shipped() {
  auto cat = LoadDefaultHardwareCatalog();
  EXPECT_TRUE(cat.ok()) << cat.status().ToString();
  return cat.ok() ? *cat : HardwareCatalog{};
}

TEST(HardwareCatalogTest, ShippedCatalogHasEveryGpuAndCluster) {
  HardwareCatalog cat = Shipped();
  for (const char* g : {"V100-16GB", "V100-32GB", "A2", "A10G", "RTX3090", "RTX4090", "RTX6000-Ada",
                        "A100-40GB-PCIe", "A100-80GB-PCIe", "A100-80GB-SXM", "H100-SXM", "H200"})
    EXPECT_TRUE(cat.gpus.count(g)) << g;
  for (const char* c : {"8xA100-80GB-SXM", "8xA100-40GB-PCIe", "4xRTX4090", "1xV100-32GB", "1xA100-40GB-PCIe"})
    EXPECT_TRUE(cat.Cluster(c).ok()) << c;
}

TEST(HardwareCatalogTest, DataSheetFigures) {
  HardwareCatalog cat = Shipped();
  const GpuSpec& a = cat.gpus.at("A100-80GB-SXM");
  EXPECT_EQ(a.memory_gib, 80);
  EXPECT_EQ(a.memory_bandwidth_gbs, 2039);
  EXPECT_EQ(a.PeakTflops(DType::kBF16), 312);
  EXPECT_EQ(a.PeakTflops(DType::kF32), 156);  // TF32 for fp32 GEMMs
  EXPECT_EQ(a.nvlink_gbs, 600);
  const GpuSpec& v = cat.gpus.at("V100-32GB");
  EXPECT_FALSE(v.bf16);
  EXPECT_EQ(v.PeakTflops(DType::kF16), 125);
  EXPECT_EQ(v.PeakTflops(DType::kF32), 15.7);  // no TF32 on Volta
  EXPECT_EQ(cat.gpus.at("H100-SXM").PeakTflops(DType::kBF16), 989.5);
  EXPECT_NEAR(cat.gpus.at("RTX4090").PcieGBs(), 31.5, 0.1);  // gen4 x16
}

TEST(HardwareCatalogTest, CollectiveBandwidth) {
  HardwareCatalog cat = Shipped();
  ClusterSpec dgx = *cat.Cluster("8xA100-80GB-SXM");
  EXPECT_DOUBLE_EQ(dgx.CollectiveGBs(8), 300 * 0.8);  // NVLink per direction x ring efficiency
  ClusterSpec multi = *cat.Cluster("64xA100-80GB-SXM");
  EXPECT_DOUBLE_EQ(multi.CollectiveGBs(64), 1600.0 / 8 * 0.8);  // one ring per NIC: the node's network
  EXPECT_DOUBLE_EQ(multi.CollectiveGBs(8), 240);                     // one node
  ClusterSpec g = *cat.Cluster("4xRTX4090");
  EXPECT_NEAR(g.CollectiveGBs(4), 31.5 / 2 * 0.8, 0.1);  // no peer-to-peer: through host memory
}

const char* kGpu = R"(gpus:
  G:
    product: test
    memory_gib: 16
    memory_bandwidth_gbs: 100
    dense_tflops: {fp32: 1, tf32: 0, fp16: 10, bf16: 0, int8: 0}
    bf16: false
    compute_capability: 7.0
    nvlink: {generation: 0, bandwidth_gbs: 0}
    pcie: {generation: 3, lanes: 16}
    power_w: 100
    train_efficiency: 0.5
)";
const char* kCluster = R"(clusters:
  1xG:
    description: test
    gpu: G
    nodes: 1
    gpus_per_node: 1
    intra_node: pcie
    inter_node_gbit: 0
    host: {ram_gib: 64, cpu_cores: 8, mem_bandwidth_gbs: 50}
cpu: {fp32_gflops_per_core: 100, train_efficiency: 0.3, mem_bandwidth_gbs: 20, comm_gbs: 1}
)";

TEST(HardwareCatalogTest, ParsesAMinimalCatalog) {
  auto cat = ParseHardwareCatalog(kGpu, "gpus.yaml", kCluster, "clusters.yaml");
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  auto c = cat->Cluster("1xG");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->gpu.tflops_fp16, 10);
  EXPECT_EQ(c->host.ram_gib, 64);
  EXPECT_EQ(c->cpu.comm_gbs, 1);
  auto missing = cat->Cluster("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("1xG"), std::string::npos) << "the error lists the known clusters";
}

void ExpectError(const std::string& gpus, const std::string& clusters, const std::string& needle) {
  auto cat = ParseHardwareCatalog(gpus, "gpus.yaml", clusters, "clusters.yaml");
  ASSERT_FALSE(cat.ok()) << "expected an error mentioning " << needle;
  EXPECT_NE(cat.status().message().find(needle), std::string::npos) << cat.status().ToString();
}

TEST(HardwareCatalogTest, StrictErrorsNameTheKey) {
  std::string g = kGpu, c = kCluster;
  auto replace = [](std::string s, const std::string& a, const std::string& b) {
    s.replace(s.find(a), a.size(), b);
    return s;
  };
  ExpectError(replace(g, "    power_w: 100\n", "    power_w: 100\n    watts: 3\n"), c, "gpus.G.watts: unknown key");
  ExpectError(replace(g, "    memory_gib: 16\n", ""), c, "gpus.G.memory_gib: required");
  ExpectError(replace(g, "memory_gib: 16", "memory_gib: lots"), c, "gpus.G.memory_gib: expected a number");
  ExpectError(replace(g, "bf16: false", "bf16: true"), c, "disagrees with dense_tflops.bf16");
  ExpectError(replace(g, "int8: 0}", "int8: 0, fp8: 1}"), c, "gpus.G.dense_tflops.fp8: unknown key");
  ExpectError(g, replace(c, "gpu: G", "gpu: H"), "'H' is not in gpus.yaml");
  ExpectError(g, replace(c, "intra_node: pcie", "intra_node: pigeons"), "clusters.1xG.intra_node");
  ExpectError(g, replace(c, "nodes: 1", "nodes: 2"), "a multi-node cluster needs a network bandwidth");
  ExpectError(g, replace(c, "cpu: {fp32_gflops_per_core: 100, ", "cpu: {"), "cpu.fp32_gflops_per_core: required");
}

TEST(HardwareCatalogTest, LocalCpuClusterReadsThisHost) {
  ClusterSpec c = LocalCpuCluster(CpuRates{}, 2);
  EXPECT_TRUE(c.cpu_only);
  EXPECT_EQ(c.gpus_per_node, 2);
  EXPECT_GT(c.host.ram_gib, 0.1);
  EXPECT_GE(c.host.cpu_cores, 1);
}

}  // namespace
}  // namespace shard::plan

namespace shard::plan {
namespace {

// Device names as cudaGetDeviceProperties reports them.
TEST(ProbedGpuTest, MatchesDeviceNamesToTheCatalog) {
  const HardwareCatalog cat = Shipped();
  struct Case {
    const char* name;
    double gib;
    const char* want;
  };
  for (const Case& c : {Case{"NVIDIA H200", 139.8, "H200"}, Case{"NVIDIA H100 80GB HBM3", 79.1, "H100-SXM"},
                        Case{"NVIDIA A100-SXM4-80GB", 79.2, "A100-80GB-SXM"},
                        Case{"NVIDIA A100-PCIE-40GB", 39.4, "A100-40GB-PCIe"},
                        Case{"NVIDIA A100 80GB PCIe", 79.2, "A100-80GB-PCIe"},
                        Case{"NVIDIA GeForce RTX 4090", 23.6, "RTX4090"}, Case{"NVIDIA A10G", 22.1, "A10G"},
                        Case{"NVIDIA A2", 14.6, "A2"}, Case{"Tesla V100-SXM2-32GB", 31.7, "V100-32GB"},
                        Case{"Tesla V100-SXM2-16GB", 15.8, "V100-16GB"}}) {
    SCOPED_TRACE(c.name);
    auto g = MatchProbedGpu(cat, {c.name, c.gib, false});
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->name, c.want);
  }
  auto unknown = MatchProbedGpu(cat, {"NVIDIA B200", 180, false});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("NVIDIA B200"), std::string::npos);
}

TEST(ProbedGpuTest, ClusterFromProbeCountsGpusAndLinks) {
  const HardwareCatalog cat = Shipped();
  std::vector<ProbedGpu> eight(8, ProbedGpu{"NVIDIA A100-SXM4-80GB", 79.2, true});
  auto c = ClusterFromProbe(cat, eight);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->cpu_only);
  EXPECT_EQ(c->total_gpus(), 8);
  EXPECT_EQ(c->gpu.name, "A100-80GB-SXM");
  EXPECT_EQ(c->intra_node, IntraNode::kNvLink);
  EXPECT_GT(c->host.ram_gib, 0);
  auto pcie = ClusterFromProbe(cat, std::vector<ProbedGpu>(2, ProbedGpu{"NVIDIA GeForce RTX 4090", 23.6, false}));
  ASSERT_TRUE(pcie.ok());
  EXPECT_EQ(pcie->intra_node, IntraNode::kPcie);
  auto mixed = ClusterFromProbe(cat, {{"NVIDIA A100-SXM4-80GB", 79.2, false}, {"NVIDIA H200", 139.8, false}});
  EXPECT_FALSE(mixed.ok());
  EXPECT_FALSE(ClusterFromProbe(cat, {}).ok());
}

// What `shardd-worker --probe --json` prints is what the coordinator reads
// back: the daemon plans for its workers' GPUs without loading CUDA.
TEST(ProbedGpuTest, TheWorkersProbeRoundTripsThroughJson) {
  // The PCI bus id tells devices apart across probes (the local launcher's elastic restarts).
  const std::vector<ProbedGpu> gpus = {{"NVIDIA H200", 139.8, true, "0000:1b:00.0"},
                                       {"NVIDIA H200", 139.8, true, "0000:43:00.0"}};
  auto back = ProbedGpusFromJson(ProbedGpusToJson(gpus));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].name, "NVIDIA H200");
  EXPECT_DOUBLE_EQ((*back)[1].memory_gib, 139.8);
  EXPECT_TRUE((*back)[1].nvlink_to_peers);
  EXPECT_EQ((*back)[1].pci_bus_id, "0000:43:00.0");
  // An older worker's probe says none: still read.
  auto old = ProbedGpusFromJson("{\"gpus\": [{\"name\": \"NVIDIA H200\", \"memory_gib\": 139.8}]}");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ((*old)[0].pci_bus_id, "");
  auto none = ProbedGpusFromJson("{\"gpus\": []}");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  for (const char* bad : {"", "not json", "[]", "{\"gpus\": 3}", "{\"gpus\": [{\"name\": \"x\"}]}",
                          "{\"gpus\": [{\"name\": \"x\", \"memory_gib\": -1}]}"}) {
    auto r = ProbedGpusFromJson(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("probe output"), std::string::npos) << r.status().ToString();
  }
}

}  // namespace
}  // namespace shard::plan
