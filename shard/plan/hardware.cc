#include "shard/plan/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cctype>
#include <cmath>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "shard/common/file_util.h"
#include "shard/common/yaml_config.h"

namespace shard::plan {
namespace {

namespace fs = std::filesystem;

// Catalog values are all required: a figure nobody wrote down must not
// silently become a default.
template <typename T>
Status Required(YamlMap& m, const std::string& key, T* out) {
  if (!m.Has(key)) return InvalidArgument(m.Where(key) + ": required");
  return m.Get(key, out);
}

Status Positive(YamlMap& m, const std::string& key, double v) {
  if (!(v > 0)) return InvalidArgument(m.Where(key) + ": must be > 0");
  return OkStatus();
}

Status ParseGpu(YamlMap& m, GpuSpec* g) {
  RETURN_IF_ERROR(Required(m, "product", &g->product));
  RETURN_IF_ERROR(Required(m, "memory_gib", &g->memory_gib));
  RETURN_IF_ERROR(Positive(m, "memory_gib", g->memory_gib));
  RETURN_IF_ERROR(Required(m, "memory_bandwidth_gbs", &g->memory_bandwidth_gbs));
  RETURN_IF_ERROR(Positive(m, "memory_bandwidth_gbs", g->memory_bandwidth_gbs));
  {
    if (!m.Has("dense_tflops")) return InvalidArgument(m.Where("dense_tflops") + ": required");
    ASSIGN_OR_RETURN(YamlMap t, m.Sub("dense_tflops"));
    RETURN_IF_ERROR(Required(t, "fp32", &g->tflops_fp32));
    RETURN_IF_ERROR(Positive(t, "fp32", g->tflops_fp32));
    RETURN_IF_ERROR(Required(t, "tf32", &g->tflops_tf32));
    RETURN_IF_ERROR(Required(t, "fp16", &g->tflops_fp16));
    RETURN_IF_ERROR(Required(t, "bf16", &g->tflops_bf16));
    RETURN_IF_ERROR(Required(t, "int8", &g->tops_int8));
    RETURN_IF_ERROR(t.Finish());
  }
  RETURN_IF_ERROR(Required(m, "bf16", &g->bf16));
  if (g->bf16 != (g->tflops_bf16 > 0))
    return InvalidArgument(m.Where("bf16") + ": disagrees with dense_tflops.bf16");
  RETURN_IF_ERROR(Required(m, "compute_capability", &g->compute_capability));
  {
    if (!m.Has("nvlink")) return InvalidArgument(m.Where("nvlink") + ": required");
    ASSIGN_OR_RETURN(YamlMap n, m.Sub("nvlink"));
    RETURN_IF_ERROR(Required(n, "generation", &g->nvlink_generation));
    RETURN_IF_ERROR(Required(n, "bandwidth_gbs", &g->nvlink_gbs));
    RETURN_IF_ERROR(n.Finish());
  }
  {
    if (!m.Has("pcie")) return InvalidArgument(m.Where("pcie") + ": required");
    ASSIGN_OR_RETURN(YamlMap p, m.Sub("pcie"));
    RETURN_IF_ERROR(Required(p, "generation", &g->pcie_generation));
    RETURN_IF_ERROR(Required(p, "lanes", &g->pcie_lanes));
    if (g->pcie_generation < 1 || g->pcie_generation > 6 || g->pcie_lanes < 1)
      return InvalidArgument(p.Where("generation") + ": expected PCIe generation 1-6 and lanes >= 1");
    RETURN_IF_ERROR(p.Finish());
  }
  RETURN_IF_ERROR(Required(m, "power_w", &g->power_w));
  RETURN_IF_ERROR(Required(m, "train_efficiency", &g->train_efficiency));
  if (!(g->train_efficiency > 0 && g->train_efficiency <= 1))
    return InvalidArgument(m.Where("train_efficiency") + ": must be in (0, 1]");
  if (m.Has("measured")) {
    ASSIGN_OR_RETURN(YamlMap meas, m.Sub("measured"));
    auto rates = [&](const char* key, std::vector<std::pair<const char*, double*>> dtypes) -> Status {
      if (!meas.Has(key)) return OkStatus();
      ASSIGN_OR_RETURN(YamlMap r, meas.Sub(key));
      for (auto& [dt, out] : dtypes) {
        if (!r.Has(dt)) continue;
        RETURN_IF_ERROR(Required(r, dt, out));
        RETURN_IF_ERROR(Positive(r, dt, *out));
      }
      return r.Finish();
    };
    RETURN_IF_ERROR(rates("gemm_tflops", {{"fp32", &g->gemm_tflops_fp32}, {"tf32", &g->gemm_tflops_tf32},
                                          {"bf16", &g->gemm_tflops_bf16}, {"fp16", &g->gemm_tflops_fp16}}));
    RETURN_IF_ERROR(rates("attention_tflops", {{"fp32", &g->attention_tflops_fp32}, {"bf16", &g->attention_tflops_bf16},
                                               {"fp16", &g->attention_tflops_fp16}}));
    RETURN_IF_ERROR(meas.Finish());
  }
  return m.Finish();
}

StatusOr<IntraNode> ParseIntraNode(YamlMap& m) {
  std::string s;
  RETURN_IF_ERROR(Required(m, "intra_node", &s));
  RETURN_IF_ERROR(m.GetEnum("intra_node", {"nvswitch", "nvlink", "nvlink-pairs", "pcie", "pcie-no-p2p"}, &s));
  if (s == "nvswitch") return IntraNode::kNvSwitch;
  if (s == "nvlink") return IntraNode::kNvLink;
  if (s == "nvlink-pairs") return IntraNode::kNvLinkPairs;
  if (s == "pcie") return IntraNode::kPcie;
  return IntraNode::kPcieNoP2P;
}

Status ParseCluster(YamlMap& m, const std::map<std::string, GpuSpec>& gpus, ClusterSpec* c) {
  RETURN_IF_ERROR(Required(m, "description", &c->description));
  std::string gpu;
  RETURN_IF_ERROR(Required(m, "gpu", &gpu));
  auto it = gpus.find(gpu);
  if (it == gpus.end()) return InvalidArgument(m.Where("gpu") + ": '" + gpu + "' is not in gpus.yaml");
  c->gpu = it->second;
  RETURN_IF_ERROR(Required(m, "nodes", &c->nodes));
  RETURN_IF_ERROR(Required(m, "gpus_per_node", &c->gpus_per_node));
  if (c->nodes < 1 || c->gpus_per_node < 1) return InvalidArgument(m.Where("nodes") + ": nodes and gpus_per_node must be >= 1");
  ASSIGN_OR_RETURN(c->intra_node, ParseIntraNode(m));
  RETURN_IF_ERROR(Required(m, "inter_node_gbit", &c->inter_node_gbit));
  if (c->nodes > 1 && !(c->inter_node_gbit > 0))
    return InvalidArgument(m.Where("inter_node_gbit") + ": a multi-node cluster needs a network bandwidth");
  {
    if (!m.Has("host")) return InvalidArgument(m.Where("host") + ": required");
    ASSIGN_OR_RETURN(YamlMap h, m.Sub("host"));
    RETURN_IF_ERROR(Required(h, "ram_gib", &c->host.ram_gib));
    RETURN_IF_ERROR(Positive(h, "ram_gib", c->host.ram_gib));
    RETURN_IF_ERROR(Required(h, "cpu_cores", &c->host.cpu_cores));
    RETURN_IF_ERROR(Required(h, "mem_bandwidth_gbs", &c->host.mem_bandwidth_gbs));
    RETURN_IF_ERROR(Positive(h, "mem_bandwidth_gbs", c->host.mem_bandwidth_gbs));
    if (h.Has("disk_write_gbs")) {
      RETURN_IF_ERROR(Required(h, "disk_write_gbs", &c->host.disk_write_gbs));
      RETURN_IF_ERROR(Positive(h, "disk_write_gbs", c->host.disk_write_gbs));
    }
    RETURN_IF_ERROR(h.Finish());
  }
  return m.Finish();
}

// Iterates a mapping of name -> entry, handing each a strict YamlMap.
template <typename Fn>
Status ForEachEntry(YamlMap& parent, const std::string& file, const std::string& key, Fn fn) {
  if (!parent.Has(key)) return InvalidArgument(parent.Where(key) + ": required");
  ASSIGN_OR_RETURN(YamlMap section, parent.Sub(key));
  for (const auto& kv : section.node()) {
    std::string name = kv.first.as<std::string>();
    if (!kv.second.IsMap()) return InvalidArgument(section.Where(name) + ": expected a mapping of keys");
    YamlMap entry(kv.second, file, key + "." + name);
    RETURN_IF_ERROR(fn(name, entry));
  }
  return OkStatus();
}

}  // namespace

double GpuSpec::PeakTflops(DType compute) const {
  switch (compute) {
    case DType::kBF16: return tflops_bf16;
    case DType::kF16: return tflops_fp16;
    case DType::kF32: return tflops_tf32 > 0 ? tflops_tf32 : tflops_fp32;  // TF32 on for fp32 GEMMs (DESIGN.md)
  }
  return tflops_fp32;
}

double GpuSpec::PcieGBs() const {
  // Per lane per direction after encoding: gen1 0.25, gen2 0.5, gen3 ~0.985, gen4 ~1.97, gen5 ~3.94 GB/s.
  static const double kPerLane[] = {0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.877};
  return kPerLane[std::clamp(pcie_generation, 1, 6)] * pcie_lanes;
}

const char* IntraNodeName(IntraNode k) {
  switch (k) {
    case IntraNode::kNvSwitch: return "nvswitch";
    case IntraNode::kNvLink: return "nvlink";
    case IntraNode::kNvLinkPairs: return "nvlink-pairs";
    case IntraNode::kPcie: return "pcie";
    case IntraNode::kPcieNoP2P: return "pcie-no-p2p";
  }
  return "?";
}

double ClusterSpec::CollectiveGBs(int ranks) const {
  if (ranks <= 1) return 0;
  if (cpu_only) return cpu.comm_gbs;
  // NCCL ring bus bandwidth reaches ~80% of the link rate per direction
  // (nccl-tests on A100 NVSwitch: ~230 of 300 GB/s).
  constexpr double kLinkEfficiency = 0.8;
  double intra = 0;
  switch (intra_node) {
    case IntraNode::kNvSwitch:
    case IntraNode::kNvLink:
      intra = gpu.nvlink_gbs > 0 ? gpu.nvlink_gbs / 2 : gpu.PcieGBs();
      break;
    case IntraNode::kNvLinkPairs:  // a ring over more than a pair crosses PCIe
      intra = ranks <= 2 && gpu.nvlink_gbs > 0 ? gpu.nvlink_gbs / 2 : gpu.PcieGBs();
      break;
    case IntraNode::kPcie:
      intra = gpu.PcieGBs();
      break;
    case IntraNode::kPcieNoP2P:  // staged through host memory: down, then up
      intra = gpu.PcieGBs() / 2;
      break;
  }
  intra *= kLinkEfficiency;
  if (ranks <= gpus_per_node) return intra;
  // Across nodes NCCL runs one ring per NIC, each carrying its share of the
  // buffer through one node boundary, so a ring collective's bus bandwidth is
  // bounded by the node's whole network bandwidth (nccl-tests on DGX A100s with
  // 8x 200 Gb/s reach ~190 GB/s), not by one NIC.
  const double net = inter_node_gbit / 8.0 * kLinkEfficiency;
  return std::min(intra, net);
}

StatusOr<ClusterSpec> HardwareCatalog::Cluster(const std::string& name) const {
  auto it = clusters.find(name);
  if (it != clusters.end()) return it->second;
  std::string known;
  for (const auto& kv : clusters) known += (known.empty() ? "" : ", ") + kv.first;
  return NotFound("cluster '" + name + "' is not in " + (dir.empty() ? "the catalog" : dir + "/clusters.yaml") +
                  " (known: " + known + ")");
}

std::vector<std::string> HardwareCatalog::ClusterNames() const {
  std::vector<std::string> names;
  for (const auto& kv : clusters) names.push_back(kv.first);
  return names;
}

StatusOr<HardwareCatalog> ParseHardwareCatalog(const std::string& gpus_yaml, const std::string& gpus_name,
                                               const std::string& clusters_yaml, const std::string& clusters_name) {
  HardwareCatalog cat;
  {
    ASSIGN_OR_RETURN(YamlMap root, YamlMap::LoadString(gpus_yaml, gpus_name));
    RETURN_IF_ERROR(ForEachEntry(root, gpus_name, "gpus", [&](const std::string& name, YamlMap& m) -> Status {
      GpuSpec g;
      g.name = name;
      RETURN_IF_ERROR(ParseGpu(m, &g));
      cat.gpus[name] = g;
      return OkStatus();
    }));
    RETURN_IF_ERROR(root.Finish());
  }
  {
    ASSIGN_OR_RETURN(YamlMap root, YamlMap::LoadString(clusters_yaml, clusters_name));
    RETURN_IF_ERROR(ForEachEntry(root, clusters_name, "clusters", [&](const std::string& name, YamlMap& m) -> Status {
      ClusterSpec c;
      c.name = name;
      RETURN_IF_ERROR(ParseCluster(m, cat.gpus, &c));
      cat.clusters[name] = c;
      return OkStatus();
    }));
    if (!root.Has("cpu")) return InvalidArgument(root.Where("cpu") + ": required");
    ASSIGN_OR_RETURN(YamlMap cpu, root.Sub("cpu"));
    RETURN_IF_ERROR(Required(cpu, "fp32_gflops_per_core", &cat.cpu.fp32_gflops_per_core));
    RETURN_IF_ERROR(Positive(cpu, "fp32_gflops_per_core", cat.cpu.fp32_gflops_per_core));
    RETURN_IF_ERROR(Required(cpu, "train_efficiency", &cat.cpu.train_efficiency));
    RETURN_IF_ERROR(Positive(cpu, "train_efficiency", cat.cpu.train_efficiency));
    RETURN_IF_ERROR(Required(cpu, "mem_bandwidth_gbs", &cat.cpu.mem_bandwidth_gbs));
    RETURN_IF_ERROR(Positive(cpu, "mem_bandwidth_gbs", cat.cpu.mem_bandwidth_gbs));
    RETURN_IF_ERROR(Required(cpu, "comm_gbs", &cat.cpu.comm_gbs));
    RETURN_IF_ERROR(Positive(cpu, "comm_gbs", cat.cpu.comm_gbs));
    RETURN_IF_ERROR(cpu.Finish());
    RETURN_IF_ERROR(root.Finish());
  }
  for (auto& kv : cat.clusters) kv.second.cpu = cat.cpu;
  return cat;
}

StatusOr<HardwareCatalog> LoadHardwareCatalog(const std::string& dir) {
  const std::string gpus = dir + "/gpus.yaml", clusters = dir + "/clusters.yaml";
  auto g = ReadFileToString(gpus);
  if (!g.ok()) return g.status().WithContext("hardware catalog (set SHARDD_HARDWARE_DIR to the folder holding gpus.yaml)");
  auto c = ReadFileToString(clusters);
  if (!c.ok()) return c.status().WithContext("hardware catalog");
  ASSIGN_OR_RETURN(HardwareCatalog cat, ParseHardwareCatalog(*g, gpus, *c, clusters));
  cat.dir = dir;
  return cat;
}

StatusOr<std::string> FindHardwareDir() {
  auto has_catalog = [](const fs::path& d) {
    std::error_code ec;
    return fs::is_regular_file(d / "gpus.yaml", ec) && fs::is_regular_file(d / "clusters.yaml", ec);
  };
  if (const char* env = std::getenv("SHARDD_HARDWARE_DIR")) {
    if (has_catalog(env)) return std::string(env);
    return NotFound(std::string("SHARDD_HARDWARE_DIR=") + env + " holds no gpus.yaml + clusters.yaml");
  }
  std::vector<fs::path> starts;
  std::error_code ec;
  starts.push_back(fs::current_path(ec));
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  for (fs::path p : starts) {
    for (int up = 0; up < 8 && !p.empty(); ++up, p = p.parent_path()) {
      if (has_catalog(p / "configs/hardware")) return (p / "configs/hardware").string();
      if (p == p.parent_path()) break;
    }
  }
#ifdef SHARDD_DEFAULT_HARDWARE_DIR
  if (has_catalog(SHARDD_DEFAULT_HARDWARE_DIR)) return std::string(SHARDD_DEFAULT_HARDWARE_DIR);
#endif
  return NotFound(
      "no hardware catalog found (configs/hardware/gpus.yaml above the current directory or shardctl); "
      "set SHARDD_HARDWARE_DIR to the folder holding gpus.yaml and clusters.yaml");
}

StatusOr<HardwareCatalog> LoadDefaultHardwareCatalog() {
  ASSIGN_OR_RETURN(std::string dir, FindHardwareDir());
  return LoadHardwareCatalog(dir);
}

namespace {

std::string Normalized(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

StatusOr<GpuSpec> MatchProbedGpu(const HardwareCatalog& catalog, const ProbedGpu& gpu) {
  const std::string name = Normalized(gpu.name);
  // Words of the device name, and adjacent pairs joined ("RTX 4090" -> RTX4090).
  std::vector<std::string> words, names;
  std::string w;
  for (char ch : gpu.name + " ") {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      w += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    } else if (!w.empty()) {
      words.push_back(w);
      w.clear();
    }
  }
  for (size_t i = 0; i < words.size(); ++i) {
    names.push_back(words[i]);
    if (i + 1 < words.size()) names.push_back(words[i] + words[i + 1]);
  }
  const GpuSpec* best = nullptr;
  double best_score = 0;
  for (const auto& [key, spec] : catalog.gpus) {
    const std::string family = Normalized(key.substr(0, key.find('-')));
    if (family.empty() || std::find(names.begin(), names.end(), family) == names.end()) continue;
    double score = 1000.0 - std::abs(spec.memory_gib - gpu.memory_gib);
    const std::string k = Normalized(key);
    if ((name.find("SXM") != std::string::npos) == (k.find("SXM") != std::string::npos)) score += 0.5;
    if ((name.find("PCIE") != std::string::npos) == (k.find("PCIE") != std::string::npos)) score += 0.5;
    if (!best || score > best_score) {
      best = &spec;
      best_score = score;
    }
  }
  if (!best)
    return NotFound("the probed GPU '" + gpu.name + "' is not in the hardware catalog (" + catalog.dir +
                    "/gpus.yaml); add it, or plan with --cluster NAME");
  return *best;
}

std::string ProbedGpusToJson(const std::vector<ProbedGpu>& gpus) {
  nlohmann::json list = nlohmann::json::array();
  for (const ProbedGpu& g : gpus) {
    list.push_back({{"name", g.name}, {"memory_gib", g.memory_gib}, {"nvlink_to_peers", g.nvlink_to_peers}});
    if (!g.pci_bus_id.empty()) list.back()["pci_bus_id"] = g.pci_bus_id;
  }
  return nlohmann::json{{"gpus", list}}.dump();
}

StatusOr<std::vector<ProbedGpu>> ProbedGpusFromJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("gpus") || !j["gpus"].is_array())
    return InvalidArgument("probe output is not {\"gpus\": [...]}: '" + text.substr(0, 120) + "'");
  std::vector<ProbedGpu> gpus;
  for (const auto& g : j["gpus"]) {
    if (!g.is_object() || !g.contains("name") || !g["name"].is_string() || !g.contains("memory_gib") ||
        !g["memory_gib"].is_number() || !(g["memory_gib"].get<double>() > 0))
      return InvalidArgument("probe output: GPU " + std::to_string(gpus.size()) +
                             " needs a name and a positive memory_gib: " + g.dump());
    ProbedGpu p;
    p.name = g["name"].get<std::string>();
    p.memory_gib = g["memory_gib"].get<double>();
    p.nvlink_to_peers = g.value("nvlink_to_peers", false);
    if (g.contains("pci_bus_id") && g["pci_bus_id"].is_string()) p.pci_bus_id = g["pci_bus_id"].get<std::string>();
    gpus.push_back(std::move(p));
  }
  return gpus;
}

StatusOr<ClusterSpec> ClusterFromProbe(const HardwareCatalog& catalog, const std::vector<ProbedGpu>& gpus) {
  if (gpus.empty()) return InvalidArgument("no probed GPUs to plan for");
  ASSIGN_OR_RETURN(GpuSpec spec, MatchProbedGpu(catalog, gpus[0]));
  for (const ProbedGpu& g : gpus) {
    ASSIGN_OR_RETURN(GpuSpec other, MatchProbedGpu(catalog, g));
    if (other.name != spec.name)
      return InvalidArgument("this host mixes GPU models (" + gpus[0].name + ", " + g.name +
                             "); plan with --cluster NAME");
  }
  ClusterSpec c = LocalCpuCluster(catalog.cpu, static_cast<int>(gpus.size()));
  c.cpu_only = false;
  c.gpu = spec;
  c.gpus_per_node = static_cast<int>(gpus.size());
  const bool nvlink = gpus.size() > 1 && std::all_of(gpus.begin(), gpus.end(), [](const ProbedGpu& g) {
                        return g.nvlink_to_peers;
                      });
  c.intra_node = nvlink ? IntraNode::kNvLink : IntraNode::kPcie;
  c.name = "probed-" + std::to_string(gpus.size()) + "x" + spec.name;
  c.description = "the GPUs on this host (probed): " + std::to_string(gpus.size()) + " x " + gpus[0].name + ", " +
                  std::to_string(static_cast<int>(c.host.ram_gib + 0.5)) + " GiB host RAM";
  return c;
}

ClusterSpec LocalCpuCluster(const CpuRates& rates, int ranks) {
  ClusterSpec c;
  c.name = "local-cpu";
  c.cpu_only = true;
  c.nodes = 1;
  c.gpus_per_node = std::max(1, ranks);
  c.cpu = rates;
  c.host.mem_bandwidth_gbs = rates.mem_bandwidth_gbs;
  c.host.cpu_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemTotal: %lld kB", &kib) == 1) {
      c.host.ram_gib = static_cast<double>(kib) / (1024.0 * 1024.0);
      break;
    }
  }
  if (c.host.ram_gib <= 0) c.host.ram_gib = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / (1 << 30);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  c.description = std::string("this host (") + host + "): " + std::to_string(c.host.cpu_cores) + " cores, " +
                  std::to_string(static_cast<int>(c.host.ram_gib + 0.5)) + " GiB";
  return c;
}

}  // namespace shard::plan
