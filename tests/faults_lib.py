"""What the fault tests (tests/test_faults_*.py) share: reading a trace a fault may have
cut, the tracer attached by --pid with what proves its probes gone, a fork server of
processes that imported torch, and the check of a killed target's trace."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, comparable, links_on, perf_links,
                            wait_for_line)

FORKSERVER = os.path.join(OWN_WORKLOADS, "forkserver.py")
FAULT_MODEL = os.path.join(OWN_WORKLOADS, "fault_model.py")
MODULES_PER_FORWARD = 18
PROG_NAMES = {"call_enter", "call_exit", "exc_display", "task_exit", "task_exec", "task_fork",
              "marker_enter", "host_exec_enter", "host_exec_exit", "samples_watch",
              "bound_trap", "cuda_set_device"}  # names as bpftool shows them (15 bytes)


# ---------------------------------------------------------------- helpers

def read_jsonl(path, partial_ok=False):
    """Every line must be JSON; with partial_ok a last line without its newline may be
    cut (evmbpf killed mid-write). Returns (events, partial_tail)."""
    with open(path, "rb") as handle:
        data = handle.read()
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: empty for a complete file
    if tail and not partial_ok:
        raise AssertionError(f"{path}: last line has no newline: {tail[:200]!r}")
    events = []
    for number, line in enumerate(lines, 1):
        assert line, f"{path}:{number}: empty line"
        events.append(json.loads(line))
    # not the closing mark of a trace written where breakpoints never fire (as load())
    return [e for e in events if e.get("event") != "unobservable"], tail


def key(event):
    c = comparable(event)
    c["i"] = event.get("i")
    return c


def open_stack(events):
    """Per tid, the frames (module, call) entered and not exited, by the trace's own
    pairing; asserts every exit pairs with its tid's innermost open frame."""
    stacks = {}
    for e in events:
        kind = e.get("event")
        if kind == "enter":
            stacks.setdefault(e["tid"], []).append((e["module"], e["call"]))
        elif kind == "exit":
            stack = stacks.setdefault(e["tid"], [])
            assert stack, f"exit without an enter on tid {e['tid']}: {e}"
            assert stack[-1] == (e["module"], e["call"]), \
                f"exit {e['module']}#{e['call']} but tid {e['tid']} is in {stack[-1]}"
            stack.pop()
        elif kind == "unwound":
            stack = stacks.get(e["tid"], [])
            # unwound events come outermost first; drop them from the bottom
            assert (e["module"], e["call"]) in stack, e
            stack.remove((e["module"], e["call"]))
    return stacks


PROBE_RELEASE_GRACE_S = 5


def prog_alive(prog_id):
    r = subprocess.run(["bpftool", "-j", "prog", "show", "id", str(prog_id)],
                       capture_output=True, text=True)
    return r.returncode == 0


def probe_bytes(pid, address):
    """The first byte at the probed address in the target: 0xcc while a uprobe is in."""
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(1)[0]


def slot_tp_call_address(stderr_text):
    m = re.search(r"slot_tp_call at (0x[0-9a-f]+)", stderr_text)
    return int(m.group(1), 16) if m else None


class Tracer:
    """evmbpf attached by --pid, with what is needed to prove its probes are gone."""

    def __init__(self, pid, out, extra=(), env=None, preexec_fn=None):
        self.pid_target = pid
        self.proc = subprocess.Popen([EVMBPF, "-v", "--pid", str(pid), "--out", out, *extra],
                                     stderr=subprocess.PIPE, text=True, env=env,
                                     preexec_fn=preexec_fn)
        self.err = wait_for_line(self.proc.stderr, "attached to", 60)
        self.err += self.proc.stderr.readline()  # interpreter ..., slot_tp_call at
        self.address = slot_tp_call_address(self.err)
        self.links = perf_links(self.proc.pid)
        self.progs = {p["prog_id"] for p in self.links}
        shown = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"],
                                          capture_output=True, text=True).stdout or "[]")
        names = {p["id"]: p.get("name") for p in shown if p["id"] in self.progs}
        assert set(names) == self.progs and set(names.values()) <= PROG_NAMES, names

    def wait(self, timeout=30):
        rest = self.proc.communicate(timeout=timeout)[1]
        self.err += rest
        return self.proc.returncode

    def assert_probes_gone(self):
        assert self.links, "no perf links were seen while attached"
        kinds = {p["fd_type"] for p in self.links}
        assert {"uprobe", "uretprobe", "raw_tracepoint"} <= kinds, kinds
        # The kernel frees a closed link's program after an RCU grace period
        # (raw tracepoint links defer the free on 6.x), so a program may still be
        # listed for a moment after evmbpf has exited. A leak stays: poll, then judge.
        deadline = time.monotonic() + PROBE_RELEASE_GRACE_S
        while True:
            left = links_on([self.pid_target], holder=self.proc.pid)
            alive = [p for p in self.progs if prog_alive(p)]
            if not (left or alive) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not left, f"perf links left on the target: {left}"
        assert not alive, f"BPF programs still loaded {PROBE_RELEASE_GRACE_S} s after exit: {alive}"
        if self.address and os.path.exists(f"/proc/{self.pid_target}/mem"):
            try:
                first = probe_bytes(self.pid_target, self.address)
            except OSError:
                return
            assert first != 0xCC, "the breakpoint is still in the target's code"


class ForkServer:
    def __init__(self):
        self.proc = subprocess.Popen([HOST_PYTHON, FORKSERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.dir = tempfile.mkdtemp(prefix="evmbpf-faults-")
        self.n = 0

    def fork(self, forwards, rows):
        self.n += 1
        go = os.path.join(self.dir, f"go{self.n}")
        done = os.path.join(self.dir, f"done{self.n}")
        self.proc.stdin.write(f"fork {go} {done} {forwards} {rows}\n")
        self.proc.stdin.flush()
        pid = int(self.proc.stdout.readline().split()[1])
        return pid, go, done

    def reap(self, pid):
        self.proc.stdin.write(f"reap {pid}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


ROWS = 4096
FULL_FORWARDS = 1500


def check_killed_trace(events, full, signame):
    """header, a prefix of the full trace event for event, the error, the unwound stack."""
    assert events[0]["event"] == "header"
    body = events[1:]
    cut = next(i for i, e in enumerate(body) if e["event"] == "error")
    prefix, error, unwound = body[:cut], body[cut], body[cut + 1:]
    assert not [e for e in body if e["event"] == "dropped"], "records were dropped"
    full_body = full[1:]
    assert len(prefix) < len(full_body), "the target was not killed before its end"
    for index, (a, b) in enumerate(zip(full_body, prefix)):
        assert key(a) == key(b), f"event {index} differs:\nfull   {a}\nkilled {b}"
    assert error["exc_type"] == signame, error
    # the error and the unwound frames happened at the exit: after every module event
    last_ts = max(e["ts_ns"] for e in prefix if "ts_ns" in e)
    assert all(e["ts_ns"] >= last_ts for e in [error, *unwound]), (last_ts, error)
    stacks = open_stack(prefix)
    frames = [f for stack in stacks.values() for f in stack]
    assert [(e["module"], e["call"]) for e in unwound] == frames
    assert all(e["event"] == "unwound" and e["reason"] == "process exited" for e in unwound)
    if unwound:
        assert [e["deepest"] for e in unwound] == [False] * (len(unwound) - 1) + [True]
        assert error["module"] == unwound[-1]["module"]
        assert error["forward"] == unwound[-1]["forward"] == prefix[-1]["forward"]
    return len(prefix), len(unwound)
