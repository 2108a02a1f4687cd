#!/usr/bin/env python3
"""Trace the same workloads with two evmbpf binaries and check that the traces are
byte-identical but for what must differ between two runs: `created`, timestamps, pids,
tids, the pid namespace, and durations. For changes that must not change behaviour
(moving code, speeding it up):

    scripts/same-traces.py OLD_EVMBPF NEW_EVMBPF [--chroots trixie,sid] [--pid]
                           [--tail N,...]

Workloads: the reference's, the tests' own that run_workload.py can run plainly, on the
host's Python, and (with --chroots) the same in each chroot built by scripts/chroot.sh.
--tail N,...: each workload traced once more per N with `--tail N` (0: as streamed, the
default), so that a change to what the tail keeps is compared too.
Exit 1 when any trace differs; the first differing line of each is printed.
"""
import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import evmbpf_testlib as lib  # noqa: E402

HOST_WORKLOADS = [os.path.join(lib.REF_WORKLOADS, w) for w in
                  ("tiny_transformer.py", "raises.py", "reentry.py", "phases.py")] + \
                 [os.path.join(lib.OWN_WORKLOADS, w) for w in
                  ("odd_values.py", "kv_cache.py", "phases_more.py")]
CHROOT_EXTRA = {"sid": ["hf_llama.py", "hf_gpt2.py"]}
VOLATILE = re.compile(r'"(created|ts_ns|pid|tid|ppid|target_pid|pid_namespace|'
                      r'target_pid_namespace|duration_s|wall_s|elapsed_s)": '
                      r'("[^"]*"|-?[0-9.e+-]+)')


def normalized(path):
    with open(path) as handle:
        return [VOLATILE.sub(lambda m: f'"{m.group(1)}": _', line) for line in handle]


def run(binary, target, workload, out, attach, tail):
    lib.EVMBPF = binary
    opts = ("--tail", str(tail)) if tail else ()
    if attach:
        a = target.attached(workload, out, evmbpf_args=opts)
        a.release()
        a.finish()
        return a.tracer_rc, a.tracer_err
    r = target.launch(workload, out, evmbpf_args=opts)
    return r.returncode, r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--chroots", default="", help="comma-separated chroot names")
    ap.add_argument("--pid", action="store_true", help="attach by --pid too")
    ap.add_argument("--tail", default="0", help="comma-separated --tail N (0: streamed)")
    args = ap.parse_args()

    cells = [(lib.MatrixTarget("host", lib.HOST_PYTHON), HOST_WORKLOADS)]
    for name in filter(None, args.chroots.split(",")):
        cells.append((lib.chroot_target(name), HOST_WORKLOADS[:4] + [
            os.path.join(lib.OWN_WORKLOADS, w) for w in CHROOT_EXTRA.get(name, [])]))
    modes = [False, True] if args.pid else [False]
    bad = total = 0
    with tempfile.TemporaryDirectory(prefix="evmbpf-same-") as tmp:
        for target, workloads in cells:
            target.with_outdir(tmp)
            for attach, tail, w in ((a, n, w) for a in modes
                                    for n in map(int, args.tail.split(",")) for w in workloads):
                traces = []
                for tag, binary in (("old", args.old), ("new", args.new)):
                    out = os.path.join(tmp, f"{target.name}-{tag}.jsonl")
                    if os.path.exists(out):
                        os.unlink(out)
                    rc, err = run(os.path.abspath(binary), target, w, out, attach, tail)
                    traces.append((rc, normalized(out) if os.path.exists(out) else None))
                total += 1
                label = f"{target.name} {'--pid' if attach else 'launch'} " \
                        f"{f'--tail {tail} ' if tail else ''}{os.path.basename(w)}"
                (rc_a, a), (rc_b, b) = traces
                if a is None or a != b or rc_a != rc_b:
                    bad += 1
                    first = next((i for i, (x, y) in enumerate(zip(a or [], b or []))
                                  if x != y), min(len(a or []), len(b or [])))
                    print(f"DIFFERENT {label}: exit {rc_a} vs {rc_b}, line {first + 1}:"
                          f"\n  old {(a or [''] * (first + 1))[first:first + 1]}"
                          f"\n  new {(b or [''] * (first + 1))[first:first + 1]}")
                else:
                    print(f"same      {label}: {len(a)} lines")
    print(f"{total - bad} of {total} traces identical")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
