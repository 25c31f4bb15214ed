#include "shard/plan/plan_report.h"
#include "shard/plan/moe_model.h"

#include <cstdarg>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace shard::plan {
namespace {

std::string F(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

std::string Count(double n) {
  if (n >= 1e9) return F("%.2fB", n / 1e9);
  if (n >= 1e6) return F("%.2fM", n / 1e6);
  if (n >= 1e3) return F("%.1fK", n / 1e3);
  return F("%.0f", n);
}

std::string Seconds(double s) {
  if (s >= 1) return F("%.2f s", s);
  if (s >= 1e-3) return F("%.1f ms", s * 1e3);
  return F("%.0f us", s * 1e6);
}

std::string Rate(double tokens_per_s) {
  if (tokens_per_s >= 1e4) return F("%.0f", tokens_per_s);
  if (tokens_per_s >= 10) return F("%.1f", tokens_per_s);
  return F("%.3f", tokens_per_s);
}

void Table(std::string* out, const std::vector<MemoryItem>& items) {
  for (const auto& i : items) *out += F("  %-52s %12s   %s\n", i.what.c_str(), FormatBytes(i.bytes).c_str(), i.how.c_str());
}

std::string Hardware(const ClusterSpec& c) {
  if (c.cpu_only)
    return c.description + F(", %.0f GFLOP/s fp32 per core assumed", c.cpu.fp32_gflops_per_core);
  const GpuSpec& g = c.gpu;
  std::string link = g.nvlink_gbs > 0 && c.intra_node != IntraNode::kPcie && c.intra_node != IntraNode::kPcieNoP2P
                         ? F("NVLink %.0f GB/s", g.nvlink_gbs)
                         : F("PCIe gen%d x%d", g.pcie_generation, g.pcie_lanes);
  std::string s = c.name + ": " + c.description + "\n            " + std::to_string(c.total_gpus()) + "x " + g.name +
                  F(" (%.0f GiB, %.0f GB/s, %.0f TFLOP/s bf16, %.0f fp16, %.1f fp32; ", g.memory_gib,
                    g.memory_bandwidth_gbs, g.tflops_bf16, g.tflops_fp16, g.tflops_fp32) +
                  link + ")";
  if (c.nodes > 1) s += F(" in %d nodes on %.0f Gb/s", c.nodes, c.inter_node_gbit);
  s += F(", %.0f GiB host RAM per node", c.host.ram_gib);
  return s;
}

std::string Command(const Plan& plan, const Recommendation& r) {
  std::string cmd = "shardctl plan " + (plan.job_file.empty() ? std::string("JOB.yaml") : plan.job_file);
  for (const auto& s : r.sets) cmd += " --set " + s;
  if (!r.cluster.empty()) cmd += " --cluster " + r.cluster;
  else if (!plan.cluster.cpu_only) cmd += " --cluster " + plan.cluster.name;
  return cmd;
}

}  // namespace

std::string FormatPlanText(const Plan& p) {
  const Workload& w = p.workload;
  const LlamaConfig& c = w.model;
  std::string out;
  out += "shardd plan" + (p.job_file.empty() ? std::string() : ": " + p.job_file) + "\n";
  out += F("  model     %s: %s parameters (%s, %d layers, d %lld, %d heads / %d KV, ffn %lld, vocab %lld%s)\n",
           w.model_name.c_str(), Count(static_cast<double>(c.NumParams())).c_str(), c.family_name(), c.num_layers,
           static_cast<long long>(c.hidden_size), c.num_heads, c.num_kv_heads,
           static_cast<long long>(c.intermediate_size), static_cast<long long>(c.vocab_size),
           c.tie_word_embeddings ? ", tied" : "");
  if (c.is_moe()) out += "  experts   " + MoeSummary(c) + "\n";
  out += "  training  " + w.Describe() + "\n";
  out += "  hardware  " + Hardware(p.cluster) + "\n\n";

  const double dev_cap = p.device_capacity_bytes(), host_cap = p.host_capacity_bytes();
  out += p.cluster.cpu_only ? "Per rank (host memory)\n" : "Per GPU\n";
  Table(&out, p.memory.device);
  out += F("  %-52s %12s   of %s (%.0f%%)\n", "peak", FormatBytes(p.memory.device_total).c_str(),
           FormatBytes(static_cast<int64_t>(dev_cap)).c_str(), 100.0 * p.memory.device_total / dev_cap);
  out += "Per host\n";
  Table(&out, p.memory.host);
  out += F("  %-52s %12s   of %s usable (%.0f%%)%s\n", "peak", FormatBytes(p.memory.host_total).c_str(),
           FormatBytes(static_cast<int64_t>(host_cap)).c_str(), 100.0 * p.memory.host_total / host_cap,
           p.memory.host_pinned > 0 ? (", " + FormatBytes(p.memory.host_pinned) + " pinned").c_str() : "");

  const StepTime& t = p.time;
  out += F("\nStep time (%lld sequences x %lld tokens per step, %lld micro-batch%s per rank)\n",
           static_cast<long long>(w.global_batch), static_cast<long long>(w.seq_len),
           static_cast<long long>(t.micro_batches), t.micro_batches > 1 ? "es" : "");
  if (t.from_kernels) {
    out += F("  compute       %s per micro-batch from measured kernels: GEMMs %s at %.4g TFLOP/s, attention %s at "
             "%.4g TFLOP/s%s, elementwise %s (%.3g GFLOP per token%s)\n",
             Seconds(t.compute_s).c_str(), Seconds(t.gemm_s).c_str(), t.gemm_tflops, Seconds(t.attention_s).c_str(),
             t.attention_tflops > 0 ? t.attention_tflops : t.peak_tflops * p.cluster.gpu.train_efficiency,
             t.attention_tflops > 0 ? "" : " (not measured: peak x efficiency)", Seconds(t.elementwise_s).c_str(),
             t.hardware_flops_per_token / 1e9, w.activation_checkpointing ? " with recompute" : "");
  } else {
    out += F("  compute       %s per micro-batch (%.4g TFLOP/s %s peak x %.2f efficiency; %.3g GFLOP per token%s)\n",
             Seconds(t.compute_s).c_str(), t.peak_tflops, w.cpu_engine ? "fp32" : DTypeName(w.compute), t.efficiency,
             t.hardware_flops_per_token / 1e9, w.activation_checkpointing ? " with recompute" : "");
  }
  if (t.comm_s > 0)
    out += F("  collectives   %s per micro-batch at %.0f GB/s, %s not hidden by compute\n", Seconds(t.comm_s).c_str(),
             t.collective_gbs, Seconds(t.exposed_comm_s).c_str());
  if (t.cp_exchange_s > 0)
    out += F("  context       %d ranks per sequence (%lld tokens each); K/V exchange %s per micro-batch (in the "
             "collectives, not hidden)\n",
             w.context_parallel, static_cast<long long>(w.local_seq_len()), Seconds(t.cp_exchange_s).c_str());
  if (t.step_comm_s > 0) out += F("  all-reduce    %s per step (gradients across replicas)\n", Seconds(t.step_comm_s).c_str());
  out += F("  optimizer     %s per step%s\n", Seconds(t.optimizer_s).c_str(),
           w.offload.optimizer || w.offload.params ? (" on the host, + " + Seconds(t.offload_s) + " PCIe").c_str() : "");
  out += F("  step          %s: %s tokens/s (%s per %s), MFU %.1f%% (HFU %.1f%%), bound by %s\n",
           Seconds(t.step_s).c_str(), Rate(t.tokens_per_s).c_str(), Rate(t.tokens_per_s_per_gpu).c_str(),
           p.cluster.cpu_only ? "rank" : "GPU", 100 * t.mfu, 100 * t.hfu, t.bottleneck.c_str());

  const CheckpointCost& ck = p.checkpoint;
  if (ck.keep_last > 0) {
    out += F("\nCheckpoints\n  %s per checkpoint (%s %s, m, v) x keep_last %d = %s on disk\n",
             FormatBytes(ck.bytes_per_checkpoint).c_str(), DTypeName(w.optimizer_state),
             w.method == Method::kFull ? "parameters" : "adapters", ck.keep_last,
             FormatBytes(ck.disk_bytes).c_str());
    out += ck.save_s > 0 ? F("  save: %s per node at %.3g GB/s (clusters.yaml host.disk_write_gbs)%s\n",
                             Seconds(ck.save_s).c_str(), ck.disk_write_gbs,
                             w.async_checkpoint ? ", behind training" : ", the step waits for it")
                         : std::string("  save time: unknown (no host.disk_write_gbs for this cluster)\n");
  }

  if (w.reference_pairs >= 0) {
    const ReferenceCost& rc = p.reference;
    out += F("\nReference pass (dpo/ipo: once per data and model, before step 1)\n  %s per forward of %lld pair%s",
             Seconds(rc.forward_s).c_str(), static_cast<long long>(w.micro_batch / 2), w.micro_batch == 2 ? "" : "s");
    out += rc.pairs > 0 ? F(" x %lld per rank = %s for %lld pairs (data.jsonl's rows)\n", static_cast<long long>(rc.forwards),
                            Seconds(rc.pass_s).c_str(), static_cast<long long>(rc.pairs))
                        : std::string(" (pairs unknown)\n");
    out += F("  stored: %s (8 B per reply) beside the prepared data, held by every rank\n",
             rc.pairs > 0 ? FormatBytes(rc.file_bytes).c_str() : "16 B per pair");
  }

  out += std::string("\nVerdict: ") + VerdictName(p.verdict) + "\n";
  for (const auto& r : p.reasons) out += "  - " + r + "\n";
  for (const auto& n : p.notes) out += "  note: " + n + "\n";

  if (!p.recommendations.empty()) {
    out += p.ok() ? "\nFaster settings that still fit\n" : "\nWhat would fit\n";
    int i = 0;
    for (const auto& r : p.recommendations) {
      out += F("  %d. %s\n", ++i, r.change.c_str());
      out += F("     %s per GPU, %s per host, %s tokens/s, MFU %.1f%%  [%s]\n", FormatBytes(r.device_bytes).c_str(),
               FormatBytes(r.host_bytes).c_str(), Rate(r.tokens_per_s).c_str(), 100 * r.mfu, VerdictName(r.verdict));
      if (r.supported) out += "     " + Command(p, r) + "\n";
      if (!r.note.empty()) out += "     (" + r.note + ")\n";
    }
  } else if (!p.ok()) {
    out += "\nNo change the planner knows of makes this fit on the catalog's hardware.\n";
  }
  return out;
}

namespace {

using nlohmann::json;

json MemoryItemsJson(const std::vector<MemoryItem>& v) {
  json a = json::array();
  for (const auto& i : v) a.push_back({{"what", i.what}, {"bytes", i.bytes}, {"how", i.how}});
  return a;
}

// What is trained and how: the model, method, precision, sharding, batch;
// under peft: the adapters; for a preference job its pairs.
json WorkloadJson(const Workload& w) {
  json j = {{"model", w.model_name},
            {"parameters", w.model.NumParams()},
            {"active_parameters", MoeActiveParams(w.model)},
            {"family", w.model.family_name()},
            {"method", MethodName(w.method)},
            {"compute_dtype", w.cpu_engine ? "fp32" : DTypeName(w.compute)},
            {"fp32_master", w.fp32_master},
            {"strategy", StrategyName(w.strategy)},
            {"world_size", w.world},
            {"activation_checkpointing", w.activation_checkpointing},
            {"offload_optimizer", w.offload.optimizer},
            {"micro_batch", w.micro_batch},
            {"seq_len", w.seq_len},
            {"context_parallel", w.context_parallel},
            {"global_batch", w.global_batch},
            {"summary", w.Describe()}};
  if (w.method != Method::kFull) {
    json targets = json::array();
    for (LoraTarget t : w.lora_targets) targets.push_back(LoraTargetName(t));
    // The dtype the frozen base is held in; QLoRA holds its block linears in NF4.
    j["base_dtype"] = DTypeName(w.base_dtype());
    j["peft"] = {{"r", w.lora_rank},
                 {"target_modules", targets},
                 {"trainable_parameters", LoraParams(w.model, w.lora_rank, w.lora_targets)},
                 {"base_linear_format", w.method == Method::kQlora ? "nf4" : DTypeName(w.base_dtype())},
                 {"nf4_bits_per_weight", w.method == Method::kQlora ? w.qlora_bits : 0.0}};
  }
  if (w.rows_per_item == 2) j["preference_pairs_per_micro_batch"] = w.micro_batch / 2;
  return j;
}

json TimeJson(const StepTime& t) {
  return {{"compute_s_per_micro_batch", t.compute_s},
          {"comm_s_per_micro_batch", t.comm_s},
          {"exposed_comm_s_per_micro_batch", t.exposed_comm_s},
          {"cp_exchange_s_per_micro_batch", t.cp_exchange_s},
          {"step_comm_s", t.step_comm_s},
          {"optimizer_s", t.optimizer_s},
          {"offload_s", t.offload_s},
          {"micro_batches_per_step", t.micro_batches},
          {"step_s", t.step_s},
          {"tokens_per_s", t.tokens_per_s},
          {"tokens_per_s_per_gpu", t.tokens_per_s_per_gpu},
          {"mfu", t.mfu},
          {"hfu", t.hfu},
          {"model_flops_per_token", t.model_flops_per_token},
          {"peak_tflops", t.peak_tflops},
          {"efficiency", t.efficiency},
          {"collective_gbs", t.collective_gbs},
          {"bottleneck", t.bottleneck},
          {"from_kernels", t.from_kernels},
          {"gemm_s_per_micro_batch", t.gemm_s},
          {"attention_s_per_micro_batch", t.attention_s},
          {"elementwise_s_per_micro_batch", t.elementwise_s}};
}

json RecommendationsJson(const std::vector<Recommendation>& v) {
  json recs = json::array();
  for (const auto& r : v) {
    recs.push_back({{"change", r.change},
                    {"set", r.sets},
                    {"cluster", r.cluster},
                    {"supported", r.supported},
                    {"verdict", VerdictName(r.verdict)},
                    {"device_bytes", r.device_bytes},
                    {"host_bytes", r.host_bytes},
                    {"tokens_per_s", r.tokens_per_s},
                    {"mfu", r.mfu},
                    {"note", r.note}});
  }
  return recs;
}

}  // namespace

std::string PlanToJson(const Plan& p) {
  const Workload& w = p.workload;
  json j;
  j["job"] = p.job_file;
  j["verdict"] = VerdictName(p.verdict);
  j["ok"] = p.ok();
  j["reasons"] = p.reasons;
  j["notes"] = p.notes;
  j["cluster"] = {{"name", p.cluster.name},
                  {"description", p.cluster.description},
                  {"cpu_only", p.cluster.cpu_only},
                  {"gpu", p.cluster.cpu_only ? "" : p.cluster.gpu.name},
                  {"nodes", p.cluster.nodes},
                  {"gpus_per_node", p.cluster.gpus_per_node},
                  {"host_ram_gib", p.cluster.host.ram_gib}};
  j["workload"] = WorkloadJson(w);
  j["memory"] = {{"device", MemoryItemsJson(p.memory.device)},
                 {"device_total_bytes", p.memory.device_total},
                 {"device_capacity_bytes", p.device_capacity_bytes()},
                 {"host", MemoryItemsJson(p.memory.host)},
                 {"host_total_bytes", p.memory.host_total},
                 {"host_pinned_bytes", p.memory.host_pinned},
                 {"host_capacity_bytes", p.host_capacity_bytes()},
                 {"ranks_per_node", p.memory.ranks_per_node}};
  j["time"] = TimeJson(p.time);
  j["checkpoint"] = {{"bytes_per_checkpoint", p.checkpoint.bytes_per_checkpoint},
                     {"keep_last", p.checkpoint.keep_last},
                     {"disk_bytes", p.checkpoint.disk_bytes},
                     {"bytes_per_node", p.checkpoint.bytes_per_node},
                     {"disk_write_gbs", p.checkpoint.disk_write_gbs},
                     {"save_s", p.checkpoint.save_s}};
  if (w.rows_per_item == 2 && w.reference_pairs >= 0)
    j["reference"] = {{"pairs", p.reference.pairs},
                      {"forwards_per_rank", p.reference.forwards},
                      {"forward_s", p.reference.forward_s},
                      {"pass_s", p.reference.pass_s},
                      {"file_bytes", p.reference.file_bytes}};
  j["recommendations"] = RecommendationsJson(p.recommendations);
  return j.dump(2);
}

std::string PlanSummary(const Plan& p) {
  std::string s = VerdictName(p.verdict);
  if (!p.reasons.empty()) {
    s += ": ";
    for (size_t i = 0; i < p.reasons.size(); ++i) s += (i ? "; " : "") + p.reasons[i];
  }
  if (!p.ok() && !p.recommendations.empty()) {
    const auto& r = p.recommendations.front();
    s += " (would fit: " + r.change + (r.supported ? "" : "; not built yet") + ")";
  }
  return s;
}

}  // namespace shard::plan
