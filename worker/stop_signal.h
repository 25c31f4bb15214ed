// The worker's graceful-stop signal. A launcher that is about to take the
// workers away (Slurm's --signal=B:USR1@N before a time limit or preemption,
// forwarded by the batch script; a pod's SIGTERM, forwarded by
// --nproc-per-node) sends SIGUSR1: the trainer finishes its step, every rank
// checkpoints that step, and the worker exits with kExitPreempted so the next
// attempt resumes from there. SIGTERM keeps its default meaning (die now), so
// the coordinator's own kills stay fast.
//
// Thread-safety: the flag is a lock-free atomic, set from a signal handler.
#pragma once

namespace shardd {

// Installs the SIGUSR1 handler (idempotent).
void InstallStopSignal();
// True once SIGUSR1 arrived.
bool StopRequested();
// Which signal asked (for messages): "SIGUSR1", or "" if none.
const char* StopSignalName();

}  // namespace shardd
