#!/usr/bin/env python3
"""Writes a small synthetic token file (raw little-endian uint32) that a tiny
Llama can visibly learn: a fixed set of random "phrases" over the vocabulary,
concatenated in random order. Tokens inside a phrase are predictable from the
phrase so far; phrase starts are not, so the loss floor is well above zero.

usage: make_tokens.py OUT [--tokens N] [--vocab V] [--phrases P] [--seed S]
"""
import argparse
import random
import struct


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=120_000)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--phrases", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    phrases = [[rng.randrange(a.vocab) for _ in range(rng.randint(6, 24))] for _ in range(a.phrases)]
    toks = []
    while len(toks) < a.tokens:
        toks.extend(rng.choice(phrases))
    toks = toks[: a.tokens]
    with open(a.out, "wb") as f:
        f.write(struct.pack("<%dI" % len(toks), *toks))


if __name__ == "__main__":
    main()
