#!/usr/bin/env python3
"""Where a module call's BPF time goes: the programs' run time per module call, stage by
stage, from profiling builds that each leave one stage out (bpf/ablate.bpf.h).

    sudo scripts/cost-breakdown.py [--workloads linear,llama-depth-2,...] [--repeat 3]
                                   [--iters N] [--evmbpf build/evmbpf] [--no-build]

Builds build-ablate-1 .. build-ablate-6 (make BUILD=build-ablate-N ABLATE=N) unless they
are there, then runs each workload (scripts/bench_workload.py, as scripts/bench.py runs
it: a fresh process per run, attached by --pid while it waits, the tracer and the target
pinned to two CPUs) once per build and per repeat, the builds interleaved, and reads the
programs' run time from kernel.bpf_stats_enabled (call_enter + call_exit, or the probe
floor's two empty programs, over the module calls the workload made). Printed per
workload: each build's median (and minimum) BPF ns a module call, and the stages as the
differences of the medians:

  floor        the empty uprobe + uretprobe programs (--probe-floor): the statistics'
               own clock reads, which every build pays too
  type         the probe's start (the process's slot), self's type read and judged, the
               return probe's look-up of its open calls (build 1 less the floor)
  open calls   the open-calls stack and the bound-call check (build 2 less build 1); of
               which the bound-call check (full less build 5) and its walks of the
               frames (full less build 6)
  records      two records with no description: the clock, the header, the ring
               buffer's reserve and commit of a small record (build 3 less build 2)
  describe     the description of args, kwargs and output (build 4 less build 3)
  output       the described bytes written to the ring buffer (full less build 4)

and the full build's record bytes a module call (its --stats).

--added: what the target pays instead, in one process: the workload iterates for minutes
(bench_workload.py --duration) while windows of W seconds take turns, untraced, under
the probe floor, under evmbpf, repeated; each window's thread CPU time per module call
(its progress lines, the seconds of the attach and detach left out). Windows in one
process compare the modes on the same heap, code placement and caches, which separate
runs (bench.py's) do not: there, run-to-run spread of the untraced workload alone is
several µs a call on llama-depth. Printed: µs added a call (median window against the
median untraced window) for the floor and evmbpf, and their ratio; --stopped adds evmbpf
with its collector stopped through the window (what the collector's own work beside the
target costs it); --base OLD adds a window of an earlier binary (a change's before and
after in the same process).

--pair A,B: two binaries (a change and its base) attached to the same process at once,
the order of attaching swapped each run: their BPF time a module call measured on the
same calls at the same moment, its difference with the order's own effect taken out.
The order matters because the kernel runs a probe's programs newest first (uprobes'
consumer list takes a new consumer at its head): the build attached second runs first
at each call and meets the target's memory and its own maps cold, the first finds the
lines warm. And only the first can seize the target: the second places its phase
markers' probe at once (no hold to wait for evalmetry.debug's import with), so its
marker program runs at the workload's `with` statements. Both are the same for either
build once the order is swapped, so they cancel in the difference; they make the
"order's own effect" (±550-860 ns a call on a PVM guest). Two configurations of one
binary that differ in what they share with the other (the ring's size, say) are not
measured this way: both rings are written at once, each evicting the other's lines.

The machine's noise moves
whole runs up or down together (10-20% from one minute to the next on a shared guest):
compare stages within one run of this script, not across runs. Benchmarks are not
tests: nothing here fails on a timing.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench  # noqa: E402  (its workload command, pinning and program statistics)

STAGES = {1: "after the type", 2: "no records", 3: "no description", 4: "no output",
          5: "no bound-call check", 6: "no frame walk"}
ITERS = {"linear": 1000, "small": 1000, "tiny": 200, "llama-depth-2": 300, "llama-depth-8": 100,
         "llama-depth-32": 30}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def ablate_build(n, rebuild):
    path = os.path.join(REPO, f"build-ablate-{n}", "evmbpf")
    if rebuild or not os.path.exists(path):
        log(f"building {path}")
        subprocess.run(["make", "-s", "-C", REPO, f"BUILD=build-ablate-{n}", f"ABLATE={n}",
                        f"build-ablate-{n}/evmbpf", "-j", str(os.cpu_count() or 2)],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def cpus():
    """The workload's CPU and the tracer's (the last and the first), None where one CPU."""
    return (os.cpu_count() - 1, 0) if os.cpu_count() >= 2 else (None, None)


def start_workload(wl, iters, extra=()):
    """A --sync workload pinned to its CPU, and its pid once it is ready."""
    work = subprocess.Popen(bench.pin(cpus()[0]) + bench.workload_cmd(wl, iters, 3, list(extra)),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = work.stdout.readline()
    if not line.startswith("{"):
        work.kill()
        work.wait()
        raise RuntimeError(f"{wl}: the workload did not start: {line!r}")
    return work, json.loads(line)["ready"]


def attach(cmd, err):
    """A tracer (cmd: evmbpf and its options) pinned to its CPU, once it has attached; its
    stderr goes to the file err."""
    with open(err, "w") as ef:
        tracer = subprocess.Popen(bench.pin(cpus()[1]) + cmd, stdout=ef, stderr=ef)
    if not bench.wait_for_text(err, r"attached to", tracer, 300):
        tracer.kill()
        tracer.wait()
        raise RuntimeError(f"{cmd[0]} did not attach: " + open(err).read()[-2000:])
    return tracer


def run_one(evmbpf, floor, wl, iters):
    """BPF ns a module call of one fresh run, and the trace's record bytes a call."""
    work, pid = start_workload(wl, iters)
    tracer = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            stats = os.path.join(tmp, "stats.json")
            cmd = [evmbpf, "--pid", str(pid), "--stats", stats]
            cmd += ["--probe-floor"] if floor else ["--out", os.path.join(tmp, "t.jsonl")]
            tracer = attach(cmd, os.path.join(tmp, "err"))
            before = bench.bpf_prog_stats(tracer.pid)
            r = bench.go_and_result(work, wl)
            after = bench.bpf_prog_stats(tracer.pid)
            work.stdin.write("exit\n")
            work.stdin.flush()
            work.wait(timeout=120)
            tracer.wait(timeout=120)
            tracer = None
            calls = r["calls_per_iter"] * r["iters"]
            ns = sum(v["run_time_ns"] - before.get(k, {}).get("run_time_ns", 0)
                     for k, v in after.items())
            if not ns:
                raise RuntimeError("no BPF run time: is kernel.bpf_stats_enabled on?")
            rec = None
            if not floor and os.path.exists(stats):
                with open(stats) as f:
                    st = json.load(f)
                # the records of the warm-up and the timed loop: a call's share
                done = r["calls_per_iter"] * (r["iters"] + r.get("warmup", 0))
                rec = st.get("record_bytes", 0) / done if done else None
            return ns / calls, rec
        finally:
            if tracer:
                tracer.kill()
                tracer.wait()
            if work.poll() is None:
                work.kill()
                work.wait()


def windows(evmbpf, wl, window, cycles, stopped=False, base=None):
    """--added: thread CPU µs a module call in alternating windows of one process."""
    # the module calls an iteration makes: one untraced iteration's own count
    probe = subprocess.run([a for a in bench.workload_cmd(wl, 1, 0, []) if a != "--sync"],
                           capture_output=True, text=True, timeout=600)
    calls = json.loads(probe.stdout.strip().splitlines()[-1])["calls_per_iter"]
    modes = ["plain", "floor", "evmbpf"] + (["stopped"] if stopped else []) + \
        (["base"] if base else [])
    duration = cycles * len(modes) * (window + 15) + 60
    work, pid = start_workload(wl, 1, ["--duration", str(duration)])
    got = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            work.stdin.write("go\n")
            work.stdin.flush()

            def progress():
                line = work.stdout.readline()
                if not line:
                    raise RuntimeError(f"{wl}: the workload ended early")
                return json.loads(line)

            progress()
            for cycle in range(cycles):
                for mode in modes:
                    tracer = None
                    if mode != "plain":
                        err = os.path.join(tmp, "err")
                        cmd = [base if mode == "base" else evmbpf, "--pid", str(pid)]
                        cmd += (["--probe-floor"] if mode == "floor"
                                else ["--out", os.path.join(tmp, "t.jsonl")])
                        if mode == "stopped":  # a ring that holds the whole window
                            cmd += ["--ringbuf-mb", "512"]
                        tracer = attach(cmd, err)
                    progress()  # the second the attach fell in
                    if mode == "stopped":
                        os.kill(tracer.pid, signal.SIGSTOP)
                    a = progress()
                    for _ in range(window):
                        b = progress()
                    if b["iters"] > a["iters"]:
                        us = (b["cpu"] - a["cpu"]) / (b["iters"] - a["iters"]) / calls * 1e6
                        got[mode].append(us)
                        log(f"{wl} cycle {cycle} {mode}: {us:.3f} µs a call")
                    if tracer:
                        if mode == "stopped":
                            os.kill(tracer.pid, signal.SIGCONT)
                        tracer.send_signal(signal.SIGINT)
                        tracer.wait(timeout=120)
                        progress()  # the detach's second
                        if os.path.exists(os.path.join(tmp, "t.jsonl")):
                            os.unlink(os.path.join(tmp, "t.jsonl"))
        finally:
            work.kill()
            work.wait()
    plain = statistics.median(got["plain"])
    res = {m: statistics.median(v) - plain for m, v in got.items() if m != "plain"}
    print(f"\n== {wl}: the target's thread CPU a module call, {cycles} windows of {window} s "
          f"each mode, in one process")
    print(f"  untraced {plain:.3f} µs a call (windows {', '.join(f'{x:.3f}' for x in got['plain'])})")
    for m in [m for m in modes if m != "plain"]:
        print(f"  {m:8} adds {res[m]:6.3f} µs a call (windows "
              f"{', '.join(f'{x - plain:.3f}' for x in got[m])})")
    if res["floor"] > 0:
        for m in [m for m in modes if m not in ("plain", "floor")]:
            print(f"  {m} / floor: {res[m] / res['floor']:.2f}")
    return {"windows": got, "added": res}


def paired(a, b, wl, iters, repeat):
    """--pair A,B: both builds attached to the same process at once, each program's run
    time per module call; the order of attaching (which moves a build by a few hundred
    ns on this guest) swapped each run and taken out of the difference."""
    diffs = {True: [], False: []}  # A - B, by whether A was attached first
    for rep in range(repeat):
        a_first = rep % 2 == 0
        order = [a, b] if a_first else [b, a]
        work, pid = start_workload(wl, iters)
        tracers = []
        with tempfile.TemporaryDirectory() as tmp:
            try:
                for n, evm in enumerate(order):
                    tracers.append(attach([evm, "--pid", str(pid), "--out",
                                           os.path.join(tmp, f"t{n}.jsonl")],
                                          os.path.join(tmp, f"err{n}")))
                before = [bench.bpf_prog_stats(t.pid) for t in tracers]
                r = bench.go_and_result(work, wl)
                after = [bench.bpf_prog_stats(t.pid) for t in tracers]
                calls = r["calls_per_iter"] * r["iters"]
                progs = [{k: (v["run_time_ns"] - bf.get(k, {}).get("run_time_ns", 0)) / calls
                          for k, v in af.items()} for bf, af in zip(before, after)]
                ns = [sum(p.values()) for p in progs]
                work.stdin.write("exit\n")
                work.stdin.flush()
                work.wait(timeout=120)
                for t in tracers:
                    t.wait(timeout=120)
                sizes = [os.path.getsize(os.path.join(tmp, f"t{n}.jsonl")) for n in (0, 1)]
            finally:
                for t in tracers:
                    if t.poll() is None:
                        t.kill()
                        t.wait()
                if work.poll() is None:
                    work.kill()
                    work.wait()
        na, nb = (ns[0], ns[1]) if a_first else (ns[1], ns[0])
        pa, pb = (progs[0], progs[1]) if a_first else (progs[1], progs[0])
        diffs[a_first].append(na - nb)
        each = lambda p: ", ".join(f"{k} {v:.0f}" for k, v in sorted(p.items()))  # noqa: E731
        log(f"{wl} run {rep}: {'A' if a_first else 'B'} attached first; A {na:.0f} ({each(pa)}), "
            f"B {nb:.0f} ({each(pb)}) BPF ns a module call; trace bytes {sizes[0]} and "
            f"{sizes[1]}")
    if not diffs[True] or not diffs[False]:
        sys.exit("--pair: --repeat 2 at least (each order once)")
    first, second = statistics.mean(diffs[True]), statistics.mean(diffs[False])
    print(f"\n== {wl}: {iters} iterations, {repeat} runs, A = {a}, B = {b}")
    print(f"  A - B, BPF ns a module call: {(first + second) / 2:.0f} (A attached first: "
          f"{first:.0f}, B first: {second:.0f}; the order's own effect "
          f"{abs(first - second) / 2:.0f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="linear,llama-depth-2,llama-depth-8,llama-depth-32")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--iters", type=int, help="iterations a run (default per workload)")
    ap.add_argument("--evmbpf", default=os.path.join(REPO, "build", "evmbpf"),
                    help="the full build (default build/evmbpf)")
    ap.add_argument("--no-build", action="store_true",
                    help="use the build-ablate-N binaries as they are")
    ap.add_argument("--rebuild", action="store_true", help="make the build-ablate-N again")
    ap.add_argument("--out", help="write the runs as JSON here too")
    ap.add_argument("--pair", metavar="A,B",
                    help="two evmbpf binaries attached to the same processes at once: "
                    "their BPF time's difference, the attach order swapped each run")
    ap.add_argument("--added", action="store_true",
                    help="the target's time instead: alternating windows in one process")
    ap.add_argument("--window", type=int, default=8, help="--added: seconds a window")
    ap.add_argument("--cycles", type=int, default=3, help="--added: windows a mode")
    ap.add_argument("--base", help="--added: an earlier binary, a window of its own (mode "
                    "`base`), for a before and after in the same process")
    ap.add_argument("--stopped", action="store_true",
                    help="--added: a fourth mode, evmbpf with its collector stopped (SIGSTOP) "
                    "through the window and a 512 MiB ring: the programs' cost without the "
                    "collector's work beside the target")
    opts = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("cost-breakdown.py: run it as root (it loads BPF programs)")
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        stats_was = f.read().strip()
    # every mode reads the programs' run time (--pair's too; --added's windows ignore it)
    subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=True)
    try:
        run_modes(opts)
    finally:
        subprocess.run(["sysctl", "-qw", f"kernel.bpf_stats_enabled={stats_was}"])


def run_modes(opts):
    if opts.pair:
        a, b = opts.pair.split(",")
        for wl in opts.workloads.split(","):
            paired(a, b, wl, opts.iters or ITERS.get(wl, 200), opts.repeat)
        return
    if opts.added:
        results = {wl: windows(opts.evmbpf, wl, opts.window, opts.cycles, opts.stopped,
                               opts.base)
                   for wl in opts.workloads.split(",")}
        if opts.out:
            with open(opts.out, "w") as f:
                json.dump(results, f, indent=1)
        return
    builds = {"floor": opts.evmbpf, "full": opts.evmbpf}
    for n in STAGES:
        builds[n] = (os.path.join(REPO, f"build-ablate-{n}", "evmbpf") if opts.no_build
                     else ablate_build(n, opts.rebuild))
    order = ["floor", 1, 2, 3, 4, "full", 5, 6]
    results = {}
    for wl in opts.workloads.split(","):
        iters = opts.iters or ITERS.get(wl, 200)
        runs = {b: [] for b in order}
        recs = []
        for rep in range(opts.repeat):
            for b in order:
                ns, rec = run_one(builds[b], b == "floor", wl, iters)
                runs[b].append(ns)
                if b == "full" and rec:
                    recs.append(rec)
                log(f"rep {rep} {wl} {b}: {ns:.0f} BPF ns a module call")
        results[wl] = {"runs": {str(k): v for k, v in runs.items()},
                       "record_bytes_per_call": statistics.median(recs) if recs else None}
        report(wl, iters, opts.repeat, runs, recs)
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(results, f, indent=1)


def report(wl, iters, repeat, runs, recs):
    med = {b: statistics.median(v) for b, v in runs.items()}
    print(f"\n== {wl}: {iters} iterations a run, {repeat} runs a build, BPF ns a module call "
          f"(entry + exit), median (min)")
    for b, v in runs.items():
        name = "full build" if b == "full" else "probe floor" if b == "floor" else \
            f"ablate {b}: {STAGES[b]}"
        print(f"  {name:34} {med[b]:7.0f} ({min(v):7.0f})")
    rows = [("floor: the empty programs", med["floor"]),
            ("type: slot, self's type, its verdict", med[1] - med["floor"]),
            ("open calls and bound-call check", med[2] - med[1]),
            ("  of which the bound-call check", med["full"] - med[5]),
            ("  of which its frame walks", med["full"] - med[6]),
            ("records: two, empty", med[3] - med[2]),
            ("describe", med[4] - med[3]),
            ("output: the described bytes", med["full"] - med[4])]
    print(f"  stages (differences of the medians; the full build: {med['full']:.0f} ns):")
    for name, v in rows:
        print(f"    {name:38} {v:7.0f} ns  {100 * v / med['full']:5.1f}%")
    if recs:
        print(f"  record bytes a module call (full build): {statistics.median(recs):.0f}")


if __name__ == "__main__":
    main()
