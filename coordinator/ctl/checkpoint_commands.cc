// shardctl export / checkpoints: offline work on committed checkpoints.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "coordinator/ctl/commands.h"
#include "coordinator/ctl/json_schema.h"
#include "shard/ckpt/catalog.h"
#include "shard/ckpt/hf_weights.h"
#include "shard/ckpt/step_listing.h"
#include "shard/common/file_util.h"
#include "shard/data/tokenizer_export.h"
#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"

namespace shardctl {

using shard::Status;

Status RunExport(const ExportOptions& o) {
  ASSIGN_OR_RETURN(shard::DType dtype, shard::ParseDType(o.dtype));
  ASSIGN_OR_RETURN(shard::CheckpointReader reader, shard::CheckpointReader::Open(o.step_dir, /*verify=*/true));
  const shard::Manifest& m = reader.manifest();
  ASSIGN_OR_RETURN(shard::LlamaConfig config, shard::StepModelConfig(m, o.step_dir));
  shard::ParamLayout layout = shard::ParamLayout::ForLlama(config);
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) return shard::NotFound("cannot create " + o.out + ": " + ec.message());
  std::vector<shard::TensorDecl> decls;
  for (const auto& u : layout.units)
    for (const auto& t : u.tensors) decls.push_back({t.hf_name, t.shape});
  ASSIGN_OR_RETURN(shard::HfWeightsWriter writer, shard::HfWeightsWriter::Create(o.out, decls, dtype, o.max_file_bytes));
  // One unit in memory at a time: peak memory is the largest unit, not the model.
  std::vector<float> unit;
  for (int u = 0; u < layout.num_units(); ++u) {
    unit.assign(layout.units[u].numel, 0.0f);
    RETURN_IF_ERROR(reader.ReadUnitRange(u, 0, layout.units[u].numel, unit.data(), nullptr, nullptr));
    for (const auto& t : layout.units[u].tensors) RETURN_IF_ERROR(writer.Write(t.hf_name, unit.data() + t.offset));
  }
  RETURN_IF_ERROR(writer.Finish());
  ASSIGN_OR_RETURN(std::vector<std::string> tok_files, shard::ExportChatTokenizer(o.tokenizer, o.chat_template, o.out));
  // The source folder's config.json kept in the step's manifest (only the
  // dtype changed), and a generation config when the tokenizer wrote none.
  ASSIGN_OR_RETURN(std::vector<std::string> cfg_files,
                   shard::WriteExportedConfigs(o.out, config, m.source_config, dtype, tok_files));
  tok_files.insert(tok_files.end(), cfg_files.begin(), cfg_files.end());
  for (const auto& f : tok_files) std::printf("wrote %s/%s\n", o.out.c_str(), f.c_str());
  std::printf("exported step %lld of job %s (%.2fM parameters, %s) to %s\n", static_cast<long long>(m.step),
              m.job.c_str(), config.NumParams() / 1e6, o.dtype.c_str(), o.out.c_str());
  return shard::OkStatus();
}

Status RunCheckpoints(const CheckpointsOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(o.dir, ec)) return shard::NotFound("checkpoint directory " + o.dir + " does not exist");
  ASSIGN_OR_RETURN(std::vector<shard::StepInfo> steps, shard::ListSteps(o.dir));
  nlohmann::json out = nlohmann::json::array();
  if (!o.json) std::printf("%-10s %-10s %12s  %s\n", "STEP", "STATE", "BYTES", "DETAIL");
  for (const auto& s : steps) {
    uint64_t bytes = 0;
    for (const auto& e : fs::directory_iterator(s.dir, ec)) {
      std::error_code fe;  // a live job may rename or delete files while we list
      uintmax_t size = e.is_regular_file(fe) ? e.file_size(fe) : 0;
      if (!fe) bytes += size;
    }
    // Named by its manifest's step; valid only when export would take it.
    const shard::StepListing l = shard::DescribeStep(s, /*verify_checksums=*/true);
    const std::string state = l.valid ? "valid" : l.committed ? "invalid" : "partial";
    const std::string detail = l.valid ? "world " + std::to_string(l.world) + ", " + std::to_string(l.files) +
                                             " shards, " + l.strategy
                                       : l.problem;
    CheckpointRow row;
    if (l.valid) row.world = l.world, row.files = l.files;
    if (s.committed) {
      fs::file_time_type t = fs::last_write_time(fs::path(s.dir) / "COMMITTED", ec);
      if (!ec)
        row.committed_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::file_clock::to_sys(t).time_since_epoch()).count();
    }
    if (o.json) {
      row.step = l.step;
      row.state = state;
      row.path = s.dir;
      row.bytes = static_cast<int64_t>(bytes);
      row.problem = l.problem;
      out.push_back(CheckpointObject(row));
    } else {
      std::printf("%-10lld %-10s %12llu  %s\n", static_cast<long long>(l.step), state.c_str(),
                  static_cast<unsigned long long>(bytes), detail.c_str());
    }
  }
  if (o.json) std::printf("%s\n", nlohmann::json{{"checkpoints", out}}.dump().c_str());
  return shard::OkStatus();
}

}  // namespace shardctl
