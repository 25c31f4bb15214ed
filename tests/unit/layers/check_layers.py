#!/usr/bin/env python3
"""The layer rules of docs/architecture.md, checked.

Reads every `#include "..."` of the sources (everything but tests/ and build
trees), maps each file to its folder and each include to the folder of the
file it names, and fails naming file:line for every include between folders
that layers.txt does not allow (upward, or sideways between folders that do
not depend on each other), for any cycle between folders, and for a
restricted header (gRPC, CUDA, NCCL, gloo) included outside the folders that
may include it.

  check_layers.py [--root DIR] [--rules FILE] [--graph]

--graph prints the include graph between folders (one edge a line) instead.
"""
import argparse
import fnmatch
import os
import re
import sys

SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^>"]+)[>"]')
SKIP_TOP = {"tests", "build", "third_party"}


def parse_rules(path):
  allowed, factories, generated, only = {}, {}, [], []
  for n, raw in enumerate(open(path, encoding="utf-8"), 1):
    line = raw.split("#", 1)[0].strip()
    if not line:
      continue
    words = line.split()
    if words[0] == "generated" and len(words) == 3:
      generated.append((words[1], words[2]))
    elif words[0] == "only" and "in" in words[2:]:
      cut = words.index("in")
      only.append((words[1:cut], set(words[cut + 1:])))
    elif words[0] == "factory" and len(words) >= 3 and words[2] == "->":
      factories[words[1]] = set(words[3:])
    elif len(words) >= 2 and words[1] == "->":
      if words[0] in allowed:
        sys.exit(f"{path}:{n}: {words[0]} is listed twice")
      allowed[words[0]] = set(words[2:])
    else:
      sys.exit(f"{path}:{n}: cannot read this line: {raw.strip()}")
  for src, tos in allowed.items():
    for to in tos:
      if to not in allowed:
        sys.exit(f"{path}: {src} -> {to}: {to} has no line of its own")
  return allowed, factories, generated, only


def closure(allowed):
  reach = {}
  def visit(f, stack):
    if f in reach:
      return reach[f]
    if f in stack:
      sys.exit("the rules cycle: " + " -> ".join(stack[stack.index(f):] + [f]))
    out = set()
    for to in allowed[f]:
      out.add(to)
      out |= visit(to, stack + [f])
    reach[f] = out
    return out
  for f in allowed:
    visit(f, [])
  return reach


def source_files(root):
  for d, dirs, files in os.walk(root):
    rel = os.path.relpath(d, root)
    if rel == ".":
      dirs[:] = [x for x in dirs if x not in SKIP_TOP and not x.startswith((".", "build"))]
    dirs.sort()
    for f in sorted(files):
      if f.endswith(SOURCE_EXT):
        yield os.path.normpath(os.path.join(rel, f))


def target_folder(root, src, inc, generated):
  for prefix, folder in generated:
    if inc == prefix or (prefix.endswith("/") and inc.startswith(prefix)):
      return folder
  if os.path.exists(os.path.join(root, inc)):
    return os.path.dirname(os.path.normpath(inc))
  local = os.path.normpath(os.path.join(os.path.dirname(src), inc))
  if os.path.exists(os.path.join(root, local)):
    return os.path.dirname(local)
  return None


def scan(root, generated, only):
  """[(file, line, include, from_folder, to_folder)] for includes between folders,
  and the problems found on the way (unknown includes, restricted headers)."""
  edges, problems = [], []
  for src in source_files(root):
    folder = os.path.dirname(src)
    with open(os.path.join(root, src), encoding="utf-8", errors="replace") as fh:
      for n, line in enumerate(fh, 1):
        m = ANY_INCLUDE.match(line)
        if m:
          for patterns, folders in only:
            if folder not in folders and any(fnmatch.fnmatch(m.group(1), p) for p in patterns):
              problems.append(f"{src}:{n}: #include {line.strip().split(None, 1)[1]}: only "
                              f"{', '.join(sorted(folders))} may include {' or '.join(patterns)} "
                              f"(docs/architecture.md)")
        m = INCLUDE.match(line)
        if not m:
          continue
        to = target_folder(root, src, m.group(1), generated)
        if to is None:
          problems.append(f'{src}:{n}: #include "{m.group(1)}" names no file of the tree '
                          f"(a generated header needs a 'generated' line in the rules)")
        elif to != folder:
          edges.append((src, n, m.group(1), folder, to))
  return edges, problems


def cycles(graph):
  """Strongly connected components with more than one folder (Tarjan)."""
  index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
  def strong(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        strong(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))
  sys.setrecursionlimit(10000)
  for v in sorted(graph):
    if v not in index:
      strong(v)
  return out


def main():
  here = os.path.dirname(os.path.abspath(__file__))
  ap = argparse.ArgumentParser()
  ap.add_argument("--root", default=os.path.normpath(os.path.join(here, "..", "..", "..")))
  ap.add_argument("--rules", default=os.path.join(here, "layers.txt"))
  ap.add_argument("--graph", action="store_true")
  args = ap.parse_args()
  root = os.path.abspath(args.root)
  allowed, factories, generated, only = parse_rules(args.rules)
  reach = closure(allowed)
  edges, problems = scan(root, generated, only)

  if args.graph:
    count = {}
    for src, n, inc, a, b in edges:
      count.setdefault((a, b), []).append(f"{src}:{n}")
    for (a, b), where in sorted(count.items()):
      print(f"{a} -> {b}  ({len(where)}, e.g. {where[0]})")
    return 0

  graph, seen = {}, set()
  for src in source_files(root):
    f = os.path.dirname(src)
    if f and f not in allowed and f not in seen:
      seen.add(f)
      problems.append(f"{src}: folder {f} is not in {os.path.relpath(args.rules, root)}: "
                      f"give it a line saying what it may include (docs/architecture.md)")
  for src, n, inc, a, b in edges:
    for f in (a, b):
      if f not in allowed and f not in seen:
        seen.add(f)
        problems.append(f"{src}:{n}: folder {f} is not in {os.path.relpath(args.rules, root)}: "
                        f"give it a line saying what it may include (docs/architecture.md)")
    if a not in allowed or b not in allowed:
      continue
    if b in factories.get(src, ()):
      continue  # a seam's factory picking an implementation
    graph.setdefault(a, set()).add(b)
    if b in reach[a]:
      continue
    kind = "upward" if a in reach[b] else "sideways"
    problems.append(f'{src}:{n}: #include "{inc}" goes {kind}: {a} may not include {b} '
                    f"(docs/architecture.md; {a} may include {', '.join(sorted(allowed[a])) or 'nothing of shardd'})")
  first = {}
  for src, n, inc, a, b in edges:
    first.setdefault((a, b), f"{src}:{n}")
  for comp in cycles(graph):
    # The shortest cycle through the first folder that includes against the
    # rules (else the first of the component), each step with one include.
    bad = [a for src, n, inc, a, b in edges if a in comp and b in comp and b not in reach.get(a, ())]
    start = bad[0] if bad else comp[0]
    prev, todo = {start: None}, [start]
    while todo and start not in [w for v in todo for w in graph.get(v, ()) if w in comp]:
      nxt = []
      for v in todo:
        for w in sorted(graph.get(v, ())):
          if w in comp and w not in prev:
            prev[w] = v
            nxt.append(w)
      todo = nxt
    last = next(v for v in todo if start in graph.get(v, ()))
    path = [start]
    v = last
    while v != start:
      path.insert(1, v)
      v = prev[v]
    path.append(start)
    steps = [f"{a} -> {b} ({first[(a, b)]})" for a, b in zip(path, path[1:])]
    problems.append(f"folder include cycle among {', '.join(comp)}: " + ", ".join(steps))
  for p in problems:
    print(p)
  if problems:
    print(f"layer rules: {len(problems)} problem(s) in {root}")
    return 1
  folders = {a for _, _, _, a, _ in edges}
  print(f"layer rules: ok ({len(edges)} includes between {len(folders)} folders, no cycle)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
