#!/usr/bin/env python3
"""Check that the Makefile's -MMD -MP dependencies are right: touching any header
rebuilds exactly the objects that include it, directly or through other headers.

What should be rebuilt is worked out here, independently of the compiler's .d files,
from the sources' own `#include "..."` lines and each folder's include path (the
Makefile's INCS); what would be rebuilt is asked of make itself (`make -n -W HEADER`,
which pretends HEADER changed and touches nothing). Run after a build:

    make check-deps
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = "build"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# Where `#include "x.h"` looks, per source folder (the Makefile's INCS and flags).
SEARCH = {
    "user/common": ["user/common", "include"],
    "user/readers": ["user/readers", "user/common", "include"],
    "user/collector": ["user/collector", "user/common", "include", BUILD],
    "user": ["user", "user/common", "user/collector", "user/readers", "include", BUILD],
    "bpf": ["bpf", "include", "vmlinux/x86", BUILD],
}


COLLECTOR_DIRS = sorted({os.path.dirname(p) for p in
                         glob.glob(os.path.join(ROOT, "user/collector/*/*.c"))})
COLLECTOR_DIRS = ["user/collector"] + [os.path.relpath(d, ROOT) for d in COLLECTOR_DIRS]
SEARCH["user/collector"] = COLLECTOR_DIRS + ["user/common", "include", BUILD]
SEARCH["user"] = ["user", "user/common"] + COLLECTOR_DIRS + ["user/readers", "include", BUILD]


def search_path(src):
    folder = os.path.dirname(src)
    return SEARCH["user/collector" if folder.startswith("user/collector") else folder]


def includes(path, dirs):
    """The headers of this project that `path` includes, resolved like the compiler:
    the including file's folder first, then the search path."""
    with open(os.path.join(ROOT, path)) as f:
        names = INCLUDE_RE.findall(f.read())
    found = []
    for name in names:
        for d in [os.path.dirname(path)] + dirs:
            cand = os.path.normpath(os.path.join(d, name))
            if os.path.exists(os.path.join(ROOT, cand)):
                found.append(cand)
                break
    return found


def closure(src):
    dirs = search_path(src)
    seen, todo = set(), [src]
    while todo:
        for h in includes(todo.pop(), dirs):
            if h not in seen and not h.startswith(BUILD + "/") and not h.startswith("vmlinux/"):
                seen.add(h)
                todo.append(h)
    return seen


def main():
    os.chdir(ROOT)
    user_srcs = sorted(glob.glob("user/*.c") + glob.glob("user/*/*.c") + glob.glob("user/*/*/*.c"))
    bpf_srcs = sorted(glob.glob("bpf/*.bpf.c"))
    objs = {s: f"{BUILD}/user/{s[len('user/'):-2]}.o" for s in user_srcs}
    # the collector and main.c also depend on every skeleton (tracer.h includes them)
    skel_users = {o for s, o in objs.items()
                  if s.startswith("user/collector/") or s == "user/main.c"}
    deps = {objs[s]: closure(s) for s in user_srcs}
    bpf_deps = {f"{BUILD}/{os.path.basename(s)[:-2]}.o": closure(s) for s in bpf_srcs}

    headers = sorted(set().union(*deps.values(), *bpf_deps.values()))
    failures = []
    for h in headers:
        expect = {o for o, d in deps.items() if h in d}
        expect |= {o for o, d in bpf_deps.items() if h in d}
        if any(h in d for d in bpf_deps.values()):
            expect |= skel_users
        out = subprocess.run(["make", "-n", "V=1", "-W", h, f"{BUILD}/evmbpf"],
                             capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"check-deps: make -n -W {h} failed:\n{out.stderr}")
        rebuilt = set(re.findall(r"-o (\S+\.o)\b", out.stdout))
        if rebuilt != expect:
            failures.append(f"{h}: make rebuilds {sorted(rebuilt - expect)} too many, "
                            f"misses {sorted(expect - rebuilt)}")
    for f in failures:
        print("check-deps:", f, file=sys.stderr)
    print(f"check-deps: {len(headers)} headers, {len(headers) - len(failures)} rebuild "
          f"exactly their includers")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
