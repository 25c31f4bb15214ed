// Fault injection for crash-consistency tests: SHARDD_FAULT="POINT@STEP"
// (e.g. "ckpt_mid_write@20") makes the process SIGKILL itself when it reaches
// POINT while saving/handling STEP. Unset (always in production), it costs one
// cached getenv.
#pragma once

#include <cstdint>

namespace shard {

void MaybeFault(const char* point, int64_t step);

// Pacing for tests that disrupt a job at chosen steps (the chaos soak):
// SHARDD_STEP_GATE=FILE makes the trainer wait before it starts STEP until
// FILE holds a number >= STEP, so a test moves the job forward by its
// progress, whatever the machine's speed. Polls every 20 ms and gives up
// after 10 minutes with a warning (nothing waits forever). Unset (always in
// production), it costs one cached getenv.
void MaybeWaitAtStepGate(int64_t step);

// A rank slowed while alive, for the straggler tests: SHARDD_SLOW_RANK=R:F
// (e.g. "1:2.5") makes rank R sleep (F - 1) x `compute_s` — the compute it
// just did — so it computes at 1/F of its speed. The trainer calls it once
// per step after the forward and backward passes. Malformed values are
// reported once on stderr and ignored. Unset (always in production), it
// costs one cached getenv.
void MaybeSlowRank(int rank, double compute_s);

// A rank stuck outside collectives while its heartbeats go on, for the
// flight recorder's tests: SHARDD_STALL_RANK=R@STEP (e.g. "2@5") makes rank
// R's training thread sleep before it starts STEP, so its peers wait in that
// step's first collective. The sleep ends after 10 minutes (nothing waits
// forever). Malformed values are reported once on stderr and ignored. Unset
// (always in production), it costs one cached getenv.
void MaybeStallRank(int rank, int64_t step);

}  // namespace shard
