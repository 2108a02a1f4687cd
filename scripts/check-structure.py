#!/usr/bin/env python3
"""The shape of the code: which parts depend on which, and where that goes in circles.

    scripts/check-structure.py [--dot FILE] [--quiet]     (make check-structure)

A part is a .c file with its .h (user/collector/session/session.c and session.h are one part),
or a header alone. A part depends on another when it includes that one's header, or
calls a function (not static) that the other defines. Printed:
- the floors: parts that depend on nothing of the house on the ground floor, each other
  part one floor above the highest it depends on (a circle's parts share one floor);
- the arrows (part -> part, with the functions called or the header included);
- the circles (parts that depend on each other, directly or round about), each with one
  path round it;
- the size limits: C files over 800 lines (user/common/pyre.c excepted: it includes
  reader_json.c), functions over 150 lines;
- a session's trace touched outside user/collector/trace/ other than through trace.h's
  functions (`s->trace.FIELD`, `p->s.trace.FIELD`, or trace_state.h included).
Exit status 1 when there is a circle or a limit is passed, 0 otherwise. --dot FILE writes
the drawing as Graphviz. Read as text: comments and strings are blanked first, and a
function is a name with a parameter list followed by a body at the top level. The
skeletons and vmlinux.h (generated) are not parts.
"""
import argparse
import collections
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREES = ("user", "bpf", "include", "agent")
SEARCH = ("include", "user/common", "agent")
FILE_LIMIT, FUNC_LIMIT = 800, 150
FILE_EXEMPT = {"user/common/pyre.c"}
# a session's trace by its fields (its options are tracer_opts.trace: opts->trace.X)
TRACE_FIELD = re.compile(r"\b(?:s|p->s|old->s)(?:->|\.)trace\.[A-Za-z_]\w*")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined", "do", "else",
            "case", "__attribute__", "typeof", "__typeof__", "_Static_assert", "offsetof",
            "__builtin_expect", "asm", "__asm__", "_Alignof", "__alignof__"}


def blank(text):
    """Comments, strings and character literals as spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            out.append(c)
            i += 1
            continue
        out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
        i = j
    return "".join(out)


HEADER = re.compile(r"(\w+)\s*\(([^()]|\([^()]*\))*\)\s*(__attribute__\s*\(\(.*\)\)\s*)?$",
                    re.S)
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def functions(text):
    """[(name, static, first line, last line, body)] of the top-level definitions."""
    found, depth, start, head_from = [], 0, None, 0
    for i, c in enumerate(text):
        if c == "{":
            if depth == 0:
                head = text[head_from:i]
                m = HEADER.search(head.rstrip())
                line = text.count("\n", 0, i) + 1
                kind = head.strip().split("\n")[-1] if head.strip() else ""
                if (m and "=" not in head[head.rfind(")") if ")" in head else 0:]
                        and not re.search(r"\b(struct|union|enum)\s*\w*\s*$", head)
                        and m.group(1) not in KEYWORDS):
                    start = (m.group(1), bool(re.search(r"\bstatic\b", head)),
                             text.count("\n", 0, head_from + len(head) - len(head.lstrip()))
                             + 1, i)
                else:
                    start = None
                del kind, line
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if start:
                    name, static, first, body_at = start
                    found.append((name, static, first, text.count("\n", 0, i) + 1,
                                  text[body_at:i]))
                start = None
                head_from = i + 1
        elif c == ";" and depth == 0:
            head_from = i + 1
        elif c == "#" and depth == 0 and (i == 0 or text[i - 1] == "\n"):
            j = text.find("\n", i)
            while j > 0 and text[j - 1] == "\\":
                j = text.find("\n", j + 1)
            head_from = (len(text) if j < 0 else j)
    return found


def part_of(path):
    return os.path.splitext(path)[0].replace(".bpf", ".bpf")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dot", help="write the drawing as Graphviz to this file")
    ap.add_argument("--quiet", action="store_true", help="only the problems")
    opts = ap.parse_args()

    files = []
    for tree in TREES:
        for root, _, names in os.walk(os.path.join(REPO, tree)):
            for name in sorted(names):
                if name.endswith((".c", ".h")):
                    files.append(os.path.relpath(os.path.join(root, name), REPO))
    by_name = collections.defaultdict(list)
    for f in files:
        by_name[os.path.basename(f)].append(f)

    texts = {f: open(os.path.join(REPO, f), errors="replace").read() for f in files}
    clean = {f: blank(t) for f, t in texts.items()}
    parts = sorted({part_of(f) for f in files})
    defined = collections.defaultdict(set)   # function -> parts defining it (not static)
    bodies = collections.defaultdict(list)   # part -> [(file, name, first, last, body)]
    problems = []
    for f in files:
        n = texts[f].count("\n")
        if f.endswith(".c") and n > FILE_LIMIT and f not in FILE_EXEMPT:
            problems.append(f"{f}: {n} lines (more than {FILE_LIMIT})")
        for name, static, first, last, body in functions(clean[f]):
            if not static and f.endswith(".c"):
                defined[name].add(part_of(f))
            bodies[part_of(f)].append((f, name, first, last, body))
            if last - first + 1 > FUNC_LIMIT:
                problems.append(f"{f}:{first}: {name}() has {last - first + 1} lines "
                                f"(more than {FUNC_LIMIT})")

    for f in files:
        if not f.startswith("user/collector/") or f.startswith("user/collector/trace/"):
            continue
        for m in TRACE_FIELD.finditer(clean[f]):
            line = clean[f].count("\n", 0, m.start()) + 1
            problems.append(f"{f}:{line}: {m.group(0)}: struct trace is trace/'s (a trace_* "
                            f"function of trace.h)")
        if re.search(r'^\s*#\s*include\s+"trace_state.h"', texts[f], re.M):
            problems.append(f"{f}: includes trace_state.h: struct trace is trace/'s")

    arrows = collections.defaultdict(set)    # (a, b) -> what makes it
    for f in files:
        a = part_of(f)
        here = os.path.dirname(f)
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', texts[f], re.M):
            target = os.path.normpath(os.path.join(here, inc))
            if target not in texts:
                cands = [os.path.join(d, inc) for d in SEARCH if os.path.join(d, inc) in texts]
                cands += [c for c in by_name.get(os.path.basename(inc), [])
                          if os.path.dirname(c) == here]
                # the collector's folders see each other's headers (the Makefile's -I)
                if here.startswith("user/collector") or here in ("user", "tests/aids"):
                    cands += [c for c in by_name.get(os.path.basename(inc), [])
                              if c.startswith("user/collector/")]
                if not cands:
                    continue  # generated (skeletons, vmlinux.h) or a system header
                target = cands[0]
            b = part_of(target)
            if b != a:
                arrows[(a, b)].add(f"#include \"{inc}\"")
    for a, fs in bodies.items():
        for f, name, _, _, body in fs:
            for callee in set(CALL.findall(body)):
                for b in defined.get(callee, ()):
                    if b != a:
                        arrows[(a, b)].add(callee + "()")

    # circles: strongly connected parts (Tarjan, iterative)
    succ = collections.defaultdict(set)
    for a, b in arrows:
        succ[a].add(b)
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for v0 in parts:
        if v0 in index:
            continue
        work = [(v0, iter(sorted(succ[v0])))]
        index[v0] = low[v0] = counter[0]
        counter[0] += 1
        stack.append(v0)
        on.add(v0)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    comps.append(sorted(comp))
    comp_of = {v: i for i, c in enumerate(comps) for v in c}
    circles = [c for c in comps if len(c) > 1]

    # floors of the condensation (Tarjan gives its components sinks first)
    floor = {}
    for i, comp in enumerate(comps):
        below = [floor[comp_of[b]] for v in comp for b in succ[v] if comp_of[b] != i]
        floor[i] = 1 + max(below) if below else 0
    floors = collections.defaultdict(list)
    for v in parts:
        floors[floor[comp_of[v]]].append(v)
    back = sum(1 for a, b in arrows if comp_of[a] == comp_of[b])

    def path_round(comp):
        """One path round a circle: from its first part back to it, breadth first."""
        members, start = set(comp), comp[0]
        prev, queue = {start: None}, collections.deque([start])
        while queue:
            v = queue.popleft()
            for w in sorted(succ[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, v, start]
                if w in members and w not in prev:
                    prev[w] = v
                    queue.append(w)
        return comp

    if not opts.quiet:
        print(f"{len(parts)} parts on {len(floors)} floors, {len(arrows)} arrows "
              f"({back} of them inside circles)")
        for k in sorted(floors, reverse=True):
            print(f"floor {k}: " + ", ".join(floors[k]))
        print("\narrows:")
        for (a, b), why in sorted(arrows.items()):
            mark = "  (circle)" if comp_of[a] == comp_of[b] else ""
            print(f"  {a} -> {b}: {', '.join(sorted(why)[:6])}"
                  f"{' ...' if len(why) > 6 else ''}{mark}")
    for c in circles:
        p = path_round(c)
        print(f"circle of {len(c)} parts: {', '.join(c)}\n  round: {' -> '.join(p)}")
    for p in problems:
        print(p)
    if opts.dot:
        with open(opts.dot, "w") as out:
            out.write("digraph evmbpf {\n  rankdir=BT;\n")
            for (a, b) in sorted(arrows):
                color = ' [color=red]' if comp_of[a] == comp_of[b] else ""
                out.write(f'  "{a}" -> "{b}"{color};\n')
            out.write("}\n")
    if circles or problems:
        print(f"{len(circles)} circle(s), {len(problems)} size limit(s) passed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
