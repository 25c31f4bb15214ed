#!/usr/bin/env bash
# QLoRA through the real binaries: shardctl launch runs a 2-rank job on a tiny
# generated Llama HF folder with peft.method qlora (each worker quantises its
# own shard of the blocks to NF4 as it streams the safetensors), writes
# adapter-only checkpoints, resumes from them in a second launch (the base
# quantised again), and exports the merged model, which shardctl eval loads.
# A bad NF4 block size is one error naming the key.
source "$(dirname "$0")/lib.sh"
python3 "$SRC/configs/data/make_tiny_hf.py" "$T/hf" --family llama > /dev/null
job=$(make_job "qlora$$" \
  "peft: {method: qlora, r: 4, alpha: 8, target_modules: all-linear, double_quant: true}" \
  "export: {hf_dir: out/merged, merge: true, dtype: fp32}")
sed -i 's|^model: {preset: tiny}|model: {from_hf: hf}|' "$job"
vocab=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$T/hf/config.json")
python3 - "$T/data/phrases.u32" "$vocab" <<'PY'
import array, sys
a = array.array("I"); a.frombytes(open(sys.argv[1], "rb").read())
v = int(sys.argv[2]); open(sys.argv[1], "wb").write(array.array("I", (x % v for x in a)).tobytes())
PY

(cd "$T" && "$CTL_BIN" launch "$job" --set train.steps=20) > "$T/first.log" 2>&1 ||
  fail "first launch: $(tail -n 20 "$T/first.log")"
grep -q "QLoRA: the blocks' linear layers held as NF4" "$T/first.log" || fail "no NF4 base: $(tail -n 20 "$T/first.log")"
[ -d "$T/ckpt/qlora$$/lora_step_20" ] || fail "no adapter checkpoint: $(ls -R "$T/ckpt" | head)"
bytes=$(du -sb "$T/ckpt/qlora$$/lora_step_20" | cut -f1)
[ "$bytes" -lt 400000 ] || fail "the QLoRA checkpoint holds $bytes bytes (adapters + moments only expected)"
echo "ok: 2 ranks trained on an NF4 base; adapter checkpoint $bytes bytes"

(cd "$T" && "$CTL_BIN" launch "$job" --set train.steps=30) > "$T/second.log" 2>&1 ||
  fail "second launch: $(tail -n 20 "$T/second.log")"
grep -q "resumed the LoRA adapters from .*lora_step_20" "$T/second.log" || fail "no resume: $(tail -n 20 "$T/second.log")"
grep -q "done: 30 steps" "$T/second.log" || fail "did not finish: $(tail -n 20 "$T/second.log")"
[ -f "$T/out/merged/config.json" ] || fail "no merged export"
out=$(cd "$T" && "$CTL_BIN" eval --model out/merged --tokens data/phrases.u32 --seq-len 32 --json) || fail "eval: $out"
echo "$out" | python3 -c 'import json,sys,math; l=json.load(sys.stdin)["loss"]; assert math.isfinite(l) and l < 20, l' ||
  fail "eval of the merged export: $out"
echo "ok: resumed from the adapter checkpoint; the merged export (dequantised base + s·B·A) evaluates"

if out=$(cd "$T" && "$CTL_BIN" launch "$job" --set peft.block_size=48 2>&1); then fail "block_size 48 accepted"; fi
echo "$out" | grep -q "peft.block_size" || fail "bad block size: $out"
echo "ok: a bad NF4 block size is refused by key"
