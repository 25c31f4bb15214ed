#!/usr/bin/env bash
# One rule for job names at every entry point: shardctl launch, a standalone
# worker and the coordinator all refuse a name that is not a plain file name
# (it would place checkpoints at /etc or ../..), before anything is written.
source "$(dirname "$0")/lib.sh"
start_shardd
job=$(make_job names)
expect_refused() {  # expect_refused NAME COMMAND...
  local name=$1; shift
  local out
  if out=$(cd "$T" && "$@" --set "name=$name" 2>&1); then fail "name '$name' was accepted by: $*"; fi
  echo "$out" | grep -q "name: '$name' must be a plain file name" || fail "unclear refusal of '$name' by $*: $out"
}
for name in /etc ../.. ..; do
  expect_refused "$name" "$CTL_BIN" launch "$job"
  expect_refused "$name" "$SHARDD_WORKER_BIN" --standalone --config "$job" --rank 0 --world 1
  expect_refused "$name" "$CTL_BIN" --coordinator "$ADDR" --state-dir "$STATE" submit "$job"
done
[ ! -e "$T/ckpt" ] || fail "a refused name still created $T/ckpt: $(ls -R "$T/ckpt")"
[ ! -e /etc/step_00000010 ] || fail "checkpoints were written under /etc"
echo "ok: every entry point refuses /etc, ../.. and .."
