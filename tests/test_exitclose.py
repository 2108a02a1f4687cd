"""A SIGKILL of evmbpf while it takes uprobes away must not leave a breakpoint in the target.

The kernel writes a uprobe's original instruction back when its link's last reference
is dropped; if the dropping thread has a SIGKILL pending, the kernel's page lookup
refuses (-EINTR), it gives up ("failed to unregister, leaking uprobe") and the target
traps at each hit for the rest of its life. evmbpf drops the last references in a
helper's exit instead (user/collector/session/exitclose.c).

The aid (tests/aids/uprobe_close.c) puts a uprobe on each of 300 functions of a copy
of the host's Python (its own file, so that what the plain close leaks stays on that
copy) running a busy loop, closes the link on a thread and SIGKILLs itself at once. The
test reads the target's code back from /proc/PID/mem at every place. The plain close is
run first, to show on this kernel what evmbpf's way prevents: the kernel keeps the
leaked uprobes (a little memory) until it reboots."""
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import (HOST_PYTHON, REF_WORKLOADS, TEST_AIDS, Attached, code_byte, code_bytes,
                            multi_links, wait_for_line)

pytestmark = pytest.mark.root

PLACES = 300  # functions probed (the plain close logs a line for each one it leaks)
BUSY = """
import json, sys, time
print("ready", flush=True)
while True:
    json.dumps({"a": [1, 2.5, "x"] * 4}); sorted(range(50), key=lambda v: -v)
    time.sleep(0.0002)
"""


class KernelLog:
    """The kernel's log from now on (/dev/kmsg, read from its end: a count of dmesg's
    lines would miss lines once the ring turns over)."""

    def __init__(self):
        self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self.fd, 0, os.SEEK_END)

    def leaks(self):
        """The "leaking uprobe" lines logged since, and the log closed."""
        n = 0
        try:
            while True:
                try:
                    record = os.read(self.fd, 8192)
                except BrokenPipeError:  # overwritten before it was read: go on
                    continue
                except BlockingIOError:
                    break
                n += b"failed to unregister, leaking uprobe" in record
        finally:
            os.close(self.fd)
        return n


def function_names(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                         text=True, check=True).stdout
    return [f[2] for f in (line.split() for line in out.splitlines())
            if len(f) == 3 and f[1] == "T"]


def close_killed(tmp_path, mode):
    """(places, places whose breakpoint stayed, new leak lines) for one close."""
    copy = str(tmp_path / f"python-{mode}")
    shutil.copy(os.path.realpath(HOST_PYTHON), copy)
    target = subprocess.Popen([copy, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        log = KernelLog()
        aid = subprocess.run([TEST_AIDS, "uprobe-close", copy, str(target.pid), mode],
                             input="\n".join(function_names(copy)[:PLACES]) + "\n",
                             capture_output=True, text=True, timeout=120)
        assert aid.returncode == -signal.SIGKILL, aid.stderr
        offsets = [int(v) for v in aid.stdout.split()]
        with open(copy, "rb") as handle:
            disk = handle.read()
        assert len(offsets) > PLACES // 2, aid.stdout[-500:]
        # the helper (if any) ends its work after the aid's death: give it time
        deadline = time.monotonic() + 20
        while True:
            live = code_bytes(target.pid, copy, offsets)
            stayed = [off for off in offsets if live[off] != disk[off]]
            if not stayed or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert target.poll() is None, "the target died"
        return len(offsets), len(stayed), log.leaks()
    finally:
        target.kill()
        target.wait()


def test_a_sigkill_mid_close_leaves_no_breakpoint(tmp_path):
    if not shutil.which("nm"):
        pytest.skip("nm (binutils) is not installed: the functions to probe are not known")
    places, stayed, lines = close_killed(tmp_path, "direct")
    print(f"\nplain close, SIGKILLed: {stayed} of {places} breakpoints stayed in the target, "
          f"{lines} leak lines in the kernel's log")
    if not stayed:
        print("this kernel finished the plain close under SIGKILL: evmbpf's way is checked "
              "alone")
    places, stayed, lines = close_killed(tmp_path, "helper")
    print(f"evmbpf's close, SIGKILLed: {stayed} of {places} stayed, {lines} leak lines")
    assert stayed == 0 and lines == 0


def test_evmbpf_killed_while_it_detaches(tmp_path, monkeypatch):
    """evmbpf --pid SIGKILLed between its own closes and its helper's exit (the test's
    hook, EVMBPF_TEST_KILL_IN_CLOSE): the helper, told by its parent's death, takes the
    probes away. While the target still waits to start, its slot_tp_call holds its own
    instruction again; then it runs to its end."""
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    log = KernelLog()
    monkeypatch.setenv("EVMBPF_TEST_KILL_IN_CLOSE", "1")
    run = Attached(workload, str(tmp_path / "t.jsonl"), evmbpf_args=["-v"])
    try:
        line = wait_for_line(run.tracer.stderr, "slot_tp_call at", 30)
        m = re.search(r"interpreter (\S+), slot_tp_call at \S+ .*file offset (0x[0-9a-f]+)",
                      line)
        assert m, line
        exe, offset = m.group(1), int(m.group(2), 16)
        assert code_byte(run.pid, exe, offset) == 0xCC
        run.tracer.send_signal(signal.SIGINT)
        assert run.tracer.wait(timeout=60) == -signal.SIGKILL, run.tracer.stderr.read()
        deadline = time.monotonic() + 20
        while code_byte(run.pid, exe, offset) == 0xCC:
            assert time.monotonic() < deadline, "the breakpoint stayed after evmbpf died"
            time.sleep(0.05)
        assert not multi_links(run.pid)
        run.release()
        assert run.target.wait(timeout=120) == 0, run.target.stderr.read()
        assert log.leaks() == 0
    finally:
        if run.target.poll() is None:
            run.target.kill()
            run.target.wait()
