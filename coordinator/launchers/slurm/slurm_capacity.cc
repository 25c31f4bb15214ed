#include "coordinator/launchers/slurm/slurm_capacity.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

namespace shardd {
namespace {

// The KEY=VALUE fields of one `scontrol -o` line (values with spaces, like
// OS=, keep only their first word: none of those is read here).
std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream in(line);
  std::string field;
  while (in >> field) {
    const size_t eq = field.find('=');
    if (eq != std::string::npos && eq > 0) out.emplace(field.substr(0, eq), field.substr(eq + 1));
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

// gres/gpu=4 or gres/gpu:a100=4 in a TRES list ("cpu=8,mem=1M,gres/gpu=4").
int GpusInTres(const std::string& tres) {
  int n = 0;
  for (const std::string& item : Split(tres, ',')) {
    if (item.rfind("gres/gpu", 0) != 0) continue;
    const size_t eq = item.find('=');
    // The plain gres/gpu total; typed entries repeat it.
    if (eq != std::string::npos && item.substr(0, eq) == "gres/gpu") n = std::atoi(item.c_str() + eq + 1);
  }
  return n;
}

int CpusInTres(const std::string& tres) {
  for (const std::string& item : Split(tres, ','))
    if (item.rfind("cpu=", 0) == 0) return std::atoi(item.c_str() + 4);
  return 0;
}

}  // namespace

shard::StatusOr<std::vector<SlurmNode>> ParseScontrolNodes(const std::string& text) {
  std::vector<SlurmNode> nodes;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line.rfind("No nodes", 0) == 0) continue;
    auto f = Fields(line);
    if (!f.count("NodeName") || !f.count("State"))
      return shard::InvalidArgument("scontrol show nodes: no NodeName or State in '" + line.substr(0, 200) + "'");
    SlurmNode n;
    n.name = f["NodeName"];
    n.state = f["State"];
    n.partitions = Split(f["Partitions"], ',');
    n.cpus = std::atoi((f.count("CPUEfctv") ? f["CPUEfctv"] : f["CPUTot"]).c_str());
    n.cpus_alloc = std::atoi(f["CPUAlloc"].c_str());
    n.gpus = GpusInTres(f["CfgTRES"]);
    n.gpus_alloc = GpusInTres(f["AllocTRES"]);
    nodes.push_back(std::move(n));
  }
  return nodes;
}

bool SlurmNodeUsable(const std::string& state) {
  if (state.empty() || state.find('*') != std::string::npos) return false;  // not responding
  const std::vector<std::string> parts = Split(state, '+');
  const std::string& base = parts.front();
  if (base != "IDLE" && base != "MIXED" && base != "ALLOCATED" && base != "ALLOC" && base != "MIX") return false;
  for (size_t i = 1; i < parts.size(); ++i)
    for (const char* bad : {"DRAIN", "DOWN", "FAIL", "MAINT", "NOT_RESPONDING", "RESERVED", "POWER", "REBOOT"})
      if (parts[i].find(bad) != std::string::npos) return false;
  return true;
}

std::vector<std::string> ExpandHostList(const std::string& list) {
  std::vector<std::string> out;
  // Split on commas outside brackets.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      if (!cur.empty()) items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) items.push_back(cur);
  for (const std::string& item : items) {
    const size_t open = item.find('['), close = item.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) {
      out.push_back(item);
      continue;
    }
    const std::string prefix = item.substr(0, open), suffix = item.substr(close + 1);
    for (const std::string& range : Split(item.substr(open + 1, close - open - 1), ',')) {
      const size_t dash = range.find('-');
      const std::string lo = range.substr(0, dash), hi = dash == std::string::npos ? lo : range.substr(dash + 1);
      const int a = std::atoi(lo.c_str()), b = std::atoi(hi.c_str());
      for (int i = a; i <= b && i - a < 100000; ++i) {
        std::string num = std::to_string(i);
        if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // n[01-03]
        out.push_back(prefix + num + suffix);
      }
    }
  }
  return out;
}

std::map<std::string, SlurmHeld> ParseHeldByJob(const std::string& text) {
  std::map<std::string, SlurmHeld> held;
  auto f = Fields(text);
  if (f["JobState"] != "RUNNING") return held;
  const std::vector<std::string> nodes = ExpandHostList(f["NodeList"]);
  if (nodes.empty()) return held;
  const int n = static_cast<int>(nodes.size());
  // Tasks are spread evenly (--ntasks-per-node): so are their CPUs and GPUs.
  const int cpus = std::atoi(f["NumCPUs"].c_str()) / n, gpus = GpusInTres(f["TRES"]) / n;
  for (const std::string& node : nodes) held[node] = {cpus > 0 ? cpus : CpusInTres(f["TRES"]) / n, gpus};
  return held;
}

std::string DefaultPartition(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto f = Fields(line);
    if (f["Default"] == "YES") return f["PartitionName"];
  }
  return "";
}

int PlaceableRanks(const std::vector<SlurmNode>& nodes, const std::map<std::string, SlurmHeld>& held,
                   const SlurmTaskShape& shape, int max) {
  const int cpt = std::max(1, shape.cpus_per_task);
  int64_t sum = 0;
  int best = 0;
  for (const SlurmNode& n : nodes) {
    if (!SlurmNodeUsable(n.state)) continue;
    if (!shape.partition.empty() &&
        std::find(n.partitions.begin(), n.partitions.end(), shape.partition) == n.partitions.end())
      continue;
    SlurmHeld own;
    if (auto it = held.find(n.name); it != held.end()) own = it->second;
    const int free_cpus = std::max(0, n.cpus - n.cpus_alloc + own.cpus);
    int tasks = free_cpus / cpt;
    if (shape.gpus_per_task > 0)
      tasks = std::min(tasks, std::max(0, n.gpus - n.gpus_alloc + own.gpus) / shape.gpus_per_task);
    best = std::max(best, tasks);
    if (shape.unit > 0) sum += tasks / shape.unit * shape.unit;
  }
  const int64_t placeable = shape.unit > 0 ? sum : best;
  return static_cast<int>(std::min<int64_t>(placeable, max));
}

}  // namespace shardd
