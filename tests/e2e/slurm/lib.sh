# Helpers for the Slurm end-to-end tests: the control-plane helpers plus a
# real single-node Slurm cluster (cluster.sh) in the test's temp dir. Every
# test skips (77) with the reason when Slurm cannot start on this machine.
source "$(dirname "${BASH_SOURCE[0]}")/../control_plane/lib.sh"
SLURM_DIR=$T/slurm
_cp_cleanup() {
  if [ -n "${SLURM_CONF:-}" ]; then
    scancel --full --signal=KILL --user="$(id -un)" 2>/dev/null || true
    scancel --user="$(id -un)" 2>/dev/null || true
  fi
  bash "$(dirname "${BASH_SOURCE[0]}")/cluster.sh" stop "$SLURM_DIR" >/dev/null 2>&1 || true
  cleanup
}
trap _cp_cleanup EXIT

start_slurm() {
  local out rc=0
  out=$(bash "$(dirname "${BASH_SOURCE[0]}")/cluster.sh" start "$SLURM_DIR") || rc=$?
  if [ $rc = 77 ]; then exit 77; fi
  [ $rc = 0 ] || fail "cluster.sh start failed ($rc)"
  eval "$out"  # export SLURM_CONF=...
}

# A tiny 2-rank job run through the Slurm launcher.
make_slurm_job() {  # make_slurm_job NAME [extra yaml lines...]
  local name=$1; shift
  make_job "$name" "$@" > /dev/null
  sed -i 's/^resources: .*/resources: {device: cpu, launcher: slurm, slurm: {poll_interval_s: 0.5, signal_s: 0}}/' "$T/$name.yaml"
  echo "$T/$name.yaml"
}

slurm_id_of() {  # the Slurm job id of the job's current attempt (from its workers)
  job_field "$1" "[w.get('launcher_id','') for w in j.get('workers',[])][0].replace('slurm job ','')"
}
slurm_job_gone() { ! squeue -h -j "$1" -o %i 2>/dev/null | grep -q .; }
