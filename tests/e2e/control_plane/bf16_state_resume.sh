#!/usr/bin/env bash
# optim.state_dtype: bf16 under the coordinator (CPU workers, offloaded state):
# the planner admits it, a worker killed with -9 mid-run resumes from a bf16
# checkpoint and the job ends with the same final weights as an uninterrupted
# run (stochastic rounding is seeded, so the resumed steps draw the same bits);
# then the same job continued with fp32 state converts the bf16 checkpoint on
# load and says so in its log. The victim's workers wait at a step gate
# (SHARDD_STEP_GATE) after step kill_at until the kill, so it lands mid-run
# whatever the machine's speed (a loaded machine once let the job finish first).
source "$(dirname "$0")/lib.sh"
export SHARDD_STEP_GATE=$T/gate
open_gate 1000000
start_shardd
bf16=(--set parallel.offload_optimizer=true --set optim.state_dtype=bf16 --set train.steps=60)
ref=$(make_job ref "export: {hf_dir: out/ref, dtype: fp32}")
victim=$(make_job vic "export: {hf_dir: out/vic, dtype: fp32}")
id_ref=$(ctl submit "$ref" "${bf16[@]}") || fail "submit refused: $id_ref"
ctl watch "$id_ref" > /dev/null || fail "reference run failed"
state_is "$id_ref" SUCCEEDED || fail "reference run did not succeed"
ctl logs "$id_ref" --rank 0 | grep -q "offloaded (bf16 master, m, v" || fail "the run did not hold bf16 state"

kill_at=$((12 + RANDOM % 20))
open_gate "$kill_at"
id=$(ctl submit "$victim" "${bf16[@]}")
kill_rank_and_finish "$id" 1 "$kill_at"
cmp "$T/out/ref/model.safetensors" "$T/out/vic/model.safetensors" || fail "final weights differ from the uninterrupted run"

# The same run continued with fp32 state: the bf16 checkpoint is widened on load.
id2=$(ctl submit "$victim" --set parallel.offload_optimizer=true --set train.steps=70)
ctl watch "$id2" > /dev/null || fail "the fp32-state continuation failed"
ctl logs "$id2" --rank 0 | grep -q "in bf16; this job holds it in fp32 (optim.state_dtype): converted on load" ||
  fail "no log line says the state was converted: $(ctl logs "$id2" --rank 0 | grep -i resume)"
echo PASS: bf16 state resumes bitwise after a kill at step $kill_at, and converts to fp32 on load
