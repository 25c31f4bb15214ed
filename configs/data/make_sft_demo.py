#!/usr/bin/env python3
"""Writes the demo SFT dataset: a deterministic synthetic task as JSONL rows
{"prompt": ..., "response": ...} that the tiny preset (vocab 512, d=128, 4
layers) learns with the byte tokenizer and the plain template in about a minute
on 2 CPU cores. Exact-match accuracy of greedy answers starts near 0 and should
rise well above chance.

Tasks (--task):
  reverse  "rev abcde=" -> "edcba"   (3-6 letters of a-h; chance ~1e-4)
  add      "27+5=" -> "32"           (a in 0..49, b in 0..9; chance ~1/60)
  mixed    both, alternating

usage: make_sft_demo.py OUT.jsonl [--rows N] [--eval-out EVAL.jsonl --eval-rows M]
                        [--task reverse|add|mixed] [--seed S]
The eval rows are drawn from the same task with another seed (reversal: only
strings that are not in the training rows).
"""
import argparse
import json
import random


def reverse_row(rng):
    n = rng.randint(3, 6)
    s = "".join(rng.choice("abcdefgh") for _ in range(n))
    return {"prompt": f"rev {s}=", "response": s[::-1]}


def add_row(rng):
    a, b = rng.randint(0, 49), rng.randint(0, 9)
    return {"prompt": f"{a}+{b}=", "response": str(a + b)}


def rows(task, n, rng):
    out = []
    for i in range(n):
        if task == "reverse" or (task == "mixed" and i % 2 == 0):
            out.append(reverse_row(rng))
        else:
            out.append(add_row(rng))
    return out


def write(path, rs):
    with open(path, "w", encoding="utf-8") as f:
        for r in rs:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--task", choices=["reverse", "add", "mixed"], default="reverse")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--eval-out")
    ap.add_argument("--eval-rows", type=int, default=200)
    a = ap.parse_args()
    train = rows(a.task, a.rows, random.Random(a.seed))
    write(a.out, train)
    if a.eval_out:
        seen = {r["prompt"] for r in train}
        rng = random.Random(a.seed + 1000)
        ev = []
        while len(ev) < a.eval_rows:
            r = rows(a.task, 1, rng)[0] if a.task != "mixed" else rows(a.task, 2, rng)[len(ev) % 2]
            if r["prompt"].startswith("rev ") and r["prompt"] in seen:
                continue  # held out: a reversal the model has not seen
            ev.append(r)
        write(a.eval_out, ev)


if __name__ == "__main__":
    main()
