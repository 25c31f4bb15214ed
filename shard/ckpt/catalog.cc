#include "shard/ckpt/catalog.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "shard/ckpt/step_proof.h"
#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"

namespace shard {
namespace fs = std::filesystem;

std::optional<int64_t> StepOfDirName(const std::string& name) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0) return std::nullopt;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return std::nullopt;
  return std::stoll(name.substr(5));
}

bool IsOwnStepFolder(const fs::path& job_canonical, const fs::path& entry) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(entry, ec);
  if (ec) return false;
  if (fs::is_directory(st)) return true;
  if (!fs::is_symlink(st)) return false;
  const fs::path target = fs::canonical(entry, ec);
  if (ec || !fs::is_directory(target, ec)) return false;
  // Inside: job_canonical is a proper prefix of the target, component-wise.
  const fs::path rel = target.lexically_relative(job_canonical);
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
}

StatusOr<std::vector<StepInfo>> ListSteps(const std::string& job_dir) {
  std::vector<StepInfo> out;
  std::error_code ec;
  if (!fs::exists(job_dir, ec)) return out;
  const fs::path root = fs::canonical(job_dir, ec);
  if (ec) return NotFound("cannot resolve checkpoint directory " + job_dir + ": " + ec.message());
  for (const auto& e : fs::directory_iterator(job_dir, ec)) {
    const std::optional<int64_t> step = StepOfDirName(e.path().filename().string());
    if (!step || !IsOwnStepFolder(root, e.path())) continue;
    StepInfo s;
    s.step = *step;
    s.dir = e.path().string();
    std::error_code le;
    s.link = e.is_symlink(le);
    s.committed = fs::exists(e.path() / kCommittedFile, le);
    out.push_back(s);
  }
  if (ec) return NotFound("cannot list checkpoint directory " + job_dir + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::vector<ReadPiece> PlanUnitRead(const std::vector<ShardHeader>& headers, int unit, int64_t begin, int64_t end) {
  std::vector<ReadPiece> out;
  for (size_t f = 0; f < headers.size(); ++f) {
    const ShardUnit& u = headers[f].units[unit];
    int64_t lo = std::max(begin, u.begin), hi = std::min({end, u.begin + u.count, u.numel});
    if (lo < hi) out.push_back({static_cast<int>(f), lo, hi - lo, lo - begin});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.dst_offset < b.dst_offset; });
  return out;
}

StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& step_dir, bool verify) {
  CheckpointReader r;
  r.dir_ = step_dir;
  const std::string mpath = step_dir + "/" + kCommittedFile;
  auto text = ReadFileToString(mpath);
  if (!text.ok()) return NotFound(step_dir + " is not a committed checkpoint (no " + kCommittedFile + ")");
  ASSIGN_OR_RETURN(r.manifest_, Manifest::FromJson(*text, mpath));
  // A folder named after a step holds that step: a copy or link of another
  // step under a newer name would be resumed from (and listed) as a step it is not.
  fs::path named = fs::path(step_dir).lexically_normal();
  if (named.filename().empty()) named = named.parent_path();
  if (auto n = StepOfDirName(named.filename().string()); n && *n != r.manifest_.step)
    return DataLoss(step_dir + " is named step " + std::to_string(*n) + " but its manifest (" + kCommittedFile +
                    ") is of step " + std::to_string(r.manifest_.step) + " (a copied or linked step?)");
  for (const auto& f : r.manifest_.files) {
    const std::string path = step_dir + "/" + f.name;
    std::error_code ec;
    if (!fs::exists(path, ec)) return DataLoss("checkpoint file " + path + " listed in the manifest is missing");
    uint64_t size = fs::file_size(path, ec);
    if (ec || size != f.size)
      return DataLoss("checkpoint file " + path + " has " + std::to_string(size) + " bytes, the manifest says " +
                      std::to_string(f.size));
    if (verify) {
      ASSIGN_OR_RETURN(uint64_t h, Xxh64File(path));
      if (h != f.xxh64)
        return DataLoss("checkpoint file " + path + " fails its checksum (xxh64 " + HashToHex(h) + ", manifest " +
                        HashToHex(f.xxh64) + ")");
    }
    ASSIGN_OR_RETURN(ShardFileReader fr, ShardFileReader::Open(path));
    r.headers_.push_back(fr.header());
    r.files_.push_back(std::move(fr));
  }
  // A file listed twice passes every per-file check above (same bytes, same
  // checksum): only the proof over the whole step catches it.
  RETURN_IF_ERROR(ProveStepComplete(r.manifest_, r.headers_, step_dir));
  return r;
}

Status CheckpointReader::ReadUnitRange(int unit, int64_t begin, int64_t end, float* params, float* m, float* v) const {
  if (unit < 0 || unit >= static_cast<int>(manifest_.units.size()))
    return OutOfRange(dir_ + ": no unit " + std::to_string(unit));
  const int64_t n = end - begin;
  for (float* p : {params, m, v})
    if (p) std::fill(p, p + n, 0.0f);
  const int64_t real_end = std::min(end, manifest_.units[unit].second);
  int64_t covered = 0;
  for (const ReadPiece& piece : PlanUnitRead(headers_, unit, begin, end)) {
    float* dst[3] = {params, m, v};
    for (int which = 0; which < 3; ++which)
      if (dst[which])
        RETURN_IF_ERROR(files_[piece.file].Read(unit, which, piece.from, piece.count, dst[which] + piece.dst_offset));
    covered += piece.count;
  }
  if (covered != std::max<int64_t>(0, real_end - begin))
    return DataLoss(dir_ + ": unit " + manifest_.units[unit].first + " elements [" + std::to_string(begin) + ", " +
                    std::to_string(real_end) + ") are not fully covered by the shard files");
  return OkStatus();
}

DType CheckpointReader::state_dtype() const {
  for (const ShardHeader& h : headers_)
    for (const ShardUnit& u : h.units)
      if (u.dtype != DType::kF32) return u.dtype;
  return DType::kF32;
}

StatusOr<std::string> FindLatestGoodStep(const std::string& job_dir, bool verify, const StepFilter& accept) {
  ASSIGN_OR_RETURN(std::vector<StepInfo> steps, ListSteps(job_dir));
  int rejected = 0, other_run = 0;
  std::string newest_problem;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (!it->committed) continue;
    if (accept) {
      // The manifest alone decides whose step it is; a manifest that does not
      // parse is left to Open below, which names the damage.
      auto text = ReadFileToString(it->dir + "/" + kCommittedFile);
      auto m = text.ok() ? Manifest::FromJson(*text, it->dir) : StatusOr<Manifest>(text.status());
      if (m.ok() && !accept(*m)) {
        ++other_run;
        continue;
      }
    }
    auto r = CheckpointReader::Open(it->dir, verify);
    if (r.ok()) return it->dir;
    LOG_WARN("skipping checkpoint {}: {}", it->dir, r.status().message());
    if (rejected++ == 0) newest_problem = r.status().message();
  }
  const std::string others =
      other_run > 0 ? " (" + std::to_string(other_run) + " committed step(s) of another run were not considered)" : "";
  if (rejected == 0) return NotFound("no committed checkpoint in " + job_dir + others);
  return NotFound("no usable committed checkpoint in " + job_dir + ": all " + std::to_string(rejected) +
                  " committed steps are damaged; the newest: " + newest_problem + others);
}

}  // namespace shard
