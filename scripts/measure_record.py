#!/usr/bin/env python3
"""The numbers docs/record.md gives for `evmbpf record`: bursts, the cost on a Python
without torch, and the stop time.

    sudo /usr/bin/python3 scripts/measure_record.py [--evmbpf BIN] [--parts burst,nontorch,stop]
         [--burst 16,64] [--pairs 5] [--calls 1000000] [--stop-k 64] [--tail 50]

Every recorder here is `evmbpf record --dir DIR --tail N --match TOKEN` (never without
--match: a recorder without it traces every Python process of the machine), TOKEN unique
to this run and on the command line of every process it should take; each recorder has
its own folder and pid file (EVMBPF_RECORD_PIDFILE) in a temp folder, and its stderr is
read in a thread, each line timestamped as it comes (time.monotonic). Only one recorder
runs at a time. The workloads are /usr/bin/python3 (Debian's, with torch) running small
scripts written to the temp folder. A python + torch process takes ~250 MB: a size that
does not fit in MemAvailable (300 MB a process and 1 GiB kept free) is skipped, or made
smaller (stop), and that is said. Printed and stored, per part:

burst (--burst K1,K2,...): a recorder is started; the moment its stderr says
  `recording`, K processes are started together, each `import torch`, a small
  nn.Sequential, two forwards, and an exception raised in the third (exit 1).
  - attached: the K the recorder said `attached to PID` of; no torch: those of them
    whose line says `torch not imported yet` (held at the exec before their imports);
  - exit 1: the K that ended with status 1, as planned;
  - files: the K with a file in DIR (searched recursively for evmbpf-PID...jsonl) once
    complete (its last line the `recorded` mark), waited for until 60 s + 1 s a process
    after the last exit (DIR polled every 50 ms);
  - with error: the files holding an `"event": "error"` line (the exception's);
  - last att s, last exit s, last file s: from the K's start to the recorder's last
    `attached to` one of them (the line's time), to the last one's exit, to the last
    file found complete;
  - recorder CPU s: its utime+stime (/proc/PID/stat, 10 ms ticks) from `recording` to
    the last file (the BPF object's load is in it: it is loaded, and verified, at the
    first attach), and in all (wait4's rusage at its exit: its start and stop too);
  - VmHWM MiB: its peak RSS (/proc/PID/status), read before it is stopped;
  - stop s, status: SIGTERM to its exit, and its exit status (negative: a signal).
  With each K: os.cpu_count(), the load average just before the K start, and (once) the
  dmesg line naming the hypervisor, when dmesg is readable.

nontorch (--pairs P): a Python that never imports torch makes --calls calls (10^6) of
  an instance of a class with a Python __call__, timing its loop itself (perf_counter,
  the start-up not counted). Three modes, each pair running each once, the order
  rotated each pair:
  - plain: the script without TOKEN on its command line, while a recorder runs: the
    recorder does not take it (the cost of a recorder that watches the node's execs);
  - record: TOKEN on its command line: the recorder takes it (held at its exec,
    attached; its call probes wait for torch, which never comes);
  - record-nodefer: the same under a second recorder started with EVMBPF_NO_DEFER=1,
    which places the call probes at the attach (the behaviour before the wait for
    torch: every such call traps).
  record and record-nodefer run under their own recorders, one stopped before the other
  starts (a switch each time the mode needs the other; a plain run goes under the one
  running). A record run's loop starts only once the recorder said `attached to PID`
  of it (the script waits on stdin). Median and min of the loop's seconds per mode,
  and µs added a call against plain ((mode - plain) / calls, medians, and mins).

stop (--stop-k K): a recorder, and K processes with torch that each build a model, run
  one forward, then wait for a flag file (polled every 20 ms) and exit 0 (clean: no file
  for them). Once the recorder said `attached to` all K and all K ran their forward:
  - new-process: the flag is made (the K end together) and at once one more process is
    started (torch; raises at its first forward). Measured: the K's end (flag to the
    last one's exit), the new one's `attached to` (from its start), its file (whether,
    and when), then, once its file is there (or not after 60 s + 1 s a process), SIGTERM
    to the recorder and the time to its exit, with its status (the K's ends may be dealt
    with by then: the next variant is the stop right at their ends);
  - sigterm-at-end: a fresh recorder and K again; the flag is made, and SIGTERM is sent
    the moment the last of the K has exited (no new process): the time to its exit.
  Files written for the K (want 0) are counted. A recorder not gone 120 s + 3 s a
  process after SIGTERM is killed (SIGKILL) and said so.

Measurements, not tests: nothing fails on a timing. A part that fails (a recorder that
dies, a workload that does not start) is reported with its error and the others run.
Every workload process is killed and every recorder stopped at the end (try/finally);
processes left with TOKEN on their command line are named. Results go to
bench-results/measure-record-YYYYmmddTHHMMSSZ.json.
"""
import argparse
import datetime
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

# shared with the benchmark beside it (scripts/ is the first entry of sys.path)
from bench_record import fmt, log, med, mem_available_mb, proc_cpu_s

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVMBPF = os.path.join(REPO, "build", "evmbpf")
PYTHON = "/usr/bin/python3"
PARTS = ["burst", "nontorch", "stop"]
NONTORCH_MODES = ["plain", "record", "record-nodefer"]
PROC_MB = 300  # a python + torch process (~250 MB), with margin
KEEP_FREE_MB = 1024
FILE_RE = re.compile(r"evmbpf-(\d+)")

# argv: TAG FORWARDS; raises in forward FORWARDS+1 (exit 1)
RAISER = r'''
import sys
import torch
nn = torch.nn
torch.set_num_threads(1)
forwards = int(sys.argv[2])


class Boom(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0

    def forward(self, x):
        self.n += 1
        if self.n > forwards:
            raise RuntimeError("measure_record: the planned failure")
        return x


model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), Boom())
x = torch.randn(2, 16)
with torch.no_grad():
    for _ in range(forwards + 1):
        model(x)
'''

# argv: TAG READYDIR FLAG; one forward, a ready file, waits for FLAG, exits 0
WAITER = r'''
import os, sys, time
import torch
nn = torch.nn
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
with torch.no_grad():
    model(torch.randn(2, 16))
open(os.path.join(sys.argv[2], str(os.getpid())), "w").close()
while not os.path.exists(sys.argv[3]):
    time.sleep(0.02)
'''

# argv: TAG CALLS; no torch: prints {"ready": PID}, waits for a line, times the loop
NONTORCH = r'''
import json, os, sys, time


class Callee:
    def __call__(self, x):
        return x


c = Callee()
n = int(sys.argv[2])
print(json.dumps({"ready": os.getpid()}), flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
for i in range(n):
    c(i)
secs = time.perf_counter() - t0
print(json.dumps({"secs": secs, "torch": "torch" in sys.modules}), flush=True)
'''

STARTED = []  # every workload Popen, killed at the end if alive
RECORDERS = []  # every Recorder, stopped at the end if alive


def proc_hwm_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def fits():
    """How many python + torch processes the memory holds now."""
    return max(0, (mem_available_mb() - KEEP_FREE_MB) // PROC_MB)


def hypervisor():
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if "hypervisor" in line.lower():
            return line.strip()
    return None


def spawn(args, **kw):
    p = subprocess.Popen(args, **kw)
    STARTED.append(p)
    return p


def kill_all():
    for p in STARTED:
        if p.poll() is None:
            p.kill()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log(f"workload {p.pid} did not end on SIGKILL")


class Recorder:
    """An `evmbpf record` of this run's own: its --match, folder and pid file; its
    stderr read in a thread, each line with the time it came."""

    def __init__(self, tmp, name, opts, env_extra=None):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix=name + "-dir-", dir=tmp)  # 0700, root's
        env = dict(os.environ, EVMBPF_RECORD_PIDFILE=self.dir + ".pid")
        env.update(env_extra or {})
        cmd = [EVMBPF, "record", "--dir", self.dir, "--tail", str(opts.tail),
               "--match", opts.token]
        self.lines = []  # (monotonic, line)
        self.attached = {}  # pid -> monotonic of its `attached to PID` line
        self.before_torch = set()  # the pids whose line says `torch not imported yet`
        self.t_recording = None
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env, text=True,
                                     errors="replace", bufsize=1)
        self.pid = self.proc.pid
        self.stopped = None
        RECORDERS.append(self)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        self.wait(lambda: self.t_recording, 180, "the recorder's `recording` line")
        self.cpu_at_recording = proc_cpu_s(self.pid)

    def _read(self):
        att = re.compile(r"^attached to (\d+) ")
        for line in self.proc.stdout:
            t = time.monotonic()
            with self.cond:
                self.lines.append((t, line.rstrip("\n")))
                m = att.match(line)
                if m:
                    self.attached.setdefault(int(m.group(1)), t)
                    if "torch not imported yet" in line:
                        self.before_torch.add(int(m.group(1)))
                elif line.startswith("recording") and self.t_recording is None:
                    self.t_recording = t
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def text(self, last=40):
        with self.cond:
            return "\n".join(l for _, l in self.lines[-last:])

    def wait(self, pred, timeout, what):
        """Wait for pred() (called under the lock) to be true; its value."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                v = pred()
                if v:
                    return v
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name}: the recorder ended ({self.proc.returncode}) "
                                       f"before {what}:\n{self.text()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{self.name}: no {what} after {timeout:.0f} s:\n"
                                       f"{self.text()}")
                self.cond.wait(min(left, 0.5))

    def files(self):
        """pid -> path of each evmbpf-PID... file under DIR."""
        out = {}
        for root, _, names in os.walk(self.dir):
            for n in names:
                m = FILE_RE.match(n)
                if m and n.endswith(".jsonl"):
                    out.setdefault(int(m.group(1)), os.path.join(root, n))
        return out

    def stop(self, timeout=60):
        """SIGTERM, then wait: {stop_s, exit_status, stopped_on_sigterm, cpu_s_total,
        maxrss_kb}; killed (SIGKILL) when not gone after timeout."""
        if self.stopped is not None:
            return self.stopped
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        res = {"exit_status": None, "stopped_on_sigterm": False, "stop_s": None,
               "cpu_s_total": None, "maxrss_kb": None}
        deadline = t0 + timeout
        while True:
            try:
                wpid, status, ru = os.wait4(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by poll() already
                res.update(exit_status=self.proc.returncode, stopped_on_sigterm=True,
                           stop_s=time.monotonic() - t0)
                break
            if wpid:
                res.update(stop_s=time.monotonic() - t0, stopped_on_sigterm=True,
                           exit_status=(os.waitstatus_to_exitcode(status)),
                           cpu_s_total=ru.ru_utime + ru.ru_stime, maxrss_kb=ru.ru_maxrss)
                self.proc.returncode = res["exit_status"]
                break
            if time.monotonic() > deadline:
                log(f"{self.name}: the recorder {self.pid} did not stop {timeout:.0f} s after "
                    f"SIGTERM: killed")
                self.proc.kill()
                self.proc.wait()
                res["exit_status"] = self.proc.returncode
                break
            time.sleep(0.01)
        self.thread.join(timeout=5)
        self.stopped = res
        return res


def file_state(path):
    """(complete: its last line the `recorded` mark, has an `error` event)."""
    complete = has_error = False
    try:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    complete = False
                    continue
                ev = ev.get("event") if isinstance(ev, dict) else None
                has_error = has_error or ev == "error"
                complete = ev == "recorded"
    except OSError:
        pass
    return complete, has_error


def write_script(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


# -- burst -------------------------------------------------------------------------------

def burst_one(k, tmp, opts):
    res = {"k": k, "cpus": os.cpu_count(), "mem_available_mb": mem_available_mb()}
    raiser = write_script(tmp, "raiser.py", RAISER)
    res["loadavg_before_recorder"] = os.getloadavg()
    rec = Recorder(tmp, f"burst{k}", opts)
    try:
        res["loadavg_before"] = os.getloadavg()  # the recorder started, the K not
        errdir = tempfile.mkdtemp(prefix="burst-err-", dir=tmp)
        t0 = time.monotonic()
        procs = []
        for i in range(k):
            with open(os.path.join(errdir, str(i)), "w") as ef:
                procs.append(spawn([PYTHON, raiser, opts.token, "2"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=ef))
        res["start_s"] = time.monotonic() - t0  # the K Popens' time
        pids = [p.pid for p in procs]
        done = {}  # pid -> (seconds from t0 to its file complete, has error)
        exits = {}
        exit_deadline = t0 + 300 + 5 * k
        file_deadline = None
        while True:
            now = time.monotonic()
            for p in procs:
                if p.pid not in exits and p.poll() is not None:
                    exits[p.pid] = (now - t0, p.returncode)
            for pid, path in rec.files().items():
                if pid in pids and pid not in done:
                    complete, err = file_state(path)
                    if complete:
                        done[pid] = (now - t0, err)
            if len(done) == k:
                break
            if len(exits) == k and file_deadline is None:
                file_deadline = now + 60 + k
            if file_deadline and now > file_deadline:
                break
            if now > exit_deadline:
                res["note"] = f"{k - len(exits)} of the K had not ended {exit_deadline - t0:.0f} s on"
                break
            if rec.proc.poll() is not None:
                raise RuntimeError(f"the recorder ended ({rec.proc.returncode}):\n{rec.text()}")
            time.sleep(0.05)
        cpu_end = proc_cpu_s(rec.pid)
        res["recorder_vmhwm_kb"] = proc_hwm_kb(rec.pid)
        with rec.cond:
            attached = [pid for pid in pids if pid in rec.attached]
            attach_s = [rec.attached[pid] - t0 for pid in attached]
        codes = [exits[pid][1] if pid in exits else None for pid in pids]
        res.update({
            "attached": len(attached),
            "attached_before_torch": sum(1 for pid in attached if pid in rec.before_torch),
            "last_attach_s": max(attach_s) if attach_s else None,
            "exit_1": sum(1 for c in codes if c == 1),
            "exit_codes": codes,
            "files": len(done),
            "files_with_error": sum(1 for _, e in done.values() if e),
            "last_exit_s": max(t for t, _ in exits.values()) if exits else None,
            "last_file_s": max(t for t, _ in done.values()) if done else None,
            "without_file": sorted(set(pids) - set(done)),
            "recorder_cpu_s_burst": (cpu_end - rec.cpu_at_recording
                                     if cpu_end is not None and rec.cpu_at_recording is not None
                                     else None),
            "recorder_cpu_s_at_recording": rec.cpu_at_recording,
        })
        bad = [i for i, c in enumerate(codes) if c != 1]
        if bad:
            with open(os.path.join(errdir, str(bad[0])), errors="replace") as f:
                res["first_unexpected_end_stderr"] = f.read()[-1500:]
    finally:
        kill_all()
        res.update(rec.stop(timeout=120 + 3 * k))
    res["recorder_cpu_s_total"] = res.pop("cpu_s_total")
    return res


def part_burst(tmp, opts):
    out = {"cpus": os.cpu_count(), "hypervisor": opts.hypervisor, "runs": []}
    for k in [int(x) for x in opts.burst.split(",") if x]:
        if fits() < k:
            msg = (f"K={k} skipped: needs about {k * PROC_MB + KEEP_FREE_MB} MB, "
                   f"{mem_available_mb()} MB available")
            log("burst " + msg)
            out["runs"].append({"k": k, "skipped": msg})
            continue
        log(f"burst K={k}: load {os.getloadavg()[0]:.2f}")
        t = time.monotonic()
        try:
            r = burst_one(k, tmp, opts)
        except Exception as e:  # reported, not fatal
            log(f"burst K={k}: {e}")
            r = {"k": k, "error": str(e)}
        r["wall_s"] = time.monotonic() - t
        out["runs"].append(r)
    return out


def print_burst(b):
    print(f"\n== burst: K python+torch processes started together the moment the recorder "
          f"said `recording`; each raises in its 3rd forward (exit 1). cpus {b['cpus']}; "
          f"{b['hypervisor'] or 'hypervisor: dmesg says nothing (or is not readable)'}")
    print(f"{'K':>3} {'load1':>5} {'attached':>8} {'no torch':>8} {'exit 1':>6} {'files':>5} {'w/error':>7} "
          f"{'last att s':>10} {'last exit s':>11} {'last file s':>11} {'rec CPU s':>9} "
          f"{'(total)':>7} {'VmHWM MiB':>9} {'stop s':>6} {'status':>6}")
    for r in b["runs"]:
        if "skipped" in r or "error" in r:
            print(f"{r['k']:>3} {r.get('skipped') or 'error: ' + r['error'].splitlines()[0]}")
            continue
        hwm = r.get("recorder_vmhwm_kb") or r.get("maxrss_kb")
        print(f"{r['k']:>3} {r['loadavg_before'][0]:>5.2f} {r['attached']:>8} "
              f"{r.get('attached_before_torch', '-'):>8} {r['exit_1']:>6} "
              f"{r['files']:>5} {r['files_with_error']:>7} {fmt(r['last_attach_s']):>10} "
              f"{fmt(r['last_exit_s']):>11} {fmt(r['last_file_s']):>11} "
              f"{fmt(r['recorder_cpu_s_burst']):>9} {fmt(r['recorder_cpu_s_total']):>7} "
              f"{fmt(hwm / 1024 if hwm else None, '.1f'):>9} {fmt(r['stop_s']):>6} "
              f"{str(r['exit_status']):>6}")
        if r.get("note"):
            print(f"    K={r['k']}: {r['note']}")


# -- nontorch ----------------------------------------------------------------------------

def nontorch_run(mode, rec, script, opts):
    tag = opts.token if mode != "plain" else "untagged"
    load = os.getloadavg()
    p = spawn([PYTHON, script, tag, str(opts.calls)], stdin=subprocess.PIPE,
              stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        if not line.startswith("{"):
            raise RuntimeError(f"{mode}: the script did not start: {line!r}")
        pid = json.loads(line)["ready"]
        attach_s = None
        if mode != "plain":
            rec.wait(lambda: pid in rec.attached, 120, f"`attached to {pid}`")
        with rec.cond:
            if pid in rec.attached:
                attach_s = rec.attached[pid]
        if mode == "plain" and attach_s is not None:
            raise RuntimeError(f"plain: the recorder attached to {pid}, which has no token")
        p.stdin.write("go\n")
        p.stdin.flush()
        r = json.loads(p.stdout.readline())
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return {"mode": mode, "secs": r["secs"], "imported_torch": r["torch"],
            "exit": p.returncode, "recorder": rec.name, "loadavg_before": load}


def part_nontorch(tmp, opts):
    script = write_script(tmp, "nontorch.py", NONTORCH)
    runs = []
    rec = None
    n = 0
    try:
        for pair in range(opts.pairs):
            i = pair % len(NONTORCH_MODES)
            order = NONTORCH_MODES[i:] + NONTORCH_MODES[:i]
            for mode in order:
                # plain: under the recorder running (or a first one: record's)
                kind = {"record": "record", "record-nodefer": "nodefer"}.get(
                    mode, rec.kind if rec else "record")
                if rec is None or rec.kind != kind:
                    if rec:
                        rec.stop()
                    n += 1
                    env = {"EVMBPF_NO_DEFER": "1"} if kind == "nodefer" else None
                    rec = Recorder(tmp, f"nontorch-{kind}{n}", opts, env)
                    rec.kind = kind
                try:
                    r = nontorch_run(mode, rec, script, opts)
                except Exception as e:  # reported, not fatal
                    log(f"nontorch pair {pair} {mode}: {e}")
                    r = {"mode": mode, "error": str(e)}
                r["pair"] = pair
                runs.append(r)
                if "secs" in r:
                    log(f"nontorch pair {pair} {mode:15} {r['secs']:.3f} s (under {r['recorder']})")
    finally:
        if rec:
            rec.stop()
    summary = {}
    for mode in NONTORCH_MODES:
        s = [r["secs"] for r in runs if r["mode"] == mode and "secs" in r]
        summary[mode] = {"runs": len(s), "median_s": med(s), "min_s": min(s) if s else None}
    plain = summary["plain"]
    for mode in NONTORCH_MODES[1:]:
        d = summary[mode]
        if plain["runs"] and d["runs"]:
            d["us_added_per_call"] = (d["median_s"] - plain["median_s"]) / opts.calls * 1e6
            d["us_added_per_call_min"] = (d["min_s"] - plain["min_s"]) / opts.calls * 1e6
    return {"calls": opts.calls, "pairs": opts.pairs, "summary": summary, "runs": runs}


def print_nontorch(n):
    print(f"\n== nontorch: {n['calls']} calls of a class with a Python __call__ in a Python "
          f"without torch, its loop's seconds ({n['pairs']} pairs, interleaved, order rotated)")
    print(f"{'mode':15} {'runs':>4} {'median s':>9} {'min s':>7} {'added µs/call':>13} {'(min)':>6}")
    for mode, d in n["summary"].items():
        print(f"{mode:15} {d['runs']:>4} {fmt(d['median_s'], '.3f'):>9} {fmt(d['min_s'], '.3f'):>7} "
              f"{fmt(d.get('us_added_per_call')):>13} {fmt(d.get('us_added_per_call_min')):>6}")


# -- stop --------------------------------------------------------------------------------

def stop_setup(k, tmp, opts, name):
    """A recorder and K waiting processes, each attached and past its forward."""
    waiter = write_script(tmp, "waiter.py", WAITER)
    ready = tempfile.mkdtemp(prefix=name + "-ready-", dir=tmp)
    flag = os.path.join(ready, "go")
    rec = Recorder(tmp, name, opts)
    t0 = time.monotonic()
    procs = [spawn([PYTHON, waiter, opts.token, ready, flag], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(k)]
    pids = [p.pid for p in procs]
    deadline = t0 + 300 + 10 * k
    while True:
        with rec.cond:
            n_att = sum(1 for pid in pids if pid in rec.attached)
        n_ready = sum(1 for pid in pids if os.path.exists(os.path.join(ready, str(pid))))
        if n_att == k and n_ready == k:
            break
        gone = [p for p in procs if p.poll() is not None]
        if gone:
            raise RuntimeError(f"{name}: {len(gone)} of the K ended early "
                               f"({gone[0].returncode}):\n{rec.text()}")
        if rec.proc.poll() is not None:
            raise RuntimeError(f"{name}: the recorder ended ({rec.proc.returncode}):\n{rec.text()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: after {deadline - t0:.0f} s, {n_att} of {k} attached, "
                               f"{n_ready} ready:\n{rec.text()}")
        time.sleep(0.1)
    setup = {"setup_s": time.monotonic() - t0, "loadavg_before_end": os.getloadavg()}
    time.sleep(1)  # quiet
    return rec, procs, flag, setup


def wait_all_exit(procs, t0, timeout):
    """Seconds from t0 to the last one's exit (polled every 10 ms), None if not all did."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if p.poll() is None]
        now = time.monotonic()
        if not alive:
            return now - t0
        if now > deadline:
            return None
        time.sleep(0.01)


def stop_new_process(k, tmp, opts):
    raiser = write_script(tmp, "raiser.py", RAISER)
    rec, procs, flag, res = stop_setup(k, tmp, opts, "stop-new")
    try:
        open(flag, "w").close()
        t_flag = time.monotonic()
        new = spawn([PYTHON, raiser, opts.token, "0"], stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t_new = time.monotonic()
        res["new_pid"] = new.pid
        # the new one's attach, while the K end
        timeout = 120 + 3 * k
        try:
            t_att = rec.wait(lambda: rec.attached.get(new.pid), timeout, f"`attached to {new.pid}`")
            res["new_attached_s"] = t_att - t_new
        except RuntimeError as e:
            res["new_attached_s"] = None
            res["note"] = str(e).splitlines()[0]
        res["k_ended_s"] = wait_all_exit(procs, t_flag, timeout)
        # its file: waited for until 60 s + 1 s a process after its exit
        t_file = deadline = None
        while True:
            now = time.monotonic()
            if deadline is None and new.poll() is not None:
                res["new_exit_s"] = now - t_new
                res["new_exit"] = new.returncode
                deadline = now + 60 + k
            path = rec.files().get(new.pid)
            if path:
                complete, has_error = file_state(path)
                if complete:
                    t_file = now
                    res["new_file_has_error"] = has_error
                    break
            if deadline and now > deadline:
                break
            if now - t_new > 300 + 10 * k:
                res["note"] = f"the new process had not ended {now - t_new:.0f} s on"
                break
            time.sleep(0.05)
        res["new_file"] = t_file is not None
        res["new_file_s"] = t_file - t_new if t_file else None
        res["files_for_the_k"] = len(set(rec.files()) & {p.pid for p in procs})
    finally:
        kill_all()
        res.update(rec.stop(timeout=120 + 3 * k))
    return res


def stop_at_end(k, tmp, opts):
    rec, procs, flag, res = stop_setup(k, tmp, opts, "stop-end")
    try:
        open(flag, "w").close()
        t_flag = time.monotonic()
        res["k_ended_s"] = wait_all_exit(procs, t_flag, 120 + 3 * k)
        res.update(rec.stop(timeout=120 + 3 * k))
        res["files_for_the_k"] = len(set(rec.files()) & {p.pid for p in procs})
    finally:
        kill_all()
        rec.stop()
    return res


def part_stop(tmp, opts):
    k = opts.stop_k
    out = {"k_asked": k, "variants": {}}
    if fits() < k:
        k = fits()
        out["note"] = (f"--stop-k {opts.stop_k} does not fit in {mem_available_mb()} MB "
                       f"available: K={k}")
        log("stop: " + out["note"])
    out["k"] = k
    if k < 1:
        return out
    for name, fn in (("new-process", stop_new_process), ("sigterm-at-end", stop_at_end)):
        log(f"stop {name} K={k}: load {os.getloadavg()[0]:.2f}")
        t = time.monotonic()
        try:
            r = fn(k, tmp, opts)
        except Exception as e:  # reported, not fatal
            log(f"stop {name}: {e}")
            r = {"error": str(e)}
        r["wall_s"] = time.monotonic() - t
        out["variants"][name] = r
    return out


def print_stop(s):
    print(f"\n== stop: K={s['k']} python+torch processes, each attached and past a forward, "
          f"end together (exit 0)" + (f" ({s['note']})" if s.get("note") else ""))
    print(f"{'variant':15} {'setup s':>7} {'K ended s':>9} {'new att. s':>10} {'new file':>8} "
          f"{'new file s':>10} {'SIGTERM→exit s':>14} {'status':>6} {'K files':>7}")
    for name, r in s["variants"].items():
        if "error" in r:
            print(f"{name:15} error: {r['error'].splitlines()[0]}")
            continue
        new = name == "new-process"
        stop_s = r["stop_s"] if r.get("stopped_on_sigterm") else None
        print(f"{name:15} {fmt(r.get('setup_s')):>7} {fmt(r.get('k_ended_s')):>9} "
              f"{fmt(r.get('new_attached_s')) if new else '':>10} "
              f"{str(r.get('new_file')) if new else '':>8} "
              f"{fmt(r.get('new_file_s')) if new else '':>10} "
              f"{fmt(stop_s) if r.get('stopped_on_sigterm') else 'killed':>14} "
              f"{str(r.get('exit_status')):>6} {r.get('files_for_the_k', '-'):>7}")
        if r.get("note"):
            print(f"    {name}: {r['note']}")
    print("K ended: flag to the last K's exit; new att.: the new process's start to the "
          "recorder's `attached to` it; new file: from its start; K files: written for the "
          "K (want 0)")


def leftovers(token):
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout
    return [l.strip() for l in out.splitlines() if token in l and str(os.getpid()) != l.split()[0]]


def main():
    global EVMBPF
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evmbpf", help="the evmbpf binary (default build/evmbpf)")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--burst", default="16,64", help="K of each burst (default %(default)s)")
    ap.add_argument("--pairs", type=int, default=5, help="nontorch: runs of each mode")
    ap.add_argument("--calls", type=int, default=10**6, help="nontorch: calls a run")
    ap.add_argument("--stop-k", type=int, default=64, help="stop: processes ending together")
    ap.add_argument("--tail", type=int, default=50, help="the recorders' --tail")
    ap.add_argument("--out", help="results file (default bench-results/measure-record-TIMESTAMP.json)")
    ap.add_argument("--note", default="")
    opts = ap.parse_args()
    if opts.evmbpf:
        EVMBPF = os.path.abspath(opts.evmbpf)
    if os.geteuid() != 0:
        sys.exit("measure_record.py needs root (BPF)")
    if not os.access(EVMBPF, os.X_OK):
        sys.exit(f"{EVMBPF} is missing: run make first")
    parts = [p for p in opts.parts.split(",") if p]
    for p in parts:
        if p not in PARTS:
            sys.exit(f"unknown part {p!r} (of {','.join(PARTS)})")
    # the recorders match this and nothing else of the machine's
    opts.token = f"evmeas_{os.getpid()}_{random.randrange(1 << 32):08x}"
    opts.hypervisor = hypervisor()
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    log(f"token {opts.token}; evmbpf {EVMBPF}; {os.cpu_count()} CPUs; "
        f"{mem_available_mb()} MB available")
    result = {"started": started.isoformat(), "evmbpf": EVMBPF, "note": opts.note,
              "argv": sys.argv[1:], "cpus": os.cpu_count(), "kernel": os.uname().release,
              "hypervisor": opts.hypervisor, "mem_available_mb": mem_available_mb(),
              "loadavg_start": os.getloadavg(), "tail": opts.tail}
    git = lambda *a: subprocess.run(["git", "-C", REPO, *a], capture_output=True,
                                    text=True).stdout.strip()
    result["git"] = git("rev-parse", "--short", "HEAD")
    result["git_dirty"] = bool(git("status", "--porcelain", "--untracked-files=no"))
    try:
        with tempfile.TemporaryDirectory(prefix="evmbpf-measure-record-") as tmp:
            os.chmod(tmp, 0o700)
            if "burst" in parts:
                result["burst"] = part_burst(tmp, opts)
            if "nontorch" in parts:
                result["nontorch"] = part_nontorch(tmp, opts)
            if "stop" in parts:
                result["stop"] = part_stop(tmp, opts)
    finally:
        kill_all()
        for rec in RECORDERS:
            st = rec.stop()
            if not st["stopped_on_sigterm"]:
                log(f"the recorder {rec.pid} did not stop on SIGTERM (killed)")
        left = leftovers(opts.token)
        if left:
            log("processes left with the token on their command line:\n  " + "\n  ".join(left))
        result["left_behind"] = left
    result["wall_s"] = time.monotonic() - t_start
    if "burst" in result:
        print_burst(result["burst"])
    if "nontorch" in result:
        print_nontorch(result["nontorch"])
    if "stop" in result:
        print_stop(result["stop"])
    out = opts.out or os.path.join(REPO, "bench-results",
                                   "measure-record-" + started.strftime("%Y%m%dT%H%M%SZ") + ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{result['wall_s']:.0f} s in all; results: {out}")


if __name__ == "__main__":
    main()
