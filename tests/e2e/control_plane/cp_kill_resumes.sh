#!/usr/bin/env bash
# Context parallelism through shardctl (parallel.context_parallel 2 on 2
# ranks: each sequence split over both): kill -9 a worker mid-run, the job
# resumes automatically from its last committed step and ends with the same
# final weights as an uninterrupted C = 2 run; every stored loss matches that
# run's, and the losses stay within float tolerance of a C = 1 run of the same
# job (the arithmetic is the whole sequence's). Paced by a step gate
# (SHARDD_STEP_GATE) and the job's progress, never by sleeps.
source "$(dirname "$0")/lib.sh"
export SHARDD_STEP_GATE=$T/gate
open_gate 1000000
start_shardd
steps=60
plain=$(make_job plain "export: {hf_dir: out/plain, dtype: fp32}")
ref=$(make_job ref "export: {hf_dir: out/ref, dtype: fp32}")
victim=$(make_job vic "export: {hf_dir: out/vic, dtype: fp32}")
id_plain=$(ctl submit "$plain" --set train.steps=$steps)
ctl watch "$id_plain" > /dev/null || fail "C = 1 run failed"
id_ref=$(ctl submit "$ref" --set train.steps=$steps --set parallel.context_parallel=2)
ctl watch "$id_ref" > /dev/null || fail "C = 2 reference run failed: $(ctl status "$id_ref")"
state_is "$id_ref" SUCCEEDED || fail "C = 2 reference run did not succeed"
ctl logs "$id_ref" --rank 0 | grep -q "context parallelism: 2 ranks per sequence (16 of its 32 tokens each" ||
  fail "the C = 2 run did not split its sequences"

kill_at=$((12 + RANDOM % 20))
open_gate "$kill_at"
id=$(ctl submit "$victim" --set train.steps=$steps --set parallel.context_parallel=2)
kill_rank_and_finish "$id" 1 "$kill_at"
echo "$WATCH_OUT" | grep -q "rank 1 killed by signal 9" || fail "no event names the killed rank"
cmp "$T/out/ref/model.safetensors" "$T/out/vic/model.safetensors" || fail "final weights differ from the uninterrupted C = 2 run"
id_vic=$id
for j in plain ref vic; do
  eval "jid=\$id_$j"
  ctl metrics "$jid" --json > "$T/$j.jsonl" || fail "metrics of $j failed"
done
resumed=$RESUMED
python3 - "$T/plain.jsonl" "$T/ref.jsonl" "$T/vic.jsonl" "$resumed" "$steps" <<'PY' || fail "the losses do not match"
import json, sys
plain, ref, vic = ([json.loads(line) for line in open(p)] for p in sys.argv[1:4])
resumed, steps = int(sys.argv[4]), int(sys.argv[5])
assert [r["step"] for r in ref] == list(range(1, steps + 1)), [r["step"] for r in ref]
assert [r["step"] for r in plain] == list(range(1, steps + 1))
got = [r["step"] for r in vic]
assert set(range(1, steps + 1)) - set(got) <= {resumed}, sorted(set(range(1, steps + 1)) - set(got))
assert all(r["attempt"] >= 2 for r in vic if r["step"] > resumed), vic
for r in vic:
    assert r["loss"] == ref[r["step"] - 1]["loss"], (r, ref[r["step"] - 1])
worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(ref, plain))
print(f"C = 2 vs C = 1 over {steps} steps: worst relative loss difference {worst:.2g}")
assert worst < 1e-4, worst
PY
echo PASS: C = 2 resumed after a kill at step $kill_at with identical final weights
