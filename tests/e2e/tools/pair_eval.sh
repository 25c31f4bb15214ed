#!/usr/bin/env bash
# tools/pair_eval on two tiny generated HF folders A and B (other seeds) and
# three TRL pairs: a model against itself has reward accuracy 0 and zero
# rewards; B against A mirrors A against B (accuracies, margins); and each
# reply's log-prob sum agrees with shardctl eval's SFT loss of the same
# prompt and reply (another code path: the SFT evaluator's cross-entropy).
set -euo pipefail
BIN=${SHARDD_BIN_DIR:?}
SRC=${SHARDD_SOURCE_DIR:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
python3 "$SRC/configs/data/make_tiny_hf.py" "$T/a" --family llama --seed 1 > /dev/null
python3 "$SRC/configs/data/make_tiny_hf.py" "$T/b" --family llama --seed 2 > /dev/null
cat > "$T/pairs.jsonl" <<'JSONL'
{"prompt":"rev abcdefg=","chosen":"gfedcba","rejected":"gfedcb"}
{"prompt":"rev hbgcacb=","chosen":"bcacgbh","rejected":"bcacghb"}
{"prompt":"rev caacdhg=","chosen":"ghdcaac","rejected":"caacdhg"}
JSONL
python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
with open(f"{t}/chosen.jsonl", "w") as c, open(f"{t}/rejected.jsonl", "w") as r:
    for line in open(f"{t}/pairs.jsonl"):
        p = json.loads(line)
        c.write(json.dumps({"prompt": p["prompt"], "response": p["chosen"]}) + "\n")
        r.write(json.dumps({"prompt": p["prompt"], "response": p["rejected"]}) + "\n")
PY
pe() { "$BIN/tools/pair_eval" --data "$T/pairs.jsonl" --template plain --json "$@"; }
aa=$(pe --policy "$T/a" --reference "$T/a") || fail "pair_eval a/a: $aa"
ab=$(pe --policy "$T/a" --reference "$T/b") || fail "pair_eval a/b: $ab"
ba=$(pe --policy "$T/b" --reference "$T/a") || fail "pair_eval b/a: $ba"
ch=$("$BIN/coordinator/ctl/shardctl" eval --model "$T/a" --data "$T/chosen.jsonl" --template plain --json) || fail "eval: $ch"
rj=$("$BIN/coordinator/ctl/shardctl" eval --model "$T/a" --data "$T/rejected.jsonl" --template plain --json) || fail "eval: $rj"
python3 - "$aa" "$ab" "$ba" "$ch" "$rj" <<'PY' || fail "aa=$aa ab=$ab ba=$ba chosen=$ch rejected=$rj"
import json, sys
aa, ab, ba, ch, rj = (json.loads(a) for a in sys.argv[1:])
assert aa["pairs"] == 3, aa
assert aa["reward_accuracy"] == 0 and aa["rewards/margins"] == 0 and aa["rewards/chosen"] == 0, aa
assert aa["policy_preference_accuracy"] == aa["reference_preference_accuracy"], aa
assert ab["policy_preference_accuracy"] == ba["reference_preference_accuracy"], (ab, ba)
assert abs(ab["rewards/margins"] + ba["rewards/margins"]) < 1e-9, (ab, ba)
# Strict ">" both ways: a pair counts for at most one direction.
assert ab["reward_accuracy"] + ba["reward_accuracy"] <= 1 + 1e-9, (ab, ba)
assert ab["logps/chosen"] == aa["logps/chosen"], (ab, aa)
# Mean summed log-prob per pair = -(mean CE per target token x target tokens) / pairs.
for key, ev in (("logps/chosen", ch), ("logps/rejected", rj)):
    want = -ev["loss"] * ev["tokens"] / 3
    assert abs(aa[key] - want) <= 1e-4 * abs(want), (key, aa[key], want)
PY
# Bad input: one line naming the problem.
out=$("$BIN/tools/pair_eval" --policy "$T/a" --reference "$T/a" --data "$T/missing.jsonl" 2>&1) && fail "missing data accepted"
grep -q "missing.jsonl" <<<"$out" || fail "the error does not name the file: $out"
echo "pair_eval e2e: ok"
