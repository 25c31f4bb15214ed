// The job file loader: YAML text → JobConfig (strict mapping + validation).
#include <string>

#include "shard/spec/job_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto job = shard::ParseJobConfig(text, "job.yaml");
  shard::fuzz::CheckRefusal(job.status());
  return 0;
}
