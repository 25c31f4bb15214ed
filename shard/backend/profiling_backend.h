// ProfilingBackend: a Backend decorator that times every operation of the
// backend it wraps and prints a per-operation table (time, calls, share, and
// GFLOP/s for GEMMs and attention) when asked or when destroyed.
//
// Enabled with SHARDD_PROFILE_OPS=1 (CreateBackend wraps the backend it
// returns) or by wrapping a backend directly. Device backends are synchronised
// before and after each operation, so a profile shows each op's own time at the
// price of losing asynchrony; on the CPU every op is synchronous anyway and the
// overhead is two clock reads per call.
//
// Thread-safety: like any Backend, one thread at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "shard/backend/backend.h"

namespace shard {

std::unique_ptr<Backend> WrapWithProfiler(std::unique_ptr<Backend> inner, FILE* report_to = stderr);

// The table so far, as text (one line per op kind, slowest first). `backend`
// must come from WrapWithProfiler; anything else gives an empty string.
std::string ProfileReport(Backend* backend);
// Device memory (Allocate/Free) through `backend` since it was wrapped: the
// peak and the bytes in use now (-1 for a backend not from WrapWithProfiler).
// Bytes as asked for, without the allocator's rounding.
int64_t ProfilePeakBytes(Backend* backend);
int64_t ProfileBytesInUse(Backend* backend);
// Forget the times so far (e.g. after warm-up steps); the memory counts stay.
void ResetProfile(Backend* backend);

}  // namespace shard
