#!/usr/bin/env bash
# shardctl metrics after a tiny job: one row per step in order, the loss going
# down, the loss scaler's scale carried from rank 0 through the coordinator;
# --last N, the table's scale column, no preference keys or columns (an SFT
# job; a DPO job's: preference_metrics.sh), and an unknown job.
source "$(dirname "$0")/lib.sh"
start_shardd
job=$(make_job met)
steps=$(sed -n 's/^train: {steps: \([0-9]*\),.*/\1/p' "$job")
[ -n "$steps" ] || fail "no train.steps in $job"
# fp32 under a dynamic scaler: 2^16 never overflows here, so no step is
# skipped and every row must carry that scale.
id=$(ctl submit "$job" --set train.loss_scale=dynamic)
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id")"

ctl metrics "$id" --json > "$T/metrics.jsonl" || fail "metrics --json failed"
python3 - "$T/metrics.jsonl" "$steps" <<'PY' || fail "metrics --json is wrong: $(head -n 3 "$T/metrics.jsonl")"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
steps = int(sys.argv[2])
assert [r["step"] for r in rows] == list(range(1, steps + 1)), [r["step"] for r in rows]
for r in rows:
    assert r["attempt"] == 1, r
    assert r["loss_scale"] == 65536 and r["skipped"] is False, r
    assert r["lr"] >= 0 and r["grad_norm"] > 0 and r["tokens"] > 0 and r["seconds"] > 0, r
    assert abs(r["tokens_per_s"] - r["tokens"] / r["seconds"]) <= 1e-6 * r["tokens_per_s"], r
    assert not any(k.startswith(("rewards/", "logps/")) or k in ("pairs", "nll") for k in r), r  # SFT: no TRL keys
assert rows[0]["lr"] > 0, rows[0]  # the cosine schedule ends at 0
first = sum(r["loss"] for r in rows[:5]) / 5
last = sum(r["loss"] for r in rows[-5:]) / 5
assert last < first, ("the loss did not go down", first, last)
print(f"{len(rows)} rows, mean loss {first:.3f} -> {last:.3f}")
PY

tail=$(ctl metrics "$id" --last 3 --json) || fail "metrics --last failed"
[ "$(echo "$tail" | python3 -c 'import json,sys; print([json.loads(l)["step"] for l in sys.stdin])')" = \
  "[$((steps - 2)), $((steps - 1)), $steps]" ] || fail "--last 3 is not the last three steps: $tail"

table=$(ctl metrics "$id") || fail "metrics failed"
echo "$table" | head -n 2
echo "$table" | head -n 1 | grep -q "^STEP .*LOSS .*TOKENS/S .*SCALE .*SKIPPED$" || fail "no scale column: $table"
echo "$table" | head -n 1 | grep -q "rewards/" && fail "an SFT job's table has preference columns: $table"
[ "$(echo "$table" | wc -l)" -eq $((steps + 1)) ] || fail "the table is not a header and $steps rows"

rc=0
err=$(ctl metrics nope-1 2>&1) || rc=$?
[ "$rc" -eq 2 ] || fail "an unknown job exits $rc, not 2: $err"
echo "$err" | grep -q "nope-1" || fail "the error does not name the job: $err"
echo PASS
