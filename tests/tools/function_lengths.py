#!/usr/bin/env python3
"""C++ function bodies by line count (the function budget of issue 29).

Reads the C++ sources below the given folders (default: coordinator, worker,
shard, proto; .cu/.cuh and tests/ are left out), finds every function
definition outside another function's body (free functions, member functions
defined out of line or inside a class, lambdas at namespace scope) by brace
matching that passes over comments, string and character literals (raw
strings too), preprocessor lines and `#if 0` blocks, and prints one row a function, longest
first:

  LINES  path:line  signature line

LINES counts from the line that names the function to its closing brace.

  function_lengths.py [--root DIR] [--over N] [--max N] [--max-over N:COUNT]
                      [FOLDER ...]

--over N prints only the functions longer than N lines (default 80).
--max N fails (exit 1) when any function is longer than N lines.
--max-over N:COUNT fails when more than COUNT functions are longer than N.
Python 3 standard library only.
"""
import argparse
import os
import re
import sys

SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".inc")
DEFAULT_FOLDERS = ("coordinator", "worker", "shard", "proto")
SKIP_DIRS = {"tests", "build", "third_party", ".git"}

QUALIFIERS = r"(?:\s*(?:const|volatile|noexcept|override|final|mutable|&&|&|try))*"
TRAILING_RETURN = r"(?:\s*->\s*[\w:<>,\s\*&\[\]]+)?"
# The text before a `{` that opens a function body ends like this.
FUNCTION_END = re.compile(r"\)" + QUALIFIERS + TRAILING_RETURN + r"\s*$")
# `) [qualifiers] :` opens a constructor's initializer list (`::` does not).
INIT_LIST = re.compile(r"\)" + QUALIFIERS + r"\s*:(?!:)")
CLASS_HEAD = re.compile(r"^(?:typedef\s+)?(?:class|struct|union|enum)\b")
NAMESPACE_HEAD = re.compile(r"^(?:inline\s+)?namespace\b|^extern\s*\"C\"")
CONTROL = re.compile(r"^(?:if|for|while|switch|catch|do|else)\b")


def blank(text):
  """The text with comments, literals and preprocessor lines turned to spaces.

  Newlines stay where they are, so positions keep their line numbers. A
  literal keeps its quotes (so `"a" "b"` stays two tokens); its contents go.
  """
  out = list(text)
  i, n = 0, len(text)
  line_start = True

  def wipe(a, b):
    for k in range(a, b):
      if out[k] != "\n":
        out[k] = " "

  while i < n:
    c = text[i]
    if c == "\n":
      line_start = True
      i += 1
      continue
    if line_start and c in " \t":
      i += 1
      continue
    if line_start and c == "#":
      # A preprocessor line, with its backslash continuations.
      j = i
      while j < n:
        if text[j] == "\n" and text[j - 1] != "\\":
          break
        if text.startswith("/*", j):
          end = text.find("*/", j + 2)
          j = n if end < 0 else end + 2
          continue
        j += 1
      if re.match(r"#\s*if\s+0\b", text[i:j]):
        j = _end_of_if0(text, j)  # dead code: its braces do not count
      wipe(i, j)
      i = j
      continue
    line_start = False
    if text.startswith("//", i):
      j = text.find("\n", i)
      j = n if j < 0 else j
      wipe(i, j)
      i = j
    elif text.startswith("/*", i):
      j = text.find("*/", i + 2)
      j = n if j < 0 else j + 2
      wipe(i, j)
      i = j
    elif c == "R" and i + 1 < n and text[i + 1] == '"' and not _ident_char(text, i - 1):
      m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
      if not m:
        i += 1
        continue
      end = text.find(")" + m.group(1) + '"', i + m.end())
      j = n if end < 0 else end + len(m.group(1)) + 2
      wipe(i + 2, j - 1)
      i = j
    elif c in "\"'":
      if c == "'" and _ident_char(text, i - 1) and text[i - 1].isdigit():
        i += 1  # a digit separator: 1'000'000
        continue
      j = i + 1
      while j < n and text[j] != c and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
      wipe(i + 1, min(j, n))
      i = j + 1
    else:
      i += 1
  return "".join(out)


def _end_of_if0(text, j):
  """The end of the `#endif` line that closes an `#if 0` whose line ends at j
  (nested #if/#endif counted)."""
  depth = 1
  for m in re.finditer(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|endif)\b.*$", text[j:], re.M):
    depth += -1 if m.group(1) == "endif" else 1
    if depth == 0:
      return j + m.end()
  return len(text)


def _ident_char(text, k):
  return k >= 0 and (text[k].isalnum() or text[k] == "_")


def strip_template_prefix(head):
  """`template <...> rest` -> `rest` (nested angle brackets counted)."""
  while True:
    m = re.match(r"template\s*<", head)
    if not m:
      return head
    depth, k = 1, m.end()
    while k < len(head) and depth:
      if head[k] == "<":
        depth += 1
      elif head[k] == ">":
        depth -= 1
      k += 1
    head = head[k:].lstrip()


def function_name(head):
  """The name before the parameter list: the identifier (with its `A::`
  qualifiers, or `operator...`) before the first `(` outside angle brackets.
  Returns (name, offset of the name in head) or (None, 0)."""
  angle = 0
  k = 0
  while k < len(head):
    c = head[k]
    if head.startswith("operator", k) and not _ident_char(head, k - 1) and \
        not _ident_char(head, k + 8):
      end = head.find("(", k + 8)
      if head.startswith("()", end):
        end = head.find("(", end + 2)
      start = k
      while start >= 2 and head[start - 2:start] == "::":
        start = _qualifier_start(head, start - 2)
      return re.sub(r"\s+", "", head[start:end]), start
    if c == "<":
      angle += 1
    elif c == ">" and angle:
      angle -= 1
    elif c == "(" and angle == 0:
      end = k
      while end > 0 and head[end - 1].isspace():
        end -= 1
      start = end
      while start > 0 and (_ident_char(head, start - 1) or head[start - 1] in ":~"):
        start -= 1
      if start == end:
        return None, 0
      return head[start:end], start
    k += 1
  return None, 0


def _qualifier_start(head, colon):
  k = colon
  while k > 0 and (_ident_char(head, k - 1) or head[k - 1] in "<>,"):
    k -= 1
  return k


def functions(path, text):
  """Yields (first_line, last_line, name) for every function definition."""
  clean = blank(text)
  line_of = []
  line = 1
  for ch in clean:
    line_of.append(line)
    if ch == "\n":
      line += 1
  line_of.append(line)

  # Scopes: ("ns"|"class"|"other"|"init", head_start) ; a function body is
  # skipped whole by matching braces.
  stack = []
  head_start = 0
  i, n = 0, len(clean)
  while i < n:
    c = clean[i]
    if c in ";":
      head_start = i + 1
    elif c == "}":
      if not stack:
        raise ValueError(f"{path}:{line_of[i]}: a `}}` closes nothing")
      kind, saved = stack.pop()
      if kind in ("other", "init"):
        head_start = saved  # the statement goes on: `x = {..};`, `: a_{b} {`
      else:
        head_start = i + 1
    elif c == "{":
      raw_head = clean[head_start:i]
      # Offsets into raw_head: past white space, template <...> prefixes and
      # access labels, which belong to no declaration.
      skip = len(raw_head) - len(raw_head.lstrip())
      while True:
        rest = strip_template_prefix(raw_head[skip:])
        m = re.match(r"(?:(?:public|private|protected)\s*:(?!:)\s*)+", rest)
        if m:
          rest = rest[m.end():]
        moved = len(raw_head) - skip - len(rest)
        if not moved:
          break
        skip += moved
      head = raw_head[skip:].rstrip()
      in_class = bool(stack) and stack[-1][0] == "class"
      if NAMESPACE_HEAD.match(head):
        stack.append(("ns", 0))
        head_start = i + 1
      elif CLASS_HEAD.match(head) and not FUNCTION_END.search(head):
        stack.append(("class", 0))
        head_start = i + 1
      elif INIT_LIST.search(head) and re.search(r"[\w>]\s*$", head):
        stack.append(("init", head_start))  # a member's brace initializer
      elif (FUNCTION_END.search(head) or
            (INIT_LIST.search(head) and head.rstrip().endswith("}"))) and \
          not CONTROL.match(head):
        close = match_brace(clean, i, path, line_of)
        name, offset = function_name(head)
        first = line_of[head_start + skip + offset] if name else line_of[i]
        yield first, line_of[close], name or "(lambda)", in_class
        i = close
        head_start = close + 1
        # `auto f = [] (...) {...};` goes on to its `;`.
        i += 1
        continue
      else:
        stack.append(("other", head_start))
    i += 1
  if stack:
    raise ValueError(f"{path}: {len(stack)} `{{` not closed at the end of the file")


def match_brace(clean, i, path="", line_of=None):
  depth = 0
  for k in range(i, len(clean)):
    if clean[k] == "{":
      depth += 1
    elif clean[k] == "}":
      depth -= 1
      if depth == 0:
        return k
  raise ValueError(f"{path}:{line_of[i]}: this `{{` is never closed")


def sources(root, folders):
  for folder in folders:
    base = os.path.join(root, folder)
    for dirpath, dirnames, filenames in os.walk(base):
      dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
      for f in sorted(filenames):
        if f.endswith(SOURCE_EXT):
          yield os.path.join(dirpath, f)


def measure(root, folders, errors):
  rows = []
  for path in sources(root, folders):
    with open(path, encoding="utf-8", errors="replace") as fh:
      text = fh.read()
    lines = text.split("\n")
    rel = os.path.relpath(path, root)
    try:
      for first, last, name, _ in functions(rel, text):
        rows.append((last - first + 1, rel, first, name, lines[first - 1].strip()))
    except ValueError as e:
      errors.append(str(e))
  rows.sort(key=lambda r: (-r[0], r[1], r[2]))
  return rows


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
  ap.add_argument("--over", type=int, default=80)
  ap.add_argument("--max", type=int)
  ap.add_argument("--max-over", action="append", default=[],
                  help="N:COUNT, at most COUNT functions over N lines")
  ap.add_argument("folders", nargs="*", default=list(DEFAULT_FOLDERS))
  args = ap.parse_args()
  root = os.path.normpath(args.root)
  errors = []
  rows = measure(root, args.folders, errors)
  for e in errors:
    print(f"cannot read: {e}")
  for length, rel, first, name, sig in rows:
    if length > args.over:
      print(f"{length:5d}  {rel}:{first}  {sig[:100]}")
  over80 = sum(1 for r in rows if r[0] > 80)
  over100 = sum(1 for r in rows if r[0] > 100)
  print(f"{len(rows)} functions; {over100} over 100 lines, {over80} over 80")
  failed = bool(errors)
  if args.max is not None:
    for length, rel, first, name, _ in rows:
      if length > args.max:
        print(f"{rel}:{first}: {name} is {length} lines (budget {args.max})")
        failed = True
  for spec in args.max_over:
    n, _, count = spec.partition(":")
    over = [r for r in rows if r[0] > int(n)]
    if len(over) > int(count):
      print(f"{len(over)} functions over {n} lines (budget {count})")
      failed = True
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
