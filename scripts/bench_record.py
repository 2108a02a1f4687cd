#!/usr/bin/env python3
"""What `evmbpf record` costs, side by side with `--tail` tracing and no tracing.

    sudo /usr/bin/python3 scripts/bench_record.py [--evmbpf BIN] [--workloads small,tiny]
         [--ks 1,4,16] [--big] [--repeat 3] [--tail N] [--soak S] [--no-main]

Each run starts K processes of scripts/bench_workload.py WORKLOAD --sync together (K = 1,
4, 16; --big adds 64 when the memory is there: a python + torch process takes ~250 MB),
each with an unused `-X evrec_TOKEN` on its command line (TOKEN unique to this
benchmark), and times them in one of three modes, interleaved and repeated (--repeat,
the order rotated each repetition):

  plain   untraced
  tail    one `evmbpf --pid P1,...,PK --tail N --out DIR/%p.jsonl` traces the K (attached
          by pid while they wait after building their model: today's way)
  record  one `evmbpf record --dir DIR --tail N --match evrec_TOKEN`, started before the
          K, attaches to each a moment after its exec (its stderr's "attached to PID");
          the K are released once all K are attached. Never without --match: a recorder
          without it traces every Python process of the machine. It writes its pid to a
          file of its own (EVMBPF_RECORD_PIDFILE), is stopped with SIGTERM after the run,
          and must exit then.

Per workload, mode and K, printed and stored:

- µs per module call and µs added per module call against plain at the same K: from the
  wall time of each process's timed loop (median over processes and repeats; `min`: the
  fastest process's), and from the target thread's CPU time of its fastest iterations
  (each process's 10th percentile iteration, thread_time: the probes' traps and programs
  run on that thread, and time spent waiting for a CPU the others hold is not counted).
  With K above the CPUs the K share them: the wall time per call grows about K/CPUs-fold
  for every mode, plain included; the thread-CPU figure is what a call itself costs.
- The collector's (the `--tail` evmbpf's, or the recorder's) CPU (utime+stime from
  /proc/PID/stat, read before the K are released and after their results: warm-up, timed
  loop and the counting iteration, attaching excluded) per event and per module call;
  events = module calls * 2 + forwards (the tail mode's own count, from its stderr, gives
  the forwards per iteration). Its RSS at the end of the window (VmRSS, VmHWM from
  /proc/PID/status: K tails full), and for the recorder its VmRSS after the K exited 0
  (their tails dropped). The recorder must write no file (every process exits 0).
- The records the K lost (their ring buffers full: each process's "N records were dropped
  in all" on the collector's stderr). The events per run are those the K made: where
  records were dropped, the collector's CPU per event kept is higher than the figure.

--soak S: a recorder runs S seconds while short-lived processes come and go (--soak-procs
at a time, each importing torch, running a few forwards of a small model and exiting 0,
or 1 for every third: those leave a trace) beside one long-lived process calling modules
all along (its tail stays full); the recorder's RSS is sampled every --soak-interval
seconds: first, at 10%, last and max (flat: bounded). 10 minutes is a human's run; the
default is none. The recorder attaches to a process a moment after its exec while the
process runs on, one at a time: a short-lived one may end first. Counted: the
short-lived processes it attached to, the exit-1 ones among them, and those of them left
without a file (want none).

Results go to bench-results/bench-record-YYYYmmddTHHMMSSZ.json. Benchmarks are not
tests: nothing here fails on a timing; a recorder that does not stop on SIGTERM, or that
writes a trace for a process that exited 0, is reported as such.
"""
import argparse
import datetime
import json
import os
import random
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
PYTHON = "/usr/bin/python3"
MODES = ["plain", "tail", "record"]
# iterations of one process when alone, warm-up iterations (bench.py's); with K processes
# each runs about CPUS/K of them (the timed window stays a few seconds), at least MIN_ITERS
ITERS = {"small": (1500, 50), "tiny": (400, 10), "linear": (1000, 20)}
MIN_ITERS = 50
PROC_MB = 300  # a python + torch process, with margin
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def proc_cpu_s(pid):
    """utime + stime of a process, seconds (clock ticks: 10 ms steps)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_mem_kb(pid):
    res = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    res[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return res


def mem_available_mb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def dropped_records(text):
    """The records the collector's processes lost (their ring buffers full), from its
    stderr: each process's "N records were dropped in all"."""
    return sum(int(n) for n in re.findall(r"(\d+) records were dropped in all", text))


def wait_until(pred, procs, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: process {p.pid} ended ({p.returncode})")
        time.sleep(0.05)
    raise RuntimeError(f"{what}: not after {timeout} s")


def stop(proc, timeout=30):
    """SIGTERM, then wait: (exit status as wait4 gives it, rusage, whether it stopped)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            wpid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # already reaped by poll()
            return proc.returncode, None, True
        if wpid:
            proc.returncode = status
            return status, ru, True
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    return None, None, False


def wait_exit(proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wpid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if wpid:
            proc.returncode = status
            return status, ru
        time.sleep(0.05)
    raise RuntimeError(f"{proc.pid} did not end")


class Recorder:
    """An `evmbpf record` of this benchmark's own: its --match, pid file and folder."""

    def __init__(self, tmp, opts, name, extra=()):
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        for f in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, f))
        self.err = os.path.join(tmp, name + ".err")
        env = dict(os.environ, EVMBPF_RECORD_PIDFILE=os.path.join(tmp, name + ".pid"))
        cmd = [EVMBPF, "record", "--dir", self.dir, "--tail", str(opts.tail),
               "--match", opts.token, *extra]
        with open(self.err, "w") as ef:
            self.proc = subprocess.Popen(opts.pin_collector + cmd, stdout=ef, stderr=ef, env=env)
        self.pid = self.proc.pid
        wait_until(lambda: "recording:" in read(self.err), [self.proc], 120,
                   "the recorder did not start: " + read(self.err)[-1000:])

    def files(self):
        out = []
        for root, _, names in os.walk(self.dir):
            out += [os.path.join(root, n) for n in names]
        return out

    def stop(self):
        status, ru, stopped = stop(self.proc)
        return {"exit_status": status, "stopped_on_sigterm": stopped,
                "cpu_s_total": (ru.ru_utime + ru.ru_stime) if ru else None,
                "maxrss_kb": ru.ru_maxrss if ru else None}


def iters_for(wl, k, opts):
    if opts.iters:
        return opts.iters, ITERS[wl][1]
    iters, warmup = ITERS[wl]
    return max(MIN_ITERS, iters * min(k, os.cpu_count()) // k), warmup


def run_one(wl, mode, k, tmp, opts):
    iters, warmup = iters_for(wl, k, opts)
    res = {"workload": wl, "mode": mode, "k": k, "iters": iters, "warmup": warmup}
    works, tracer, rec = [], None, None
    outdir = os.path.join(tmp, "tail-out")
    try:
        if mode == "record":
            rec = Recorder(tmp, opts, "rec")
        cmd = [PYTHON, "-X", opts.token, WORKLOAD, wl, "--iters", str(iters),
               "--warmup", str(warmup), "--sync"]
        works = [subprocess.Popen(opts.pin_workload + cmd, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True) for _ in range(k)]
        pids = []
        for w in works:
            line = w.stdout.readline()
            if not line.startswith("{"):
                raise RuntimeError(f"workload did not start: {line!r}")
            pids.append(json.loads(line)["ready"])
        if mode == "tail":
            os.makedirs(outdir, exist_ok=True)
            err = os.path.join(tmp, "tail.err")
            tcmd = [EVMBPF, "--pid", ",".join(map(str, pids)), "--tail", str(opts.tail),
                    "--out", os.path.join(outdir, "%p.jsonl")]
            with open(err, "w") as ef:
                tracer = subprocess.Popen(opts.pin_collector + tcmd, stdout=ef, stderr=ef)
            collector = tracer
        elif mode == "record":
            err, collector = rec.err, rec.proc
        if mode != "plain":
            want = [re.compile(rf"^attached to {p} ", re.M) for p in pids]
            wait_until(lambda: all(w.search(read(err)) for w in want), [collector], 120 + 10 * k,
                       f"{mode}: not every process attached: " + read(err)[-1500:])
            time.sleep(0.2)
            cpu0 = proc_cpu_s(collector.pid)
        t0 = time.monotonic()
        for w in works:
            w.stdin.write("go\n")
            w.stdin.flush()
        procs = []
        for w in works:
            while True:
                line = w.stdout.readline()
                if not line:
                    raise RuntimeError("workload ended without a result")
                r = json.loads(line)
                if "secs" in r:
                    break
            procs.append({key: r.get(key) for key in ("secs", "iters", "warmup", "calls_per_iter",
                                                      "iter_p10", "iter_cpu_p10", "iter_cpu_min",
                                                      "peak_rss_kb", "python", "torch")})
        res["window_s"] = time.monotonic() - t0
        res["procs"] = procs
        if mode != "plain":
            time.sleep(0.3)  # the last records of the ring buffers read
            res["collector_cpu_s"] = proc_cpu_s(collector.pid) - cpu0
            res["collector_mem_kb"] = proc_mem_kb(collector.pid)
        for w in works:
            w.stdin.write("exit\n")
            w.stdin.flush()
        for w in works:
            w.wait(timeout=120)
        res["exit_codes"] = [w.returncode for w in works]
        if mode == "tail":
            status, ru = wait_exit(tracer, 120 + 5 * k)
            res["collector_exit"] = status
            res["collector_maxrss_kb"] = ru.ru_maxrss
            res["dropped_records"] = dropped_records(read(err))
            counts = re.findall(r"^evmbpf: (\d+) events\b.*?(\d+) forwards", read(err), re.M)
            res["tail_events"] = [int(e) for e, _ in counts]
            res["tail_forwards"] = [int(f) for _, f in counts]
        if mode == "record":
            time.sleep(0.5)  # the K's ends seen: their tails dropped
            res["recorder_rss_after_exit_kb"] = proc_mem_kb(rec.pid).get("VmRSS")
            res["record_files"] = [os.path.basename(f) for f in rec.files()]
            res.update(rec.stop())
            res["dropped_records"] = dropped_records(read(rec.err))
            rec = None
    finally:
        for w in works:
            if w.poll() is None:
                w.kill()
                w.wait()
        if tracer and tracer.poll() is None:
            stop(tracer)
        if rec:
            st = rec.stop()
            if not st["stopped_on_sigterm"]:
                log(f"the recorder {rec.pid} did not stop on SIGTERM (killed)")
        if os.path.isdir(outdir):
            for f in os.listdir(outdir):
                os.unlink(os.path.join(outdir, f))
    return res


def summarize(runs):
    out = {}
    ok = [r for r in runs if "procs" in r]
    for wl in dict.fromkeys(r["workload"] for r in ok):
        rw = [r for r in ok if r["workload"] == wl]
        calls_iter = rw[0]["procs"][0]["calls_per_iter"]
        # forwards per iteration, from the tail mode's counts (else 1)
        fpi = []
        for r in rw:
            for f in r.get("tail_forwards", []):
                fpi.append(f / (r["iters"] + r["warmup"] + 1))
        forwards_per_iter = round(med(fpi)) if fpi else 1
        s = {"calls_per_iter": calls_iter, "forwards_per_iter": forwards_per_iter,
             "python": rw[0]["procs"][0].get("python"), "torch": rw[0]["procs"][0].get("torch"),
             "ks": {}}
        for k in sorted({r["k"] for r in rw}):
            sk = {}
            for mode in MODES:
                m = [r for r in rw if r["k"] == k and r["mode"] == mode]
                if not m:
                    continue
                ps = [(p, r) for r in m for p in r["procs"]]
                per_call = [p["secs"] / (p["iters"] * p["calls_per_iter"]) * 1e6 for p, _ in ps]
                cpu_call = [p["iter_cpu_p10"] / p["calls_per_iter"] * 1e6 for p, _ in ps
                            if p.get("iter_cpu_p10") is not None]
                d = {"runs": len(m), "procs": len(ps), "iters": m[0]["iters"],
                     "us_per_call": med(per_call), "us_per_call_min": min(per_call),
                     "cpu_us_per_call": med(cpu_call),
                     "cpu_us_per_call_min": min(cpu_call) if cpu_call else None,
                     "window_s": med([r["window_s"] for r in m])}
                if mode != "plain":
                    ev_run, calls_run, cpu_ev, cpu_call_c = [], [], [], []
                    for r in m:
                        n = r["iters"] + r["warmup"] + 1
                        calls = sum(n * p["calls_per_iter"] for p in r["procs"])
                        events = sum(n * (2 * p["calls_per_iter"] + forwards_per_iter)
                                     for p in r["procs"])
                        ev_run.append(events)
                        calls_run.append(calls)
                        if r.get("collector_cpu_s") is not None:
                            cpu_ev.append(r["collector_cpu_s"] * 1e6 / events)
                            cpu_call_c.append(r["collector_cpu_s"] * 1e6 / calls)
                    d.update({
                        "events_per_run": med(ev_run),
                        "collector_cpu_s": med([r.get("collector_cpu_s") for r in m]),
                        "collector_us_per_event": med(cpu_ev),
                        "collector_us_per_event_min": min(cpu_ev) if cpu_ev else None,
                        "collector_us_per_call": med(cpu_call_c),
                        "collector_vmrss_kb": med([r["collector_mem_kb"].get("VmRSS") for r in m]),
                        "collector_vmhwm_kb": max((r["collector_mem_kb"].get("VmHWM") or 0) for r in m),
                        "dropped_records": med([r.get("dropped_records") for r in m]),
                    })
                    if mode == "tail":
                        counted = [sum(r.get("tail_events", [])) for r in m]
                        d["tail_events_counted"] = med(counted)
                        d["collector_maxrss_kb"] = max(r["collector_maxrss_kb"] for r in m)
                    if mode == "record":
                        d["recorder_rss_after_exit_kb"] = med(
                            [r.get("recorder_rss_after_exit_kb") for r in m])
                        d["record_files"] = sum(len(r.get("record_files", [])) for r in m)
                        d["stopped_on_sigterm"] = all(r.get("stopped_on_sigterm") for r in m)
                        d["recorder_exit_statuses"] = sorted({r.get("exit_status") for r in m},
                                                             key=str)
                sk[mode] = d
            plain = sk.get("plain")
            if plain:
                for mode, d in sk.items():
                    if mode == "plain":
                        continue
                    d["us_added_per_call"] = d["us_per_call"] - plain["us_per_call"]
                    d["us_added_per_call_min"] = d["us_per_call_min"] - plain["us_per_call_min"]
                    if d["cpu_us_per_call"] is not None and plain["cpu_us_per_call"] is not None:
                        d["cpu_us_added"] = d["cpu_us_per_call"] - plain["cpu_us_per_call"]
                        d["cpu_us_added_min"] = d["cpu_us_per_call_min"] - plain["cpu_us_per_call_min"]
            s["ks"][k] = sk
        out[wl] = s
    return out


def print_summary(summary):
    for wl, s in summary.items():
        print(f"\n== {wl}: {s['calls_per_iter']} module calls and {s['forwards_per_iter']} "
              f"forward(s) per iteration (python {s['python']}, torch {s['torch']})")
        print("µs per module call: wall (median over processes; min: the fastest process), "
              "thread CPU of the 10th-percentile iteration (median; min); added: against plain "
              "at the same K")
        print(f"{'K':>3} {'mode':7} {'procs':>5} {'iters':>5} {'wall µs':>8} {'added':>7} "
              f"{'(min)':>7} {'cpu µs':>7} {'added':>7} {'(min)':>7} | {'coll.cpu s':>10} "
              f"{'µs/event':>8} {'(min)':>6} {'µs/call':>7} {'VmRSS MiB':>9} {'VmHWM MiB':>9} "
              f"{'after exit':>10}")
        for k, sk in s["ks"].items():
            for mode, d in sk.items():
                mib = (lambda v: fmt(v / 1024 if v else None, ".1f"))
                print(f"{k:>3} {mode:7} {d['procs']:>5} {d['iters']:>5} {fmt(d['us_per_call']):>8} "
                      f"{fmt(d.get('us_added_per_call')):>7} {fmt(d.get('us_added_per_call_min')):>7} "
                      f"{fmt(d['cpu_us_per_call']):>7} {fmt(d.get('cpu_us_added')):>7} "
                      f"{fmt(d.get('cpu_us_added_min')):>7} | "
                      f"{fmt(d.get('collector_cpu_s')):>10} {fmt(d.get('collector_us_per_event'), '.3f'):>8} "
                      f"{fmt(d.get('collector_us_per_event_min'), '.3f'):>6} "
                      f"{fmt(d.get('collector_us_per_call')):>7} {mib(d.get('collector_vmrss_kb')):>9} "
                      f"{mib(d.get('collector_vmhwm_kb')):>9} {mib(d.get('recorder_rss_after_exit_kb')):>10}")
        for k, sk in s["ks"].items():
            d = sk.get("record")
            if d:
                print(f"K={k} record: {d['record_files']} trace file(s) written for processes that "
                      f"exited 0 (want 0); stopped on SIGTERM: {d['stopped_on_sigterm']} "
                      f"(statuses {d['recorder_exit_statuses']})")
            for mode in ("tail", "record"):
                d = sk.get(mode)
                if d and d.get("dropped_records"):
                    print(f"K={k} {mode}: {d['dropped_records']:.0f} records dropped (median of "
                          f"runs; of {d['events_per_run']:.0f} events): the collector's CPU per "
                          f"event above is per event made, not per event kept")
            t = sk.get("tail")
            if t and t.get("tail_events_counted"):
                print(f"K={k} tail: events counted by evmbpf {t['tail_events_counted']:.0f}, "
                      f"by the formula {t['events_per_run']:.0f}")


SOAK_CHILD = r'''
import os, sys, time
import torch
nn = torch.nn
torch.set_num_threads(1)
model = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(8)])
x = torch.randn(2, 16)
seconds, forwards, code = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
end = time.monotonic() + seconds
with torch.no_grad():
    n = 0
    while n < forwards or time.monotonic() < end:
        model(x)
        n += 1
        if seconds:
            time.sleep(0.002)
sys.exit(code)
'''


def soak(tmp, opts, seconds):
    """A recorder, S seconds, processes coming and going: its RSS sampled."""
    child = os.path.join(tmp, "soak_child.py")
    with open(child, "w") as f:
        f.write(SOAK_CHILD)
    rec = Recorder(tmp, opts, "soak")
    log(f"soak: recorder {rec.pid}, {seconds:.0f} s, {opts.soak_procs} short-lived processes "
        f"at a time beside one long-lived")
    base = opts.pin_workload + [PYTHON, "-X", opts.token, child]
    devnull = subprocess.DEVNULL
    long_lived = subprocess.Popen(base + [str(seconds), "0", "0"], stdout=devnull)
    live, ended, lifetimes = [], [], []
    started = 0
    samples = []
    rng = random.Random(25)
    t0 = time.monotonic()
    next_sample = t0
    try:
        while True:
            now = time.monotonic()
            for p in list(live):
                if p.poll() is not None:
                    live.remove(p)
                    ended.append((p.pid, p.expect, p.returncode))
                    lifetimes.append(now - p.t0)
            if now - t0 < seconds:
                while len(live) < opts.soak_procs:
                    code = 1 if started % 3 == 2 else 0
                    p = subprocess.Popen(base + ["0", str(rng.randint(3, 30)), str(code)],
                                         stdout=devnull, stderr=devnull)
                    p.expect = code
                    p.t0 = time.monotonic()
                    live.append(p)
                    started += 1
            elif not live:
                break
            if now >= next_sample:
                m = proc_mem_kb(rec.pid)
                samples.append({"t": round(now - t0, 1), "rss_kb": m.get("VmRSS"),
                                "hwm_kb": m.get("VmHWM"), "cpu_s": proc_cpu_s(rec.pid),
                                "live": len(live) + 1, "ended": len(ended)})
                next_sample += opts.soak_interval
            if rec.proc.poll() is not None:
                raise RuntimeError("the recorder ended during the soak: " + read(rec.err)[-1500:])
            time.sleep(0.05)
        long_lived.wait(timeout=120)
        time.sleep(1)
        m = proc_mem_kb(rec.pid)
        samples.append({"t": round(time.monotonic() - t0, 1), "rss_kb": m.get("VmRSS"),
                        "hwm_kb": m.get("VmHWM"), "cpu_s": proc_cpu_s(rec.pid), "live": 0,
                        "ended": len(ended) + 1})
    finally:
        for p in live + [long_lived]:
            if p.poll() is None:
                p.kill()
                p.wait()
        files = rec.files()
        st = rec.stop()
    errtext = read(rec.err)
    attached_pids = {int(p) for p in re.findall(r"^attached to (\d+) ", errtext, re.M)}
    attached = len(attached_pids)
    rss = [s["rss_kb"] for s in samples if s["rss_kb"]]
    failed = [pid for pid, want, got in ended if want == 1 and got == 1]
    bad_ends = [(pid, want, got) for pid, want, got in ended if got != want]
    written = {int(m.group(1)) for f in files
               for m in [re.search(r"evmbpf-(\d+)", os.path.basename(f))] if m}
    # the recorder looks at a process a moment after its exec and attaches while it runs
    # on: a short-lived one can end (or call its modules) first. Of the exit-1 processes
    # it attached to, each must have its file
    failed_attached = [pid for pid in failed if pid in attached_pids]
    d = {"seconds": seconds, "procs_at_a_time": opts.soak_procs,
         "short_lived_started": started, "exited_0": sum(1 for _, _, g in ended if g == 0),
         "exited_1": sum(1 for _, _, g in ended if g == 1), "unexpected_ends": bad_ends,
         "long_lived_exit": long_lived.returncode, "attached": attached,
         "files": len(files), "files_for_exit_1": len(written & set(failed)),
         "files_for_others": len(written - set(failed)),
         "short_lived_attached": len(attached_pids & {pid for pid, _, _ in ended}),
         "exit_1_attached": len(failed_attached),
         "exit_1_attached_without_file": sorted(set(failed_attached) - written),
         "short_lived_lifetime_s_median": med(lifetimes),
         "rss_kb_first": rss[0] if rss else None,
         "rss_kb_at_10pct": rss[len(rss) // 10] if rss else None,
         "rss_kb_last": rss[-1] if rss else None, "rss_kb_max": max(rss) if rss else None,
         "hwm_kb": samples[-1]["hwm_kb"] if samples else None,
         "recorder_cpu_s": samples[-1]["cpu_s"] if samples else None,
         "samples": samples, **st}
    print(f"\nsoak {seconds:.0f} s: {started} short-lived processes ({d['exited_0']} exited 0, "
          f"{d['exited_1']} exited 1; median life {fmt(d['short_lived_lifetime_s_median'])} s) "
          f"beside a long-lived one; the recorder attached to {attached} "
          f"({d['short_lived_attached']} short-lived, {d['exit_1_attached']} of the exit-1 ones), "
          f"wrote {len(files)} file(s) ({d['files_for_exit_1']} for the exit-1 processes, "
          f"{d['files_for_others']} for others; exit-1 processes attached to but without a "
          f"file: {len(d['exit_1_attached_without_file'])}); RSS first {d['rss_kb_first']} kB, "
          f"at 10% {d['rss_kb_at_10pct']} kB, last {d['rss_kb_last']} kB, max {d['rss_kb_max']} "
          f"kB, VmHWM {d['hwm_kb']} kB; recorder CPU {fmt(d['recorder_cpu_s'])} s; stopped on "
          f"SIGTERM: {st['stopped_on_sigterm']} (status {st['exit_status']})")
    print("  RSS kB over time: " + " ".join(f"{s['t']:.0f}s:{s['rss_kb']}" for s in samples))
    return d


def main():
    global EVMBPF
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evmbpf", help="the evmbpf binary (default build/evmbpf)")
    ap.add_argument("--workloads", default="small,tiny")
    ap.add_argument("--ks", default="1,4,16", help="processes at once (default %(default)s)")
    ap.add_argument("--big", action="store_true", help="add K=64 (needs ~20 GB free)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--iters", type=int, help="iterations per process (default: per workload and K)")
    ap.add_argument("--tail", type=int, default=5000, help="N of --tail and of the recorder")
    ap.add_argument("--pin", action="store_true",
                    help="workloads on the last CPU, the collector on CPU 0 (default: unpinned)")
    ap.add_argument("--soak", type=float, help="seconds of the recorder's soak (default: none)")
    ap.add_argument("--soak-procs", type=int, default=3, help="short-lived processes at a time")
    ap.add_argument("--soak-interval", type=float, default=5, help="seconds between RSS samples")
    ap.add_argument("--no-main", dest="main", action="store_false",
                    help="skip the side-by-side runs (with --soak: the soak alone)")
    ap.add_argument("--out", help="results file (default bench-results/bench-record-TIMESTAMP.json)")
    ap.add_argument("--note", default="")
    opts = ap.parse_args()
    if opts.evmbpf:
        EVMBPF = os.path.abspath(opts.evmbpf)
    if os.geteuid() != 0:
        sys.exit("bench_record.py needs root (BPF)")
    if not os.access(EVMBPF, os.X_OK):
        sys.exit(f"{EVMBPF} is missing: run make first")
    # the recorders match this and nothing else of the machine's
    opts.token = f"evrec_{os.getpid()}_{random.randrange(1 << 32):08x}"
    ncpu = os.cpu_count()
    opts.pin_workload = ["taskset", "-c", str(ncpu - 1)] if opts.pin and ncpu >= 2 else []
    opts.pin_collector = ["taskset", "-c", "0"] if opts.pin and ncpu >= 2 else []
    ks = [int(k) for k in opts.ks.split(",") if k]
    if opts.big and 64 not in ks:
        ks.append(64)
    need = max(ks) * PROC_MB + 2048 if ks else 0
    if opts.main and mem_available_mb() < need:
        sys.exit(f"K={max(ks)} needs about {need} MB free, {mem_available_mb()} MB are "
                 f"(fewer --ks, or no --big)")
    workloads = [w for w in opts.workloads.split(",") if w]
    modes = [m for m in opts.modes.split(",") if m]
    started = datetime.datetime.now(datetime.timezone.utc)
    log(f"token {opts.token}; evmbpf {EVMBPF}")
    runs, summary, extra = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="evmbpf-bench-record-") as tmp:
        if opts.main:
            for rep in range(opts.repeat):
                for wl in workloads:
                    for k in ks:
                        order = modes[rep % len(modes):] + modes[:rep % len(modes)]
                        for mode in order:
                            t = time.monotonic()
                            try:
                                r = run_one(wl, mode, k, tmp, opts)
                            except Exception as e:  # a failed run is reported, not fatal
                                r = {"workload": wl, "mode": mode, "k": k, "error": str(e)}
                                log(f"{wl} K={k} {mode}: {e}")
                            r["rep"] = rep
                            runs.append(r)
                            if "procs" in r:
                                log(f"rep {rep} {wl:5} K={k:<2} {mode:6} "
                                    f"median {med([p['secs'] for p in r['procs']]):.3f} s"
                                    + (f", collector {r['collector_cpu_s']:.2f} s CPU"
                                       if r.get("collector_cpu_s") is not None else "")
                                    + f" ({time.monotonic() - t:.0f} s)")
            summary = summarize(runs)
            print_summary(summary)
        if opts.soak:
            extra["soak"] = soak(tmp, opts, opts.soak)
    git = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    result = {"started": started.isoformat(), "git": git, "evmbpf": EVMBPF, "note": opts.note,
              "argv": sys.argv[1:], "cpus": ncpu, "kernel": os.uname().release,
              "mem_available_mb": mem_available_mb(), "summary": summary, "runs": runs, **extra}
    out = opts.out or os.path.join(REPO, "bench-results",
                                   "bench-record-" + started.strftime("%Y%m%dT%H%M%SZ") + ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
