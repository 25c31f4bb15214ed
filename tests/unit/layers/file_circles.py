#!/usr/bin/env python3
"""Include circles between the files of one folder (issue 40 item 4).

A file's stem (x.h and x.cc together) is one node; `#include "dir/y.h"` from
x.h or x.cc, with y in the same folder, is an edge x -> y. Any circle (x
includes y, y includes x, directly or through others) fails, naming the
stems and the include lines that close it: the lower file of such a pair
reaches up to one built on it.

  file_circles.py [--root DIR] FOLDER ...
Python 3 standard library only.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def graph(root, folder):
  edges = {}
  base = os.path.join(root, folder)
  for f in sorted(os.listdir(base)):
    stem, ext = os.path.splitext(f)
    if ext not in (".h", ".cc", ".cu", ".inc"):
      continue
    for n, line in enumerate(open(os.path.join(base, f), encoding="utf-8", errors="replace"), 1):
      m = INCLUDE.match(line)
      if not m or os.path.dirname(m.group(1)) != folder:
        continue
      other = os.path.splitext(os.path.basename(m.group(1)))[0]
      if other != stem:
        edges.setdefault(stem, {}).setdefault(other, f"{folder}/{f}:{n}")
  return edges


def circles(edges):
  found, seen = [], set()
  def walk(node, path):
    for nxt in sorted(edges.get(node, {})):
      if nxt in path:
        cyc = path[path.index(nxt):] + [nxt]
        key = frozenset(cyc)
        if key not in seen:
          seen.add(key)
          found.append(cyc)
      elif len(path) < 12:
        walk(nxt, path + [nxt])
  for start in sorted(edges):
    walk(start, [start])
  return found


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", "..", ".."))
  ap.add_argument("folders", nargs="+")
  args = ap.parse_args()
  bad = 0
  for folder in args.folders:
    edges = graph(args.root, folder)
    for cyc in circles(edges):
      bad += 1
      where = ", ".join(edges[a][b] for a, b in zip(cyc, cyc[1:]))
      print(f"include circle in {folder}: {' -> '.join(cyc)} ({where})")
  if bad:
    return 1
  print(f"file circles: none in {', '.join(args.folders)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
