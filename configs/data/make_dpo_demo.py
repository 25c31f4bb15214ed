#!/usr/bin/env python3
"""Writes the DPO demo's preference pairs: the SFT demo's reversal task
("rev abcde=" -> "edcba", make_sft_demo.py) as TRL standard rows
{"prompt": ..., "chosen": ..., "rejected": ...}, the chosen reply the correct
reversal and the rejected one a plausible wrong answer:

  short    the reversal with its last letter missing   ("gfedcb")
  swap     two neighbouring letters exchanged          ("gfdecba")
  letter   one letter replaced by another of a-h       ("gfedhba")
  copy     the string itself, not reversed             ("abcdefg")

Strings are --min-len..--max-len letters of a-h (default 7: one longer than
the SFT demo's 3-6, where its model gets none right). Deterministic for a seed; the
held-out rows (--eval-out pairs, --eval-sft-out the same prompts as
prompt/response rows for exact match) use another seed and only strings that
are not in the training pairs.

usage: make_dpo_demo.py OUT.jsonl [--rows N] [--eval-out PAIRS.jsonl]
                        [--eval-sft-out SFT.jsonl] [--eval-rows M]
                        [--min-len A] [--max-len B] [--seed S]
"""
import argparse
import json
import random

LETTERS = "abcdefgh"


def wrong(answer, rng):
    kind = rng.choice(["short", "swap", "letter", "copy"])
    if kind == "short":
        return answer[:-1]
    if kind == "swap":
        i = rng.randrange(len(answer) - 1)
        while answer[i] == answer[i + 1]:  # exchanging equal letters changes nothing
            if len(set(answer)) == 1:
                return answer[:-1]
            i = rng.randrange(len(answer) - 1)
        return answer[:i] + answer[i + 1] + answer[i] + answer[i + 2:]
    if kind == "letter":
        i = rng.randrange(len(answer))
        return answer[:i] + rng.choice(LETTERS.replace(answer[i], "")) + answer[i + 1:]
    s = answer[::-1]
    return s if s != answer else answer[:-1]  # a palindrome's copy is correct


def pair(rng, lo, hi):
    s = "".join(rng.choice(LETTERS) for _ in range(rng.randint(lo, hi)))
    return {"prompt": f"rev {s}=", "chosen": s[::-1], "rejected": wrong(s[::-1], rng)}


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=4800)
    ap.add_argument("--min-len", type=int, default=7)
    ap.add_argument("--max-len", type=int, default=7)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--eval-out")
    ap.add_argument("--eval-sft-out")
    ap.add_argument("--eval-rows", type=int, default=200)
    a = ap.parse_args()
    if not 2 <= a.min_len <= a.max_len:
        ap.error("need 2 <= --min-len <= --max-len")
    rng = random.Random(a.seed)
    train = [pair(rng, a.min_len, a.max_len) for _ in range(a.rows)]
    write(a.out, train)
    seen = {r["prompt"] for r in train}
    rng = random.Random(a.seed + 1000)
    held = []
    while len(held) < a.eval_rows:
        r = pair(rng, a.min_len, a.max_len)
        if r["prompt"] not in seen:  # held out: a string no training pair has
            seen.add(r["prompt"])
            held.append(r)
    if a.eval_out:
        write(a.eval_out, held)
    if a.eval_sft_out:
        write(a.eval_sft_out, [{"prompt": r["prompt"], "response": r["chosen"]} for r in held])


if __name__ == "__main__":
    main()
