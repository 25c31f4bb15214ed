// Fault injection for crash-consistency tests: SHARDD_FAULT="POINT@STEP"
// (e.g. "ckpt_mid_write@20") makes the process SIGKILL itself when it reaches
// POINT while saving/handling STEP. Unset (always in production), it costs one
// cached getenv.
#pragma once

#include <cstdint>

namespace shard {

void MaybeFault(const char* point, int64_t step);

}  // namespace shard
