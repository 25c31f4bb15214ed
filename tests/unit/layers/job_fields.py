#!/usr/bin/env python3
"""Counts the fields a struct declares of its own (issue 40 item 4: the
coordinator's Job keeps its spec, state, attempt and ranks; checkpoint,
elastic, health and scheduling state live in their owners, each one field).
Fails, naming the count and the fields, when there are more than --max.

  job_fields.py --root REPO --file coordinator/jobs/job.h --struct Job --max 35
"""
import argparse
import re
import sys


def fields(text, struct):
    m = re.search(r"^struct %s \{\n(.*?)^\};" % re.escape(struct), text, re.S | re.M)
    if not m:
        return None
    out = []
    for line in m.group(1).splitlines():
        code = line.split("//", 1)[0].strip()
        # A declaration at the struct's own level: "type name;" or "type name = x;"
        # or "type name{...};" (no functions: they hold a parenthesis before any '=').
        if not code.endswith(";") or code.startswith(("using ", "static ", "friend ")):
            continue
        head = code.split("=", 1)[0].split("{", 1)[0]
        if "(" in head:
            continue
        out.append(re.findall(r"\w+", head)[-1])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--struct", required=True)
    ap.add_argument("--max", type=int, required=True)
    a = ap.parse_args()
    with open(f"{a.root}/{a.file}") as f:
        names = fields(f.read(), a.struct)
    if names is None:
        print(f"{a.file}: no 'struct {a.struct} {{' found")
        return 1
    if len(names) > a.max:
        print(f"{a.file}: struct {a.struct} has {len(names)} fields of its own, more than {a.max}: "
              + ", ".join(names))
        return 1
    print(f"{a.file}: struct {a.struct} has {len(names)} fields (at most {a.max})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
