#include "shard/spec/memory_tier_config.h"

#include <unistd.h>

#include <string>

#include "shard/common/yaml_config.h"

namespace shard {

namespace {
constexpr int kMaxMemoryKeepLast = 100;
constexpr int kMaxReplicas = 1;
}  // namespace

std::string DefaultMemoryTierRoot() { return "/dev/shm/shardd-" + std::to_string(::geteuid()); }

Status MemoryTierConfig::Validate() const {
  if (every_steps < 0)
    return InvalidArgument("checkpoint.memory.every_steps must be >= 0 (0 = no memory tier), got " +
                           std::to_string(every_steps));
  if (keep_last < 1 || keep_last > kMaxMemoryKeepLast)
    return InvalidArgument("checkpoint.memory.keep_last must be 1..100 steps, got " + std::to_string(keep_last));
  if (replicas < 0 || replicas > kMaxReplicas)
    return InvalidArgument("checkpoint.memory.replicas must be 0 or 1 (partner copies on another host), got " +
                           std::to_string(replicas));
  if (!dir.empty() && dir.front() != '/')
    return InvalidArgument("checkpoint.memory.dir must be an absolute path (a tmpfs folder such as /dev/shm/x), got " +
                           dir);
  return OkStatus();
}

Status MapMemoryTierSection(YamlMap& checkpoint, MemoryTierConfig* c) {
  ASSIGN_OR_RETURN(YamlMap m, checkpoint.Sub("memory"));
  RETURN_IF_ERROR(m.Get("every_steps", &c->every_steps));
  RETURN_IF_ERROR(m.Get("dir", &c->dir));
  RETURN_IF_ERROR(m.Get("keep_last", &c->keep_last));
  RETURN_IF_ERROR(m.Get("replicas", &c->replicas));
  return m.Finish();
}

}  // namespace shard
