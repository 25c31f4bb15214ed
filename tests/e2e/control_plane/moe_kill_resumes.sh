#!/usr/bin/env bash
# Mixture of experts resumes bit-exactly after kill -9 (docs/moe.md): a
# tiny-qwen3-moe job (8 experts, top-2, aux and z router losses on) on two CPU
# ranks; rank 1 is killed with SIGKILL at a random step, the job resumes from
# its last committed step and ends with the same exported weights as an
# uninterrupted run, and every stored step's loss equals that run's. Paced by
# the job's progress: the victim's workers wait at a step gate
# (SHARDD_STEP_GATE) after step kill_at until the kill.
source "$(dirname "$0")/lib.sh"
export SHARDD_STEP_GATE=$T/gate
open_gate 1000000
mkdir -p "$T/data"
python3 - "$T/data/train.jsonl" <<'PY'
import json, random, sys
rng = random.Random(5)
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        s = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
        f.write(json.dumps({"prompt": f"rev {s}=", "response": s[::-1]}) + "\n")
PY
moe_job() {  # moe_job NAME: the job file's path
  cat > "$T/$1.yaml" <<YAML
name: $1
model: {preset: tiny-qwen3-moe}
data: {jsonl: data/train.jsonl, tokenizer: byte, template: plain, seq_len: 32, packing: true}
train: {steps: 60, global_batch: 8, micro_batch: 2, lr: 3.0e-3, warmup_steps: 5, seed: 7, log_every: 10}
parallel: {strategy: full_shard, world_size: 2, comm_timeout_s: 20}
moe: {aux_loss_coef: 0.01, z_loss_coef: 0.001}
checkpoint: {dir: ckpt, every_steps: 5, keep_last: 3, async: true}
resources: {device: cpu}
restart: {max_restarts: 3, backoff_s: 0.2, heartbeat_timeout_s: 4, hang_timeout_s: 60}
export: {hf_dir: out/$1, dtype: fp32}
YAML
  echo "$T/$1.yaml"
}
start_shardd
id_ref=$(ctl submit "$(moe_job ref)")
ctl watch "$id_ref" > /dev/null || fail "reference run failed"
state_is "$id_ref" SUCCEEDED || fail "reference run did not succeed: $(ctl status "$id_ref")"

kill_at=$((8 + RANDOM % 30))
open_gate "$kill_at"
id=$(ctl submit "$(moe_job vic)")
kill_rank_and_finish "$id" 1 "$kill_at"
echo "$WATCH_OUT" | grep -q "rank 1 killed by signal 9" || fail "no event names the killed rank"
cmp "$T/out/ref/model.safetensors" "$T/out/vic/model.safetensors" || fail "final weights differ from the uninterrupted run"
ctl metrics "$id_ref" --json > "$T/ref.jsonl" || fail "metrics of the reference run failed"
ctl metrics "$id" --json > "$T/vic.jsonl" || fail "metrics of the killed run failed"
resumed=$RESUMED
python3 - "$T/ref.jsonl" "$T/vic.jsonl" "$resumed" <<'PY' || fail "the killed run's metrics do not match the reference run's"
import json, sys
ref, vic = ([json.loads(line) for line in open(p)] for p in sys.argv[1:3])
resumed = int(sys.argv[3])
assert [r["step"] for r in ref] == list(range(1, 61)), [r["step"] for r in ref]
steps = [r["step"] for r in vic]
assert set(range(1, 61)) - set(steps) <= {resumed}, sorted(set(range(1, 61)) - set(steps))
assert all(r["attempt"] >= 2 for r in vic if r["step"] > resumed), vic
for r in vic:
    want = ref[r["step"] - 1]
    assert r["loss"] == want["loss"], (r, want)
    assert r["moe/aux_loss"] == want["moe/aux_loss"], (r, want)
PY
echo "PASS: identical final weights and losses after a kill -9 at step $kill_at (resumed from step $resumed)"
