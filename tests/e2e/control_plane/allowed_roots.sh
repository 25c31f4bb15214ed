#!/usr/bin/env bash
# shardd --allowed-root: a job naming a path outside the roots (directly, by
# "..", or through a symlink) is refused naming the key, and nothing is
# created there; a job inside them runs; a missing root stops shardd at start.
source "$(dirname "$0")/lib.sh"
if out=$("$SHARDD" --state-dir "$STATE" --listen 127.0.0.1:0 --http-listen "" --allowed-root "$T/nowhere" 2>&1); then
  fail "a missing --allowed-root was accepted"
fi
echo "$out" | grep -q -- "--allowed-root $T/nowhere: not an existing directory" || fail "unclear refusal: $out"
echo "ok: $out"

start_shardd 0 --allowed-root "$T"
grep -q "job paths confined to $T" "$T/shardd.log" || fail "the roots are not logged"

expect_denied() {  # expect_denied KEY COMMAND...
  local key=$1; shift
  local out
  if out=$("$@" 2>&1); then fail "succeeded but should not: $*"; fi
  echo "$out" | grep -q "PERMISSION_DENIED.*$key: .* is outside the coordinator's allowed roots ($T)" \
    || fail "error '$out' does not name $key and the roots"
  echo "ok: $(echo "$out" | head -n 1)"
}
job=$(make_job roots)
expect_denied checkpoint.dir ctl submit "$job" --set "checkpoint.dir=$T/../escape-$$"
expect_denied export.hf_dir ctl submit "$job" --set "export.hf_dir=../outside-$$/hf"
ln -s /tmp "$T/link"  # a symlink inside the root to a directory outside it
expect_denied checkpoint.dir ctl submit "$job" --set "checkpoint.dir=link/escape-$$"
for d in "$(dirname "$T")/escape-$$" "$(dirname "$T")/outside-$$"; do
  [ ! -e "$d" ] || fail "a refused job created $d"
done

id=$(ctl submit "$job")
wait_for 120 state_is "$id" SUCCEEDED || fail "the job inside the roots did not succeed"
ls "$T/ckpt/roots" | grep -q step_ || fail "no checkpoint under the allowed root"
echo PASS
