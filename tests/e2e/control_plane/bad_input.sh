#!/usr/bin/env bash
# Bad input is rejected with a clear one-line error, and the coordinator keeps serving.
source "$(dirname "$0")/lib.sh"
start_shardd
expect_error() {  # expect_error PATTERN COMMAND...
  local pat=$1; shift
  local out
  if out=$("$@" 2>&1); then fail "succeeded but should not: $*"; fi
  echo "$out" | grep -q -- "$pat" || fail "error '$out' does not match '$pat'"
  echo "ok: $(echo "$out" | head -n 1)"
}
good=$(make_job good)
bad=$(make_job bad "bogus_key: 1")
expect_error "bogus_key" ctl submit "$bad"
nodata=$(make_job nodata)
sed -i 's#data/phrases.u32#data/missing.u32#' "$nodata"
expect_error "missing.u32 does not exist" ctl submit "$nodata"
printf 'name: [unclosed\n' > "$T/malformed.yaml"
expect_error "malformed.yaml" ctl submit "$T/malformed.yaml"
expect_error "slurm" ctl submit "$good" --set resources.launcher=slurm
expect_error "the planner says this job cannot run" ctl submit "$good" --set model.preset=llama3-70b
expect_error "UNAUTHENTICATED" ctl --token wrong-token list
# A job file that is not UTF-8, or a control character in its name: one line
# naming it (not a libprotobuf error, then "UNIMPLEMENTED: submit: "), and
# nothing after a NUL cut off.
cp "$good" "$T/latin1.yaml" && printf '# caf\xe9\n' >> "$T/latin1.yaml"
out=$(ctl submit "$T/latin1.yaml" 2>&1) && fail "a Latin-1 job file was accepted"
[ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "latin1.yaml: not valid UTF-8: byte 0xE9 at line" ||
  fail "invalid UTF-8: $out"
expect_error "\-\-set name: not valid UTF-8" ctl submit "$good" --set "name=$(printf 'a\xffb')"
sed 's/^name: .*/name: "a\\0b"/' "$good" > "$T/nul.yaml"
out=$(ctl submit "$T/nul.yaml" 2>&1) && fail "a NUL in the name was accepted"
echo "$out" | grep -q "name: control character 0x00 at position 2; a job name is a plain file name" ||
  fail "NUL in name: $out"
# Restarts: an elastic size with no restarts, a wait past the registration
# timeout, and 1e300 echoed short.
expect_error "restart.min_world_size 1 with restart.max_restarts 0" ctl submit "$good" \
  --set resources.device=cuda --set restart.max_restarts=0 --set restart.min_world_size=1
expect_error "elastic_wait_s 1000 s is longer than this coordinator's registration timeout" ctl submit "$good" \
  --set resources.device=cuda --set restart.min_world_size=1 --set restart.elastic_wait_s=1000
out=$(ctl submit "$good" --set restart.backoff_s=1e300 2>&1) && fail "backoff_s 1e300 was accepted"
echo "$out" | grep -q "got 1e+300" && [ "${#out}" -lt 300 ] || fail "1e300 echoed unbounded: ${out:0:400}"
expect_error "no job" ctl status nosuchjob-1
# shardctl's flags over a closed set read the job file's table: same choices, same words.
printf '%s\n' '{"prompt":"1+1=","response":"2"}' > "$T/rows.jsonl"
expect_error "'csv' is not one of: auto, messages, prompt_response, alpaca, sharegpt" \
  ctl prepare-data --input "$T/rows.jsonl" --out "$T/rows" --tokenizer byte --seq-len 16 --format csv
expect_error "'ignore' is not one of: fail, skip" \
  ctl prepare-data --input "$T/rows.jsonl" --out "$T/rows" --tokenizer byte --seq-len 16 --bad-rows ignore
python3 - "$good" "$T/huge.yaml" <<'PY'
import sys; open(sys.argv[2], "w").write(open(sys.argv[1]).read() + "# " + "x" * (5 << 20) + "\n")
PY
expect_error "RESOURCE_EXHAUSTED\|limit" ctl submit "$T/huge.yaml"
python3 - "$good" "$T/big.yaml" <<'PY'
import sys; open(sys.argv[2], "w").write(open(sys.argv[1]).read() + "# " + "x" * (2 << 20) + "\n")
PY
expect_error "the limit is" ctl submit "$T/big.yaml"
# A worker RPC with a made-up token and a stale attempt.
SHARDD_WORKER_TOKEN=forged "$SHARDD_WORKER_BIN" --coordinator "$ADDR" --job good-1 --attempt 1 --rank 0 > "$T/forged.log" 2>&1 && fail "forged worker was accepted"
grep -q "no job\|token" "$T/forged.log" || fail "forged worker error unclear: $(cat "$T/forged.log")"
# Still serving:
id=$(ctl submit "$good")
ctl watch "$id" > /dev/null
state_is "$id" SUCCEEDED || fail "the coordinator stopped serving after bad input"
SHARDD_WORKER_TOKEN=forged "$SHARDD_WORKER_BIN" --coordinator "$ADDR" --job "$id" --attempt 1 --rank 0 > "$T/forged.log" 2>&1 && fail "forged worker was accepted"
grep -q "token" "$T/forged.log" || fail "forged worker error does not mention the token: $(cat "$T/forged.log")"
echo PASS
