#!/usr/bin/env bash
# A DPO job (preference: dpo) through the control plane and its queue, kill -9
# of a worker after a committed checkpoint: the new attempt resumes from it,
# reads the reference log-probs its first attempt stored (the file keeps its
# inode and mtime; rank 0's log says it was read, not computed) and ends with
# the final weights of an uninterrupted run — the same job queued behind it
# (--cpu-slots 2: one 2-rank job at a time) — bitwise. The workers wait at a
# step gate (SHARDD_STEP_GATE) so the kill lands mid-run whatever the
# machine's speed.
source "$(dirname "$0")/lib.sh"
export SHARDD_STEP_GATE=$T/gate
open_gate 14  # the victim trains to step 14 (checkpoint 10 committed) and waits before step 15
start_shardd 0 --cpu-slots 2
mkdir -p "$T/data"
python3 - "$T/data/pairs.jsonl" <<'PY'
import random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    for _ in range(48):
        s = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
        wrong = s + "a" if s[::-1] == s else s  # a plausible wrong answer: the word as it was
        f.write('{"prompt": "rev %s=", "chosen": "%s", "rejected": "%s"}\n' % (s, s[::-1], wrong))
PY
dpo_job() {  # dpo_job NAME: a tiny DPO job exporting to out/NAME
  cat > "$T/$1.yaml" <<YAML
name: $1
model: {preset: tiny}
data: {jsonl: data/pairs.jsonl, tokenizer: byte, template: plain, seq_len: 32, shuffle: true}
train: {steps: 30, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 3, seed: 7, log_every: 10}
parallel: {strategy: full_shard, world_size: 2, comm_timeout_s: 20}
checkpoint: {dir: ckpt, every_steps: 10, keep_last: 3, async: true}
resources: {device: cpu}
restart: {max_restarts: 3, backoff_s: 0.2, heartbeat_timeout_s: 4, hang_timeout_s: 60}
preference: {method: dpo, beta: 0.5}
export: {hf_dir: out/$1, dtype: fp32}
YAML
  echo "$T/$1.yaml"
}
ref_file() { ls "$T/ckpt/$1/data/"sft.ref-*.f64 2>/dev/null; }

id=$(ctl submit "$(dpo_job dpo-vic)")
wait_for 120 committed_at_least "$id" 10 || fail "no committed checkpoint at step 10"
wait_for 60 step_at_least "$id" 14 || fail "never reached step 14"
ref=$(ref_file dpo-vic) && [ -n "$ref" ] || fail "no reference file under $T/ckpt/dpo-vic/data: $(ls "$T/ckpt/dpo-vic/data")"
before=$(stat -c '%i %y' "$ref")
grep -q "reference log-probs of 48 pairs (data.jsonl) computed" <<< "$(ctl logs "$id" --rank 0)" || fail "attempt 1 did not compute the reference"
id_ref=$(ctl submit "$(dpo_job dpo-ref)")
wait_for 20 state_is "$id_ref" QUEUED || fail "the second DPO job is not queued behind the first: $(ctl status "$id_ref")"
pid=$(worker_pid "$id" 1)
echo "kill -9 rank 1 (pid $pid) waiting at step 15; reference $ref ($before)"
kill -9 "$pid"
attempt_at_least() { [ "$(job_field "$1" "j.get('attempt', 1)")" -ge "$2" ]; }
wait_for 60 attempt_at_least "$id" 2 || fail "no second attempt after the kill: $(ctl status "$id")"
open_gate 1000000
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "job did not succeed after the kill: $(ctl status "$id")"
ctl watch "$id_ref" > /dev/null || fail "the queued (uninterrupted) run failed"
state_is "$id_ref" SUCCEEDED || fail "the queued (uninterrupted) run did not succeed: $(ctl status "$id_ref")"
grep -q "resume from .*step_00000010" <<< "$out" || fail "attempt 2 did not resume from step 10: $out"
log2=$(ctl logs "$id" --rank 0 --attempt 2)
grep -q "reference log-probs of 48 pairs (data.jsonl) read from .*$(basename "$ref")" <<< "$log2" ||
  fail "attempt 2 did not read the stored reference: $(grep -i reference <<< "$log2")"
if grep -q "reference log-probs of .* computed" <<< "$log2"; then fail "attempt 2 recomputed the reference"; fi
[ "$(stat -c '%i %y' "$ref")" = "$before" ] || fail "the reference file was rewritten: $before -> $(stat -c '%i %y' "$ref")"
[ "$(ref_file dpo-vic | wc -l)" = 1 ] || fail "more than one reference file: $(ref_file dpo-vic)"
cmp "$ref" "$(ref_file dpo-ref)" || fail "the two runs' reference values differ"
cmp "$T/out/dpo-ref/model.safetensors" "$T/out/dpo-vic/model.safetensors" ||
  fail "final weights differ from the uninterrupted run"
echo "PASS: reference read back after kill -9 at step 15, final weights identical"
