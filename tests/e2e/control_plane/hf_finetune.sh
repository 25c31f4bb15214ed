#!/usr/bin/env bash
# The README's "fine-tune an HF model" path on a tiny generated Qwen2-shaped
# HF folder (q/k/v biases, byte-level BPE tokenizer.json, ChatML chat_template,
# generation_config.json): chat-template, plan, run (here submit + watch on the
# test's coordinator) with eval: during training, then generate from the
# exported folder. Then the bad inputs: an unknown model_type from plan,
# submit, generate and export, and a JSONL mixing row formats.
source "$(dirname "$0")/lib.sh"
start_shardd
python3 "$SRC/configs/data/make_tiny_hf.py" "$T/hf" --family qwen2 > /dev/null
mkdir -p "$T/data"
python3 "$SRC/configs/data/make_sft_demo.py" "$T/data/train.jsonl" --rows 400 \
  --eval-out "$T/data/eval.jsonl" --eval-rows 24 > /dev/null
name="hf-ft-$$"
cat > "$T/ft.yaml" <<YAML
name: $name
model: {from_hf: hf}
data: {jsonl: data/train.jsonl, template: auto, seq_len: 128, packing: true, shuffle: true}
train: {steps: 30, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup_steps: 3, seed: 7, log_every: 10}
parallel: {strategy: full_shard, world_size: 2, comm_timeout_s: 20}
checkpoint: {dir: ckpt, every_steps: 15, keep_last: 2, async: true}
resources: {device: cpu}
restart: {max_restarts: 1, backoff_s: 0.2, heartbeat_timeout_s: 4, hang_timeout_s: 60}
eval: {data: data/eval.jsonl, every_steps: 10, max_samples: 16, exact_match: true}
export: {hf_dir: out/hf, dtype: fp32}
YAML
echo '[{"role": "user", "content": "rev abc="}]' > "$T/chat.json"

# 1. What the data turns into.
text=$(ctl chat-template --tokenizer hf --messages chat.json --add-generation-prompt) || fail "chat-template: $text"
[ "$text" = $'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nrev abc=<|im_end|>\n<|im_start|>assistant' ] ||
  fail "chat-template rendered: $text"
# 2. The plan prices the qwen2 model (q/k/v biases included in its parameters).
plan=$(ctl plan ft.yaml --json) || fail "plan: $plan"
# 113216 = embeddings 320x64 (tied) + 2 x (attention 12288 + q/k/v biases 128 + MLP 33792 + norms 128) + 64.
echo "$plan" | python3 -c 'import json,sys; w=json.load(sys.stdin)["workload"]; assert (w["parameters"], w["family"]) == (113216, "qwen2"), w' ||
  fail "plan --json: $plan"
# 3. Train, evaluating every 10 steps.
id=$(ctl submit ft.yaml)
out=$(ctl watch "$id") || fail "watch failed: $out"
state_is "$id" SUCCEEDED || fail "job did not succeed: $(ctl status "$id")"
echo "$out" | grep -q "eval_loss" || echo "(watch printed no progress line with eval_loss: not a tty)"
ctl metrics "$id" --json > "$T/m.jsonl" || fail "metrics --json"
python3 - "$T/m.jsonl" <<'PY' || fail "eval metrics are wrong: $(cat "$T/m.jsonl" | head -n 12)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in rows if r["eval_samples"] > 0]  # every row has the keys; 0 samples: no evaluation
assert [r["step"] for r in ev] == [10, 20, 30], [r["step"] for r in ev]
for r in ev:
    assert r["eval_samples"] == 16 and 0 <= r["eval_exact_match"] <= 1 and r["eval_loss"] > 0, r
assert ev[-1]["eval_loss"] < ev[0]["eval_loss"], ("held-out loss did not fall", ev)
print("eval:", [(r["step"], round(r["eval_loss"], 4), r["eval_exact_match"]) for r in ev])
PY
ctl metrics "$id" | head -n 1 | grep -q "EVAL_LOSS .*EXACT_MATCH" || fail "metrics table has no eval columns"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json generation_config.json; do
  [ -f "$T/out/hf/$f" ] || fail "export lacks $f: $(ls "$T/out/hf")"
done
grep -q '"model_type": "qwen2"' "$T/out/hf/config.json" || fail "export is not qwen2: $(cat "$T/out/hf/config.json")"
# The base folder's generation_config.json goes along (both of its eos ids),
# with the ChatML turn end <|im_end|> (258) the fine-tune taught among them.
python3 -c 'import json,sys; g=json.load(open(sys.argv[1])); assert g["eos_token_id"] == [258, 256], g' \
  "$T/out/hf/generation_config.json" || fail "exported generation_config.json: $(cat "$T/out/hf/generation_config.json")"
# shardctl export of the last step with the tokenizer: the same folder
# (template auto: the folder's ChatML template, whose turn end is <|im_end|>).
ctl export "ckpt/$name/step_00000030" --out out/cli --tokenizer hf > /dev/null || fail "export --tokenizer hf"
cmp "$T/out/cli/generation_config.json" "$T/out/hf/generation_config.json" ||
  fail "export --tokenizer wrote another generation_config.json: $(cat "$T/out/cli/generation_config.json")"
# Both exports keep the base folder's own config.json: every key and value
# (eos_token_id, initializer_range, ...) but torch_dtype (issue 39 item 11).
python3 - "$T/hf/config.json" "$T/out/hf/config.json" "$T/out/cli/config.json" <<'PY' ||
import json, sys
src, run, cli = (json.load(open(p)) for p in sys.argv[1:])
for out in (run, cli):
    assert set(out) == set(src), (sorted(set(src) ^ set(out)))
    assert all(out[k] == src[k] for k in src if k != "torch_dtype"), [k for k in src if out[k] != src[k]]
PY
  fail "the exported config.json is not the base's: $(cat "$T/out/hf/config.json")"
out=$(ctl export "ckpt/$name/step_00000030" --out out/cli2 --tokenizer hf --template llama3 2>&1) &&
  fail "export --template llama3 succeeded with a ChatML tokenizer: $out"
grep -q "has no special token <|begin_of_text|>" <<< "$out" || fail "export --template llama3: unclear error: $out"
# 4. Generate from the fine-tuned folder, with its chat template and eos ids.
gen=$(ctl generate --model out/hf --messages chat.json --max-new 12 --json) || fail "generate: $gen"
echo "$gen" | python3 -c '
import json, sys
g = json.load(sys.stdin)
# The exported generation_config.json carries the tokenizer eos <|im_end|> (258).
assert g["stop"] in ("eos", "max_new") and 258 in g["eos_ids"], g
assert (g["stop"] == "eos") == (len(g["generated_ids"]) < 12), g
assert g["prompt_ids"][:1] == [257] and len(g["generated_ids"]) <= 12, g
assert isinstance(g["text"], str), g
print("generate:", repr(g["text"]), g["stop"])' || fail "generate --json: $gen"
# An eos id past int32 in generation_config.json is refused naming the file,
# not truncated (2^32 + 257 would read as 257, <|im_start|>).
cp -r "$T/out/hf" "$T/badgen"
echo '{"eos_token_id": [258, 4294967553]}' > "$T/badgen/generation_config.json"
rc=0
err=$(ctl generate --model badgen --prompt hi --max-new 2 2>&1) || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "generate with eos 4294967553 exited $rc: $err"
grep -q "generation_config.json: eos_token_id 4294967553 is outside the vocabulary of 320 ids" <<< "$err" ||
  fail "generate with eos 4294967553: unclear error: $err"
# An untrained Qwen3-shaped folder (head_dim 24 != 64/4) samples arbitrary
# bytes: the JSON stays valid (invalid UTF-8 replaced), the run never crashes.
python3 "$SRC/configs/data/make_tiny_hf.py" "$T/q3" --family qwen3 > /dev/null
gen=$(ctl generate --model q3 --messages chat.json --max-new 16 --temperature 1.0 --seed 1 --json) ||
  fail "generate on qwen3: $gen"
echo "$gen" | python3 -c 'import json,sys; g=json.load(sys.stdin); assert len(g["generated_ids"]) <= 16, g' ||
  fail "generate --json on qwen3 is not JSON: $gen"

# Bad inputs: one clear error each, never a crash.
cp -r "$T/hf" "$T/gemma"
sed -i 's/"model_type": "qwen2"/"model_type": "gemma2"/' "$T/gemma/config.json"
want="model_type 'gemma2' is not supported (supported: llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, qwen2_moe)"
for cmd in "plan ft.yaml --set model.from_hf=gemma" "plan ft.yaml --cluster 8xA100-80GB-SXM --set model.from_hf=gemma --set resources.device=cuda" "submit ft.yaml --set model.from_hf=gemma" \
           "generate --model gemma --prompt hi" "eval --model gemma --data data/eval.jsonl"; do
  rc=0
  err=$(ctl $cmd 2>&1) || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "$cmd exited $rc: $err"
  echo "$err" | grep -qF "$want" || fail "$cmd did not name the model_type: $err"
done
echo "$err"
mkdir -p "$T/mixed"
printf '%s\n' '{"prompt": "a", "response": "b"}' '{"instruction": "x", "output": "y"}' > "$T/mixed/m.jsonl"
rc=0
err=$(ctl prepare-data --input mixed/m.jsonl --tokenizer hf --seq-len 128 --out mixed/p 2>&1) || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "mixed rows exited $rc: $err"
echo "$err"
echo PASS
