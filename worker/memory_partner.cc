#include "worker/memory_partner.h"

#include <cstdlib>
#include <filesystem>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/checkpoint_tier.h"
#include "shard/ckpt/memory_step_fetch.h"
#include "shard/ckpt/partner_map.h"
#include "shard/common/logging.h"

namespace shardd {
namespace fs = std::filesystem;
namespace {

std::string AddrKey(int r) { return "memtier/addr/" + std::to_string(r); }
std::string ResumeKey(int r) { return "memtier/resume/" + std::to_string(r); }

int64_t StepOfDir(const std::string& dir) { return shard::StepOfDirName(fs::path(dir).filename().string()).value_or(0); }

}  // namespace

shard::StatusOr<std::unique_ptr<MemoryPartner>> MemoryPartner::Start(std::shared_ptr<shard::KvStore> kv,
                                                                     const MemoryPartnerOptions& opts) {
  std::unique_ptr<MemoryPartner> p(new MemoryPartner());
  p->opts_ = opts;
  p->kv_ = std::move(kv);
  p->host_dir_ = (fs::path(opts.root) / shard::MemoryHostFolder(opts.hostname)).string();
  // The tier's root, the job's folder and this host's: the user's own, 0700,
  // never links (owned_dir.h). A refused or unwritable one costs the memory
  // steps (each skipped with an event, the copies refused), not the run.
  if (auto own = shard::OpenMemoryTierDir(p->host_dir_, 2, /*create=*/true); !own.ok())
    LOG_WARN("memory tier: {}; this host's memory steps are skipped", own.status().message());
  MemoryPartner* self = p.get();
  p->server_ = std::make_unique<shard::ShardCopyServer>(p->host_dir_, [self](const std::string& step_dir) {
    if (auto st = shard::KeepNewestMemorySteps(self->host_dir_, StepOfDir(step_dir), self->opts_.keep); !st.ok())
      LOG_WARN("{}", st.ToString());
  });
  shard::ShardCopyServerOptions so;  // a short header deadline and caps: a stranger's idle socket stalls nothing
  so.io_timeout = opts.timeout;
  RETURN_IF_ERROR(p->server_->Start(opts.hostname, so).WithContext("the memory tier's partner copy"));
  RETURN_IF_ERROR(p->kv_->Set(AddrKey(opts.rank), opts.hostname + "\n" + p->server_->endpoint()));
  std::vector<std::string> keys;
  for (int r = 0; r < opts.world; ++r) keys.push_back(AddrKey(r));
  RETURN_IF_ERROR(p->kv_->Wait(keys, opts.timeout).WithContext("waiting for the ranks' partner-copy addresses"));
  for (int r = 0; r < opts.world; ++r) {
    ASSIGN_OR_RETURN(std::string v, p->kv_->Get(AddrKey(r), opts.timeout));
    const size_t nl = v.find('\n');
    p->hosts_.push_back(v.substr(0, nl));
    p->addresses_.push_back(nl == std::string::npos ? "" : v.substr(nl + 1));
  }
  p->partner_ = opts.replicas ? shard::PartnerRanks(p->hosts_)[opts.rank] : -1;
  LOG_INFO("memory tier: host folder {}, partner {}", p->host_dir_,
           p->partner_ < 0 ? std::string("none (every rank on this host, or replicas 0)")
                           : "rank " + std::to_string(p->partner_) + " on host " + p->hosts_[p->partner_]);
  return p;
}

MemoryPartner::~MemoryPartner() {
  if (server_) server_->Stop();
}

shard::StatusOr<bool> MemoryPartner::TryStep(const shard::Manifest& m, std::string* step_dir, std::string* note,
                                             std::string* why) {
  std::vector<shard::MemoryStepSource> sources;
  for (int r : shard::HostsToAsk(hosts_, opts_.rank)) sources.push_back({r, hosts_[r], addresses_[r]});
  size_t local = 0;  // this rank's place among its host's ranks
  for (int r = 0; r < opts_.rank; ++r) local += hosts_[r] == hosts_[opts_.rank];
  ASSIGN_OR_RETURN(shard::MemoryStepAssembly a, shard::AssembleMemoryStep(host_dir_, m, sources, opts_.timeout, local));
  for (const std::string& f : a.fetched) LOG_INFO("memory tier: fetched {}", f);
  std::string mine;
  for (const std::string& f : a.fetched)
    mine += (mine.empty() ? "" : "; ") + ("rank " + std::to_string(opts_.rank) + " took " + f);
  // Every rank resumes the same step: one host without it sends all to the
  // next one. The keys name the step, so the tries of several steps keep apart.
  auto key = [&](int r) { return ResumeKey(r) + "/" + std::to_string(m.step); };
  RETURN_IF_ERROR(kv_->Set(key(opts_.rank), (a.complete ? "ok\n" + mine : "lost\n" + a.missing)));
  std::vector<std::string> keys;
  for (int r = 0; r < opts_.world; ++r) keys.push_back(key(r));
  RETURN_IF_ERROR(kv_->Wait(keys, opts_.timeout).WithContext("agreeing on memory step " + std::to_string(m.step)));
  bool all = true;
  for (int r = 0; r < opts_.world; ++r) {
    ASSIGN_OR_RETURN(std::string v, kv_->Get(key(r), opts_.timeout));
    const size_t nl = v.find('\n');
    const std::string verdict = v.substr(0, nl), text = nl == std::string::npos ? "" : v.substr(nl + 1);
    if (verdict != "ok") {
      if (all) *why = "rank " + std::to_string(r) + " on host " + hosts_[r] + " lacks " + text;
      all = false;
    } else if (!text.empty()) {
      *note += (note->empty() ? "" : "; ") + text;
    }
  }
  if (all) *step_dir = a.step_dir;
  return all;
}

shard::StatusOr<MemoryResume> MemoryPartner::Resume(const std::vector<std::string>& manifests, int64_t resume_step) {
  MemoryResume out;
  int64_t current = resume_step;
  for (const std::string& json : manifests) {
    ASSIGN_OR_RETURN(shard::Manifest m, shard::Manifest::FromJson(json, "the coordinator's memory step"));
    std::string step_dir, note, why;
    ASSIGN_OR_RETURN(bool taken, TryStep(m, &step_dir, &note, &why));
    if (taken) {
      out.step_dir = step_dir;
      out.note = note;
      current = m.step;
      break;
    }
    out.events.push_back(shard::SkippedStepLine(m.step, shard::CheckpointTier::kMemory, why));
    LOG_WARN("{}", out.events.back());
  }
  // Leftovers past the step this attempt starts from are never resumable now.
  if (auto st = shard::KeepNewestMemorySteps(host_dir_, current, opts_.keep, /*drop_newer=*/true); !st.ok())
    LOG_WARN("{}", st.ToString());
  return out;
}

int MemoryPartner::AfterMemorySave(const std::string& step_dir, const std::string& file, int64_t step) {
  int landed = -1;
  if (partner_ >= 0) {
    const std::string path = (fs::path(step_dir) / file).string();
    shard::Status st =
        shard::PutShardFile(addresses_[partner_], fs::path(step_dir).filename().string(), path, opts_.copy_timeout);
    if (st.ok()) {
      landed = partner_;
    } else {
      LOG_WARN("memory step {}: the partner copy to rank {} on host {} failed: {}", step, partner_, hosts_[partner_],
               st.ToString());
    }
  }
  if (auto st = shard::KeepNewestMemorySteps(host_dir_, step, opts_.keep); !st.ok()) LOG_WARN("{}", st.ToString());
  return landed;
}

void MemoryPartner::RemoveHostFolder() {
  if (server_) server_->Stop();
  std::error_code ec;
  shard::Status st = shard::RemoveMemoryTier(host_dir_);
  if (!st.ok()) st = shard::RemoveMemoryTier(host_dir_);  // a rank of this host was removing it at the same time
  if (!st.ok()) {
    LOG_WARN("{}", st.ToString());
    return;
  }
  LOG_INFO("removed this host's memory tier folder {}", host_dir_);
  fs::remove(opts_.root, ec);  // the job's root too, once no host folder is left in it (only if empty)
}

}  // namespace shardd
