#!/usr/bin/env python3
"""evmbpf's overhead, side by side (make bench; BENCH_ARGS="..." passes options).

For each workload, interleaved and repeated (plain, floor, evmbpf, tail, reference,
plain, ...), on the same Python (the host's /usr/bin/python3.11 + torch 1.13; llama in the
sid chroot; llama-depth: an HF LlamaModel at 2, 8 and 32 decoder layers, `model(ids)` with its
DynamicCache, in the sid chroot, skipped when it is not built), each run a fresh process timing N iterations inside itself
(scripts/bench_workload.py: after build and warm-up, time.perf_counter):

  plain      untraced
  floor      evmbpf --probe-floor: an empty uprobe + uretprobe pair on slot_tp_call,
             the least the kernel charges to see every module call and its return
  entry      evmbpf --probe-floor=entry: the empty uprobe alone (what one trap costs on
             this machine; floor - entry is the uretprobe's)
  vectorcall evmbpf --probe-floor=at:ADDR: an empty uprobe on CPython's method_vectorcall
             (a bound method called through CALL_FUNCTION_EX: torch >= 2.1 does it twice
             per module call, 1.x once), what following bound calls with a probe there
             would cost every module call on a machine without debug registers
  evmbpf     evmbpf --pid PID --out FILE (default options: streaming)
  tail       evmbpf --tail N
  reference  the reference in-process tracer (../shared/reference, evalmetry.debug)
  numeric    evmbpf --numeric: stats of every CPU tensor (those of at most 64 KiB read by
             the probe, larger ones while their thread is held)
  numeric_held  the same with every tensor read while its thread is held
             (EVMBPF_NUMERIC_PROBE_BYTES=0: the cost of one hold per call with tensors)
  reference_numeric  the reference with numeric=True (its temporaries in the target)
  base       evmbpf --pid as `evmbpf`, with the binary --evmbpf-base names (an earlier
             build: before and after, interleaved in one run; only with --evmbpf-base)

Tracers attach by pid while the workload waits after building its model. Printed per
workload: µs added per module call (median over repeats, against plain's median), the
ratios evmbpf/floor and reference/evmbpf, the same from the fastest iterations in the
target thread's CPU time (each run's 10th percentile iteration, the fastest run's, with
the spread over runs: the probes' traps and programs run on that thread, and the time a
loaded machine makes it wait for a CPU is not counted), events per second in the timed loop, records
dropped (BPF counter, and the trace's `dropped` event), the collector's CPU time and
peak RSS (wait4 rusage of the evmbpf process), and the BPF programs' own run time per
run (kernel.bpf_stats_enabled=1; bpftool prog show run_time_ns / run_cnt), and the two
programs' run time per module call (BPF ns/call, from the fastest run), and the phase
markers' program's runs per module call (each workload imports evalmetry.debug, as a host
that marks phases outside its forwards does: --import-debug; none on the llama ones).

Results go to bench-results/bench-YYYYmmddTHHMMSSZ.json; --compare FILE prints the
change against an earlier results file. --soak S adds a streaming run and a --tail run of
S seconds on the small workload, sampling the collector's RSS (memory flat, bounded).
--drop-check stops the collector for a moment while the target runs flat out with a 1
MiB ring buffer, and checks that the trace's `dropped` event counts what was lost.
Benchmarks are not tests: nothing here fails on a timing.
"""
import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVMBPF = os.path.join(REPO, "build", "evmbpf")
WORKLOAD = os.path.join(REPO, "scripts", "bench_workload.py")
HOST_PYTHON = "/usr/bin/python3.11"
PROG_NAMES = {"call_enter", "call_exit", "floor_enter", "floor_exit"}
# the phase markers' probe (one of them is loaded, per Python): its runs per module call
MARKER_PROGS = {"marker_enter", "marker_enter_ident", "marker_enter_stackref"}
MODES = ["plain", "floor", "entry", "evmbpf", "tail", "reference", "numeric", "numeric_held",
         "reference_numeric"]
ALL_MODES = MODES + ["base", "entry", "vectorcall"]
FLOORS = ("floor", "entry", "vectorcall")
EVMBPF_BASE = None
# iterations per run (timed), warm-up iterations
ITERS = {"big": (20, 2), "small": (1500, 50), "linear": (1000, 20), "tiny": (400, 10), "llama": (30, 2),
         "llama-depth-2": (150, 5), "llama-depth-8": (50, 3), "llama-depth-32": (15, 2)}
# llama-depth: an HF LlamaModel at these depths (decoder layers), each its own workload
LLAMA_DEPTHS = (2, 8, 32)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def chroot_dir(name):
    try:
        out = subprocess.run([os.path.join(REPO, "scripts", "chroot.sh"), "path", name],
                             capture_output=True, text=True, timeout=30)
        d = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return d if d and os.path.exists(os.path.join(d, "usr", "bin", "python3")) else None


def workload_cmd(wl, iters, warmup, extra):
    args = [wl, "--iters", str(iters), "--warmup", str(warmup), "--sync"] + extra
    if wl.startswith("llama-depth-"):
        args = ["llama-depth", "--layers", wl.rsplit("-", 1)[1]] + args[1:]
    if wl.startswith("llama"):
        return [os.path.join(REPO, "scripts", "chroot.sh"), "run", "sid", "python3",
                "/evmbpf/main/scripts/bench_workload.py"] + args
    return [HOST_PYTHON, WORKLOAD] + args


def pin(cpu):
    return ["taskset", "-c", str(cpu)] if cpu is not None else []


def bpf_prog_stats(pid):
    """run_time_ns / run_cnt of the programs the process holds (its fds' fdinfo),
    named through bpftool (needs kernel.bpf_stats_enabled=1 for the times)."""
    ids = {}
    fddir = f"/proc/{pid}/fdinfo"
    try:
        fds = os.listdir(fddir)
    except OSError:
        return {}
    for fd in fds:
        try:
            with open(os.path.join(fddir, fd)) as f:
                info = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
        except OSError:
            continue
        if "prog_id" in info and "run_cnt" in info:
            ids[int(info["prog_id"])] = (int(info["run_time_ns"]), int(info["run_cnt"]))
    try:
        out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True,
                             text=True, timeout=30).stdout
        names = {p["id"]: p.get("name") for p in json.loads(out or "[]")}
    except (OSError, subprocess.SubprocessError, ValueError):
        names = {}
    res = {}
    for pid_, (ns, cnt) in ids.items():
        name = names.get(pid_)
        if name in PROG_NAMES or name in MARKER_PROGS:
            res[name] = {"run_cnt": cnt, "run_time_ns": ns,
                         "ns_per_run": ns / cnt if cnt else None}
    return res


def go_and_result(work, wl=""):
    """Let a --sync workload go, and read its lines up to the result (its "secs" line)."""
    work.stdin.write("go\n")
    work.stdin.flush()
    while True:
        line = work.stdout.readline()
        if not line:
            raise RuntimeError(f"{wl}: the workload ended without a result")
        r = json.loads(line)
        if "secs" in r:
            return r


def wait_for_text(path, pattern, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, errors="replace") as f:
                if re.search(pattern, f.read()):
                    return True
        except OSError:
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def trace_tail_events(path, whole=False):
    """The ring buffer's `dropped` events among the last lines of a trace (whole: all)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            start = 0 if whole else max(0, size - 65536)
            f.seek(start)
            lines = f.read().decode(errors="replace").splitlines()[1 if start else 0:]
    except OSError:
        return None
    dropped = []
    for line in lines:
        if '"event": "dropped"' in line and '"where": "ring buffer"' in line:
            try:
                dropped.append(json.loads(line))
            except ValueError:
                pass
    return dropped


def run_one(wl, mode, tmp, opts, stop_collector=None, ringbuf_mb=None, duration=None,
            sample_rss=False, scan_trace=False):
    iters, warmup = ITERS[wl]
    if opts.iters:
        iters = opts.iters
    # every mode's host imports evalmetry.debug, as a host that marks phases outside its
    # forwards: evmbpf's phase markers' probe is placed, and its runs counted
    extra = [] if wl.startswith("llama") else ["--import-debug"]
    trace = os.path.join(tmp, f"{wl}-{mode}.jsonl")
    if os.path.exists(trace):
        os.unlink(trace)
    if mode in ("reference", "reference_numeric"):
        extra += ["--reference-trace", trace]
    if mode == "reference_numeric":
        extra.append("--numeric")
    if duration:
        extra += ["--duration", str(duration)]
    wcpu, ccpu = (None, None)
    if opts.pin and os.cpu_count() >= 2:
        wcpu, ccpu = os.cpu_count() - 1, 0
    work = subprocess.Popen(pin(wcpu) + workload_cmd(wl, iters, warmup, extra),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    res = {"workload": wl, "mode": mode}
    tracer = None
    try:
        line = work.stdout.readline()
        if not line.startswith("{"):
            raise RuntimeError(f"workload did not start: {line!r}")
        ready = json.loads(line)
        pid = ready["ready"]
        if mode in FLOORS + ("evmbpf", "base", "tail", "numeric", "numeric_held"):
            stats = os.path.join(tmp, "stats.json")
            err = os.path.join(tmp, "evmbpf.err")
            for p in (stats,):
                if os.path.exists(p):
                    os.unlink(p)
            cmd = [EVMBPF_BASE if mode == "base" else EVMBPF, "--pid", str(pid), "--stats", stats]
            if mode == "floor":
                cmd.append("--probe-floor")
            elif mode == "entry":
                cmd.append("--probe-floor=entry")
            elif mode == "vectorcall":
                cmd.append(f"--probe-floor=at:{ready['method_vectorcall']:#x}")
            else:
                cmd += ["--out", trace]
            if mode == "tail":
                cmd += ["--tail", str(opts.tail)]
            if mode in ("numeric", "numeric_held"):
                cmd.append("--numeric")
            env = dict(os.environ)
            if mode == "numeric_held":
                env["EVMBPF_NUMERIC_PROBE_BYTES"] = "0"
            if ringbuf_mb:
                cmd += ["--ringbuf-mb", str(ringbuf_mb)]
            with open(err, "w") as ef:
                tracer = subprocess.Popen(pin(ccpu) + cmd, stdout=ef, stderr=ef, env=env)
            if not wait_for_text(err, r"attached to", tracer, 300):
                raise RuntimeError("evmbpf did not attach: " + open(err).read()[-2000:])
        work.stdin.write("go\n")
        work.stdin.flush()
        rss = []
        if stop_collector:
            time.sleep(stop_collector[0])
            os.kill(tracer.pid, signal.SIGSTOP)
            time.sleep(stop_collector[1])
            os.kill(tracer.pid, signal.SIGCONT)
        while True:
            line = work.stdout.readline()
            if not line:
                raise RuntimeError("workload ended without a result")
            r = json.loads(line)
            if "secs" in r:
                break
            if sample_rss and tracer:
                r["collector_rss_kb"] = proc_rss(tracer.pid)
                rss.append(r)
        res.update(r)
        if rss:
            res["rss_samples"] = rss
        if tracer:
            res["bpf"] = bpf_prog_stats(tracer.pid)
        work.stdin.write("exit\n")
        work.stdin.flush()
        work.wait(timeout=120)
        if tracer:
            deadline = time.monotonic() + 120
            while True:
                wpid, status, ru = os.wait4(tracer.pid, os.WNOHANG)
                if wpid:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("evmbpf did not end after its target")
                time.sleep(0.02)
            tracer.returncode = status
            res["collector"] = {"cpu_s": ru.ru_utime + ru.ru_stime, "utime_s": ru.ru_utime,
                                "stime_s": ru.ru_stime, "maxrss_kb": ru.ru_maxrss,
                                "status": status}
            try:
                with open(stats) as f:
                    res["stats"] = json.load(f)
                # CPU after attaching: collecting, not loading (verifying) the programs
                res["collector"]["collect_cpu_s"] = (res["collector"]["cpu_s"]
                                                     - res["stats"].get("attach_cpu_s", 0))
            except (OSError, ValueError):
                res["stats"] = None
            if mode not in FLOORS:
                res["trace_dropped"] = trace_tail_events(trace, whole=scan_trace)
                res["trace_bytes"] = os.path.getsize(trace) if os.path.exists(trace) else 0
    finally:
        for p in (work, tracer):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        if os.path.exists(trace):
            os.unlink(trace)
    return res


def proc_rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def bpf_ns_per_module_call(r, calls_per_run):
    """The entry and exit programs' run time in one run over the module calls made while
    they were attached (warm-up, timed loop, the counting iteration): from the trace's
    events (an enter and an exit each) when traced, else from the iterations."""
    bpf = r.get("bpf") or {}
    ns = sum(bpf.get(p, {}).get("run_time_ns", 0) for p in PROG_NAMES)
    if not ns:
        return None
    ev = (r.get("stats") or {}).get("events")
    if ev:
        calls = ev / 2
    else:
        calls = (r["iters"] + r.get("warmup", 0) + 1) * r["calls_per_iter"]
    return ns / calls if calls else None


def marker_runs_per_module_call(r, calls_per_run):
    """The phase markers' program's runs in one run over its module calls (counted as
    bpf_ns_per_module_call counts them); None when no marker program was loaded."""
    bpf = r.get("bpf") or {}
    runs = [bpf[p]["run_cnt"] for p in MARKER_PROGS if p in bpf]
    if not runs:
        return None
    ev = (r.get("stats") or {}).get("events")
    calls = ev / 2 if ev else (r["iters"] + r.get("warmup", 0) + 1) * r["calls_per_iter"]
    return sum(runs) / calls if calls else None


def summarize(runs):
    """Per workload and mode: medians, and µs added per module call against plain."""
    out = {}
    for wl in dict.fromkeys(r["workload"] for r in runs):
        rs = [r for r in runs if r["workload"] == wl and "secs" in r]
        if not rs:
            continue
        calls = rs[0]["iters"] * rs[0]["calls_per_iter"]
        s = {"calls_per_run": calls, "calls_per_iter": rs[0]["calls_per_iter"],
             "python": rs[0].get("python"), "torch": rs[0].get("torch"), "modes": {}}
        for mode in ALL_MODES:
            m = [r for r in rs if r["mode"] == mode]
            if not m:
                continue
            secs = med([r["secs"] for r in m])
            d = {"runs": len(m), "secs_median": secs, "secs_min": min(r["secs"] for r in m),
                 "us_per_call": secs / calls * 1e6,
                 "target_peak_rss_kb": med([r.get("peak_rss_kb") for r in m])}
            if mode not in ("plain", "reference", "reference_numeric"):
                d["collector_cpu_s"] = med([r["collector"]["cpu_s"] for r in m])
                d["collector_collect_cpu_s"] = med([r["collector"].get("collect_cpu_s") for r in m])
                d["collector_maxrss_kb"] = max(r["collector"]["maxrss_kb"] for r in m)
                for prog in PROG_NAMES:
                    v = med([r["bpf"].get(prog, {}).get("ns_per_run") for r in m])
                    if v is not None:
                        d[f"bpf_ns_{prog}"] = v
                # both programs' run time per module call (they also run, and return
                # early, at the other calls through slot_tp_call); the fastest run
                markers = [marker_runs_per_module_call(r, calls) for r in m]
                markers = [x for x in markers if x is not None]
                if markers:
                    d["marker_runs_per_call"] = med(markers)
                per_call = [bpf_ns_per_module_call(r, calls) for r in m]
                per_call = [x for x in per_call if x is not None]
                if per_call:
                    d["bpf_ns_per_module_call"] = min(per_call)
            p10 = [r["iter_cpu_p10"] for r in m if r.get("iter_cpu_p10") is not None]
            if p10:
                per = 1e6 / rs[0]["calls_per_iter"]
                d["fast_us_per_call"] = min(p10) * per
                d["fast_spread_us"] = (max(p10) - min(p10)) * per
            if mode in ("evmbpf", "base", "tail", "numeric", "numeric_held"):
                st = [r["stats"] for r in m if r.get("stats")]
                if mode.startswith("numeric"):
                    d["holds_per_call"] = med([x.get("holds", 0) / calls for x in st])
                    d["probe_reads_per_call"] = med([x.get("tensor_bytes", 0) / calls for x in st])
                d["dropped_records"] = sum(x["dropped_records"] for x in st)
                d["events_median"] = med([x["events"] for x in st])
                d["trace_dropped_events"] = sum(
                    e.get("count", 0) for r in m for e in (r.get("trace_dropped") or []))
                d["events_per_s"] = 2 * calls / secs
                d["collector_us_per_event"] = (d["collector_collect_cpu_s"] * 1e6 / d["events_median"]
                                               if d["events_median"] else None)
            s["modes"][mode] = d
        plain = s["modes"].get("plain")
        if plain:
            for mode, d in s["modes"].items():
                if mode != "plain":
                    d["us_added_per_call"] = (d["secs_median"] - plain["secs_median"]) / calls * 1e6
                    d["us_added_per_call_min"] = (d["secs_min"] - plain["secs_min"]) / calls * 1e6
                    if "fast_us_per_call" in d and "fast_us_per_call" in plain:
                        d["fast_us_added"] = d["fast_us_per_call"] - plain["fast_us_per_call"]
        M = s["modes"]

        def ratio(a, b):
            if a in M and b in M and M[b].get("us_added_per_call"):
                return M[a]["us_added_per_call"] / M[b]["us_added_per_call"]
            return None
        def ratio_min(a, b):
            if a in M and b in M and M[b].get("us_added_per_call_min"):
                return M[a]["us_added_per_call_min"] / M[b]["us_added_per_call_min"]
            return None
        s["ratio_evmbpf_floor_min"] = ratio_min("evmbpf", "floor")
        s["ratio_tail_floor_min"] = ratio_min("tail", "floor")
        s["ratio_reference_evmbpf_min"] = ratio_min("reference", "evmbpf")
        s["ratio_evmbpf_floor"] = ratio("evmbpf", "floor")
        s["ratio_tail_floor"] = ratio("tail", "floor")
        s["ratio_reference_evmbpf"] = ratio("reference", "evmbpf")

        def ratio_fast(a, b):
            if a in M and b in M and M[b].get("fast_us_added"):
                return M[a].get("fast_us_added", 0) / M[b]["fast_us_added"]
            return None
        s["ratio_evmbpf_floor_fast"] = ratio_fast("evmbpf", "floor")
        s["ratio_base_floor_fast"] = ratio_fast("base", "floor")
        s["ratio_reference_evmbpf_fast"] = ratio_fast("reference", "evmbpf")
        s["ratio_reference_base_fast"] = ratio_fast("reference", "base")
        out[wl] = s
    return out


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def print_summary(summary, prev=None):
    for wl, s in summary.items():
        print(f"\n== {wl}: {s['calls_per_iter']} module calls per iteration, "
              f"{s['calls_per_run']} per run (python {s['python']}, torch {s['torch']})")
        print(f"{'mode':17} {'runs':>4} {'µs/call':>8} {'µs added':>9} {'(min)':>7} "
              f"{'events/s':>10} {'dropped':>8} {'coll.cpu s':>10} {'collect':>7} {'µs/event':>8} "
              f"{'RSS MiB':>8} {'BPF ns enter/exit':>18} {'BPF ns/call':>11} {'target peak RSS MiB':>20}")
        for mode, d in s["modes"].items():
            enter = d.get("bpf_ns_call_enter", d.get("bpf_ns_floor_enter"))
            exit_ = d.get("bpf_ns_call_exit", d.get("bpf_ns_floor_exit"))
            dropped = d.get("dropped_records")
            if dropped is not None:
                dropped = f"{dropped}/{d['trace_dropped_events']}"
            print(f"{mode:17} {d['runs']:>4} {fmt(d['us_per_call']):>8} "
                  f"{fmt(d.get('us_added_per_call')):>9} {fmt(d.get('us_added_per_call_min')):>7} "
                  f"{fmt(d.get('events_per_s'), '.0f'):>10} {dropped or '-':>8} "
                  f"{fmt(d.get('collector_cpu_s')):>10} {fmt(d.get('collector_collect_cpu_s')):>7} "
                  f"{fmt(d.get('collector_us_per_event')):>8} "
                  f"{fmt(d['collector_maxrss_kb'] / 1024 if 'collector_maxrss_kb' in d else None, '.1f'):>8} "
                  f"{fmt(enter, '.0f'):>8} / {fmt(exit_, '.0f'):<8} "
                  f"{fmt(d.get('bpf_ns_per_module_call'), '.0f'):>11} "
                  f"{fmt(d['target_peak_rss_kb'] / 1024 if d.get('target_peak_rss_kb') else None, '.1f'):>20}")
        print(f"ratios: evmbpf/floor {fmt(s['ratio_evmbpf_floor'])}, tail/floor "
              f"{fmt(s['ratio_tail_floor'])}, reference/evmbpf {fmt(s['ratio_reference_evmbpf'], '.1f')} "
              f"(medians); from the fastest runs: {fmt(s['ratio_evmbpf_floor_min'])}, "
              f"{fmt(s['ratio_tail_floor_min'])}, {fmt(s['ratio_reference_evmbpf_min'], '.1f')}")
        marker = [f"{mode} {fmt(d['marker_runs_per_call'], '.3f')}"
                  for mode, d in s["modes"].items() if "marker_runs_per_call" in d]
        print("phase markers' program, runs per module call (evalmetry.debug imported, no "
              "phase inside forwards): " + (", ".join(marker) or "- (not loaded)"))
        M = s["modes"]
        if "entry" in M or "vectorcall" in M:
            def added(mode, key):
                return M.get(mode, {}).get(key)

            def minus(a, b):
                return a - b if a is not None and b is not None else None
            traps = []
            for key, what in (("us_added_per_call", "medians"),
                              ("fast_us_added", "fastest iterations")):
                traps.append(f"uprobe {fmt(added('entry', key))}, uretprobe "
                             f"{fmt(minus(added('floor', key), added('entry', key)))}, "
                             f"an empty uprobe on method_vectorcall "
                             f"{fmt(added('vectorcall', key))} ({what})")
            print("what this machine charges per module call, µs: " + "; ".join(traps))
        fast = [f"{mode} {fmt(d['fast_us_added'])} (±{fmt(d.get('fast_spread_us'))})"
                for mode, d in s["modes"].items() if d.get("fast_us_added") is not None]
        if fast:
            print(f"fastest iterations (thread CPU), µs added per call (spread over runs): {', '.join(fast)}; "
                  f"plain {fmt(s['modes'].get('plain', {}).get('fast_us_per_call'))} µs/call "
                  f"(±{fmt(s['modes'].get('plain', {}).get('fast_spread_us'))})")
            print(f"  evmbpf/floor {fmt(s['ratio_evmbpf_floor_fast'])}, reference/evmbpf "
                  f"{fmt(s['ratio_reference_evmbpf_fast'], '.1f')}"
                  + (f"; base/floor {fmt(s['ratio_base_floor_fast'])}, reference/base "
                     f"{fmt(s['ratio_reference_base_fast'], '.1f')}" if "base" in s["modes"] else ""))
        if prev and wl in prev:
            p = prev[wl]
            print("compared with the earlier file (µs added per call, before -> after):")
            for mode, d in s["modes"].items():
                q = p["modes"].get(mode)
                if q and d.get("us_added_per_call") is not None and q.get("us_added_per_call") is not None:
                    extra = ""
                    for prog in ("call_enter", "call_exit"):
                        if f"bpf_ns_{prog}" in d and f"bpf_ns_{prog}" in q:
                            extra += f"  {prog} {q[f'bpf_ns_{prog}']:.0f} -> {d[f'bpf_ns_{prog}']:.0f} ns"
                    print(f"  {mode:10} {q['us_added_per_call']:7.2f} -> {d['us_added_per_call']:7.2f}{extra}")
            for key in ("ratio_evmbpf_floor", "ratio_reference_evmbpf"):
                print(f"  {key}: {fmt(p.get(key))} -> {fmt(s.get(key))}")


def soak(tmp, opts, seconds):
    res = {}
    for mode in ("evmbpf", "tail"):
        log(f"soak: {mode}, {seconds} s")
        r = run_one("small", mode, tmp, opts, duration=seconds, sample_rss=True)
        samples = [x["collector_rss_kb"] for x in r.get("rss_samples", []) if x.get("collector_rss_kb")]
        res[mode] = {"seconds": seconds, "iters": r["iters"],
                     "events": (r.get("stats") or {}).get("events"),
                     "dropped_records": (r.get("stats") or {}).get("dropped_records"),
                     "rss_kb_first": samples[0] if samples else None,
                     "rss_kb_at_10pct": samples[len(samples) // 10] if samples else None,
                     "rss_kb_last": samples[-1] if samples else None,
                     "rss_kb_max": max(samples) if samples else None,
                     "maxrss_kb": r["collector"]["maxrss_kb"],
                     "rss_samples_kb": samples}
        d = res[mode]
        print(f"soak {mode:7} {seconds:.0f} s: {d['events']} events, dropped {d['dropped_records']}, "
              f"collector RSS first {d['rss_kb_first']} kB, at 10% {d['rss_kb_at_10pct']} kB, "
              f"last {d['rss_kb_last']} kB, max {d['rss_kb_max']} kB")
    return res


def drop_check(tmp, opts):
    """Lose records on purpose; the trace must count them."""
    log("drop check: collector stopped 1.5 s, 1 MiB ring buffer")
    r = run_one("small", "evmbpf", tmp, opts, stop_collector=(0.3, 1.5), ringbuf_mb=1,
                duration=3, scan_trace=True)
    st = r.get("stats") or {}
    ev = st.get("events")
    calls = None
    dropped_bpf = st.get("dropped_records")
    in_trace = sum(e.get("count", 0) for e in (r.get("trace_dropped") or []))
    d = {"dropped_records": dropped_bpf, "trace_dropped_count": in_trace,
         "trace_dropped_events": len(r.get("trace_dropped") or []),
         "events": ev, "records": st.get("records"),
         "consistent": dropped_bpf == in_trace}
    print(f"drop check: BPF counted {dropped_bpf} dropped records, the trace's "
          f"{d['trace_dropped_events']} `dropped` events say {in_trace}: "
          f"{'consistent' if d['consistent'] else 'MISMATCH'}")
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="small,tiny,big,llama,llama-depth",
                    help="comma-separated: small, linear, tiny, big, llama, llama-depth (an "
                         "HF LlamaModel at 2, 8 and 32 layers; default %(default)s)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--iters", type=int, help="iterations per run (default per workload)")
    ap.add_argument("--tail", type=int, default=10000, help="N for the --tail mode")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin the workload and the collector to different CPUs")
    ap.add_argument("--out", help="results file (default bench-results/bench-TIMESTAMP.json)")
    ap.add_argument("--compare", help="an earlier results file")
    ap.add_argument("--soak", type=float, help="seconds of a streaming and a --tail soak run")
    ap.add_argument("--drop-check", action="store_true")
    ap.add_argument("--note", default="", help="free text stored in the results")
    ap.add_argument("--evmbpf", help="the evmbpf binary to measure (default build/evmbpf)")
    ap.add_argument("--evmbpf-base", help="an earlier evmbpf binary, measured as mode `base` "
                                          "beside `evmbpf` (added to --modes)")
    opts = ap.parse_args()

    global EVMBPF, EVMBPF_BASE
    if opts.evmbpf:
        EVMBPF = os.path.abspath(opts.evmbpf)
    if opts.evmbpf_base:
        EVMBPF_BASE = os.path.abspath(opts.evmbpf_base)
        if not os.access(EVMBPF_BASE, os.X_OK):
            sys.exit(f"--evmbpf-base {opts.evmbpf_base}: not an executable file")
    if os.geteuid() != 0:
        sys.exit("bench.py needs root (BPF)")
    if not os.access(EVMBPF, os.X_OK):
        sys.exit(f"{EVMBPF} is missing: run make first")
    prev = None
    if opts.compare:
        with open(opts.compare) as f:
            prev = json.load(f)["summary"]
    workloads = []
    for w in opts.workloads.split(","):
        if w == "llama-depth":
            workloads += [f"llama-depth-{n}" for n in LLAMA_DEPTHS]
        elif w:
            workloads.append(w)
    if any(w.startswith("llama") for w in workloads) and not chroot_dir("sid"):
        log("llama, llama-depth: skipped, the sid chroot is not built "
            "(scripts/chroot.sh ensure sid)")
        workloads = [w for w in workloads if not w.startswith("llama")]
    modes = [m for m in opts.modes.split(",") if m]
    if EVMBPF_BASE and "base" not in modes:
        modes.insert(modes.index("evmbpf") + 1 if "evmbpf" in modes else len(modes), "base")
    if "base" in modes and not EVMBPF_BASE:
        sys.exit("mode base needs --evmbpf-base BINARY")
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        stats_before = f.read().strip()
    if stats_before != "1":
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write("1")
    started = datetime.datetime.now(datetime.timezone.utc)
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="evmbpf-bench-") as tmp:
            for rep in range(opts.repeat):
                for wl in workloads:
                    # rotate the order so that no mode always runs first
                    order = modes[rep % len(modes):] + modes[:rep % len(modes)]
                    for mode in order:
                        try:
                            r = run_one(wl, mode, tmp, opts)
                        except Exception as e:  # a failed run is reported, not fatal
                            r = {"workload": wl, "mode": mode, "error": str(e)}
                            log(f"{wl} {mode}: {e}")
                        r["rep"] = rep
                        runs.append(r)
                        if "secs" in r:
                            log(f"rep {rep} {wl:6} {mode:9} {r['secs']:.3f} s"
                                + (f", dropped {r['stats']['dropped_records']}" if r.get("stats") else ""))
            summary = summarize(runs)
            print_summary(summary, prev)
            extra = {}
            if opts.soak:
                extra["soak"] = soak(tmp, opts, opts.soak)
            if opts.drop_check:
                extra["drop_check"] = drop_check(tmp, opts)
    finally:
        if stats_before != "1":
            with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
                f.write(stats_before)
    git = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    result = {"started": started.isoformat(), "git": git, "evmbpf": EVMBPF, "note": opts.note,
              "argv": sys.argv[1:], "cpus": os.cpu_count(), "kernel": os.uname().release,
              "summary": summary, "runs": runs, **extra}
    out = opts.out or os.path.join(REPO, "bench-results",
                                   "bench-" + started.strftime("%Y%m%dT%H%M%SZ") + ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
