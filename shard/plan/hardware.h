// The hardware the planner plans for: GPUs (memory, bandwidth, dense peak rates
// per dtype, interconnect) and clusters (GPUs per node, nodes, how they talk,
// the host around them). The figures live in a data file, not in code:
// configs/hardware/gpus.yaml and clusters.yaml, each value cited from a vendor
// data sheet. This header only maps them (strictly: an unknown key or a
// missing one is an error naming the file and the dotted key).
//
// Thread-safety: plain values; loading touches no shared state.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/tensor/dtype.h"

namespace shard::plan {

struct GpuSpec {
  std::string name;     // catalog key, e.g. "A100-80GB-SXM"
  std::string product;  // the vendor's name for it
  double memory_gib = 0;
  double memory_bandwidth_gbs = 0;  // GB/s (1e9 bytes)
  // Dense peak rates (TFLOP/s; int8 in TOPS); 0 = not supported.
  double tflops_fp32 = 0, tflops_tf32 = 0, tflops_fp16 = 0, tflops_bf16 = 0, tops_int8 = 0;
  bool bf16 = false;
  double compute_capability = 0;
  int nvlink_generation = 0;
  double nvlink_gbs = 0;  // total bidirectional per GPU; 0 = no NVLink
  int pcie_generation = 4;
  int pcie_lanes = 16;
  double power_w = 0;
  // Fraction of dense peak the training GEMMs sustain, recompute included
  // (HFU). Not a data-sheet figure: each entry cites where it comes from.
  double train_efficiency = 0.5;
  // shardd's own kernels measured on this GPU (gpus.yaml measured:, from
  // docs/gpu.md's gpu_bench), TFLOP/s at the model's shapes; 0 = not
  // measured. Where they exist the step time prices GEMMs and attention at
  // these rates instead of train_efficiency (step_time.h).
  double gemm_tflops_fp32 = 0, gemm_tflops_tf32 = 0, gemm_tflops_bf16 = 0, gemm_tflops_fp16 = 0;
  double attention_tflops_fp32 = 0, attention_tflops_bf16 = 0, attention_tflops_fp16 = 0;

  // The dense peak for GEMMs in `compute` (fp32 GEMMs use TF32 when the GPU has it).
  double PeakTflops(DType compute) const;
  // Host link bandwidth per direction, GB/s (PCIe gen N x lanes).
  double PcieGBs() const;
};

// How GPUs inside a node exchange data.
enum class IntraNode { kNvSwitch, kNvLink, kNvLinkPairs, kPcie, kPcieNoP2P };
const char* IntraNodeName(IntraNode k);

struct HostSpec {
  double ram_gib = 0;
  int cpu_cores = 0;
  double mem_bandwidth_gbs = 0;  // peak DRAM bandwidth per node
  double disk_write_gbs = 0;     // checkpoint write bandwidth per node, GB/s (0 = unknown)
};

// Rates for the CPU engine (device: cpu), from clusters.yaml's cpu: section.
struct CpuRates {
  double fp32_gflops_per_core = 100;
  double train_efficiency = 0.3;
  double mem_bandwidth_gbs = 20;
  double comm_gbs = 1.7;  // collective bandwidth between CPU ranks (loopback TCP)
};

struct ClusterSpec {
  std::string name;
  std::string description;
  bool cpu_only = false;  // the local host running the CPU engine
  GpuSpec gpu;            // unused when cpu_only
  int nodes = 1;
  int gpus_per_node = 1;  // ranks per node (CPU: ranks the plan places on this host)
  IntraNode intra_node = IntraNode::kPcie;
  double inter_node_gbit = 0;  // per node
  HostSpec host;
  CpuRates cpu;  // cpu_only

  int total_gpus() const { return nodes * gpus_per_node; }
  // Bus bandwidth (GB/s per direction per rank) a ring collective over
  // `ranks` ranks of this cluster sustains: intra-node links when the ranks
  // fit in a node, else the smaller of that and the node's network bandwidth.
  double CollectiveGBs(int ranks) const;
};

struct HardwareCatalog {
  std::map<std::string, GpuSpec> gpus;
  std::map<std::string, ClusterSpec> clusters;
  CpuRates cpu;
  std::string dir;  // where it was loaded from

  // Named cluster; the error lists the known names.
  StatusOr<ClusterSpec> Cluster(const std::string& name) const;
  std::vector<std::string> ClusterNames() const;
};

// Reads <dir>/gpus.yaml and <dir>/clusters.yaml.
StatusOr<HardwareCatalog> LoadHardwareCatalog(const std::string& dir);
// The same from text (tests); names are used in error messages.
StatusOr<HardwareCatalog> ParseHardwareCatalog(const std::string& gpus_yaml, const std::string& gpus_name,
                                               const std::string& clusters_yaml, const std::string& clusters_name);

// Where the catalog is: $SHARDD_HARDWARE_DIR, else configs/hardware found by
// walking up from the current directory and from the executable's directory,
// else the source tree this library was built from.
StatusOr<std::string> FindHardwareDir();
// FindHardwareDir + LoadHardwareCatalog.
StatusOr<HardwareCatalog> LoadDefaultHardwareCatalog();

// The machine this process runs on as a CPU "cluster" of `ranks` ranks: RAM
// from /proc/meminfo, cores from the scheduler, rates from the catalog.
ClusterSpec LocalCpuCluster(const CpuRates& rates, int ranks);

// A GPU as the hardware probe saw it (shard/backend/hardware_probe.h; plain
// values so the planner does not depend on the backend).
struct ProbedGpu {
  std::string name;          // "NVIDIA A100-SXM4-80GB"
  double memory_gib = 0;
  bool nvlink_to_peers = false;
  std::string pci_bus_id;   // "0000:1b:00.0": which device it is across probes ("" = not said)
};

// The catalog GPU a probed device is: the entries whose family (the key up to
// its first '-', e.g. "A100", "RTX4090") is a word of the device name (or two
// adjacent words joined: "RTX 4090"), then the
// closest memory size, then the form factor (SXM/PCIe) the name mentions.
// NOT_FOUND names the device when nothing matches.
StatusOr<GpuSpec> MatchProbedGpu(const HardwareCatalog& catalog, const ProbedGpu& gpu);
// The probe as `shardd-worker --probe --json` prints it and the coordinator
// reads it back ({"gpus": [{"name", "memory_gib", "nvlink_to_peers"}]}), so
// the daemon plans for the GPUs its workers see without linking CUDA.
std::string ProbedGpusToJson(const std::vector<ProbedGpu>& gpus);
// INVALID_ARGUMENT naming what is wrong for text that is not that shape.
StatusOr<std::vector<ProbedGpu>> ProbedGpusFromJson(const std::string& text);
// One node of the probed GPUs (all must be the same model) with this host's RAM.
StatusOr<ClusterSpec> ClusterFromProbe(const HardwareCatalog& catalog, const std::vector<ProbedGpu>& gpus);

}  // namespace shard::plan
