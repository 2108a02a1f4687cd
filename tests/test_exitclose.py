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
import shutil
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, LINKS, REF_WORKLOADS, TEST_AIDS, Attached,
                            code_byte, code_bytes, compare_traces, host_kwargs, links_on, load,
                            proc_state, run_reference, slot_tp_call_place, use_links,
                            wait_for_line)

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


def probes_gone_and_runs_on(run, exe, offset, log, since):
    """After evmbpf's death: within 20 s no link server is left and the waiting target's
    slot_tp_call holds its own instruction, no probe of anyone's is on it (a uprobe_multi
    link for it, a perf uprobe through its /proc files); released, it runs to its end;
    the kernel logged no leak."""
    deadline = time.monotonic() + 20
    while servers(since) or code_byte(run.pid, exe, offset) == 0xCC:
        assert time.monotonic() < deadline, \
            f"servers {servers(since)}, byte {code_byte(run.pid, exe, offset):#x}"
        time.sleep(0.05)
    assert not links_on([run.pid]), links_on([run.pid])
    run.release()
    assert run.target.wait(timeout=120) == 0, run.target.stderr.read()
    assert log.leaks() == 0


def test_evmbpf_killed_while_it_detaches(tmp_path, monkeypatch):
    """evmbpf --pid SIGKILLed between its own closes and its helper's exit (the test's
    hook, EVMBPF_TEST_KILL_IN_CLOSE): the helper, told by its parent's death, takes the
    probes away. While the target still waits to start, its slot_tp_call holds its own
    instruction again; then it runs to its end."""
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    log, since = KernelLog(), uptime_ticks() - 1
    monkeypatch.setenv("EVMBPF_TEST_KILL_IN_CLOSE", "1")
    run = Attached(workload, str(tmp_path / "t.jsonl"), evmbpf_args=["-v"])
    try:
        exe, offset = slot_tp_call_place(wait_for_line(run.tracer.stderr, "slot_tp_call at", 30))
        assert code_byte(run.pid, exe, offset) == 0xCC
        run.tracer.send_signal(signal.SIGINT)
        assert run.tracer.wait(timeout=60) == -signal.SIGKILL, run.tracer.stderr.read()
        probes_gone_and_runs_on(run, exe, offset, log, since)
    finally:
        if run.target.poll() is None:
            run.target.kill()
            run.target.wait()


@pytest.mark.parametrize("kind", LINKS)
def test_evmbpf_killed_while_it_attaches(tmp_path, monkeypatch, kind):
    """evmbpf --pid SIGKILLed while the link server makes its first probe's link (the
    test's hooks: EVMBPF_TEST_KILL_IN_ATTACH, and EVMBPF_TEST_LINK_SLOW_MS so that the link
    is made after the kill): the server finishes the link, cannot hand it back, closes it,
    and exits. The waiting target's slot_tp_call holds its own instruction again, no leak
    line, no server left, and the target runs to its end."""
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    use_links(monkeypatch, kind)
    run = Attached(workload, str(tmp_path / "first.jsonl"), evmbpf_args=["-v"])
    try:
        exe, offset = slot_tp_call_place(wait_for_line(run.tracer.stderr, "slot_tp_call at", 30))
        run.tracer.send_signal(signal.SIGINT)
        assert run.tracer.wait(timeout=60) == 0
        assert code_byte(run.pid, exe, offset) != 0xCC
        log, since = KernelLog(), uptime_ticks() - 1
        monkeypatch.setenv("EVMBPF_TEST_KILL_IN_ATTACH", "1")
        monkeypatch.setenv("EVMBPF_TEST_LINK_SLOW_MS", "500")
        tracer = subprocess.Popen([EVMBPF, "--pid", str(run.pid), "--out",
                                   str(tmp_path / "t.jsonl")], stderr=subprocess.PIPE, text=True)
        assert tracer.wait(timeout=60) == -signal.SIGKILL, tracer.stderr.read()
        probes_gone_and_runs_on(run, exe, offset, log, since)
    finally:
        if run.target.poll() is None:
            run.target.kill()
            run.target.wait()


def uptime_ticks():
    """Clock ticks since boot, as /proc/PID/stat counts a process's start."""
    with open("/proc/uptime") as handle:
        return float(handle.read().split()[0]) * os.sysconf("SC_CLK_TCK")


def servers(since=0):
    """The link servers (named evmbpf-links) that started after `since` (uptime_ticks()):
    a server of another evmbpf still running is not this test's."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as handle:
                if handle.read().strip() != "evmbpf-links":
                    continue
            with open(f"/proc/{entry}/stat") as handle:
                start = int(handle.read().rsplit(")", 1)[1].split()[19])
            if start >= since:
                found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.parametrize("kind", LINKS)
def test_killed_at_the_samples_hold(tmp_path, monkeypatch, kind):
    """evmbpf --pid SIGKILLed as soon as the target is held where evalmetry.debug's module
    has run: evmbpf is then placing the phase-marker probe. Made by evmbpf's own thread,
    that link's breakpoint stayed in the target in 4 of 6 such kills (the kernel's leak
    line each time), and a perf uprobe's in 6 of 6; made by the link server, in none.
    Three kills here, no leak line."""
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    use_links(monkeypatch, kind)
    monkeypatch.setenv("EVMBPF_TEST_HOLD_DELAY_MS", "4000")
    leaks = 0
    for trial in range(3):
        log, since = KernelLog(), uptime_ticks() - 1
        run = Attached(workload, str(tmp_path / f"t{trial}.jsonl"))
        run.release()
        deadline = time.monotonic() + 30
        while proc_state(run.pid) != "t":
            assert time.monotonic() < deadline, "the target was never held"
            time.sleep(0.005)
        run.tracer.kill()
        run.tracer.wait()
        assert run.target.wait(timeout=120) == 0, run.target.stderr.read()
        deadline = time.monotonic() + 10
        while servers(since) and time.monotonic() < deadline:
            time.sleep(0.05)
        leaks += log.leaks()
    assert leaks == 0


@pytest.mark.parametrize("kind", LINKS)
def test_a_killed_link_server_is_started_again(tmp_path, monkeypatch, kind):
    """The link server SIGKILLed after the attach (by hand, or by the OOM killer): the
    next link (the phase-marker probe, at the samples hold) finds it gone, and a new
    server makes it. The trace is the reference's, phases included, and no server is
    left once evmbpf ends."""
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    use_links(monkeypatch, kind)
    since = uptime_ticks() - 1
    run = Attached(workload, str(tmp_path / "t.jsonl"), evmbpf_args=["-v"])
    try:
        first = servers(since)
        assert len(first) == 1, first
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while first[0] in servers(since):
            assert time.monotonic() < deadline, "the server did not die"
            time.sleep(0.02)
        run.release()
        run.finish()
    finally:
        if run.target.poll() is None:
            run.target.kill()
            run.target.wait()
    assert run.tracer_rc == 0 and run.target_rc == 0, run.tracer_err
    assert "the link server is gone" in run.tracer_err, run.tracer_err
    assert "the link server started again (1 since" in run.tracer_err, run.tracer_err
    assert "phase markers followed from here" in run.tracer_err, run.tracer_err
    reference = str(tmp_path / "ref.jsonl")
    run_reference(workload, reference)
    compare_traces(load(reference), load(str(tmp_path / "t.jsonl")), kwargs=host_kwargs())
    deadline = time.monotonic() + 10
    while servers(since):
        assert time.monotonic() < deadline, servers(since)
        time.sleep(0.05)


@pytest.mark.parametrize("kind", LINKS)
def test_a_leaked_breakpoint_goes_at_the_next_detach(tmp_path, monkeypatch, kind):
    """A breakpoint the kernel leaked at one of evmbpf's places (a SIGKILL that no helper
    covers: the link server itself killed in the middle of a registration) is taken away
    by the next evmbpf that traces the process, at its detach: its registration finds
    the kernel's leaked uprobe at that place, and its unregistration, which no signal
    interrupts, writes the instruction back. Made here with the aid's plain close of a
    link on 300 places of a copy of Python, slot_tp_call's last. The next evmbpf's probes
    are uprobe_multi links or perf uprobes: either finds the leaked one."""
    use_links(monkeypatch, kind)
    if not shutil.which("nm"):
        pytest.skip("nm (binutils) is not installed: the functions to probe are not known")
    copy = str(tmp_path / "python-leak")
    shutil.copy(os.path.realpath(HOST_PYTHON), copy)
    target = subprocess.Popen([copy, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"

        def traced(out):
            """evmbpf --pid on the target for a moment, then stopped: its -v lines."""
            tracer = subprocess.Popen([EVMBPF, "--pid", str(target.pid), "--out", out, "-v"],
                                      stderr=subprocess.PIPE, text=True)
            lines = wait_for_line(tracer.stderr, "slot_tp_call at", 30)
            time.sleep(0.5)
            tracer.send_signal(signal.SIGINT)
            _, err = tracer.communicate(timeout=60)
            assert tracer.returncode == 0, lines + err
            return lines

        exe, offset = slot_tp_call_place(traced(str(tmp_path / "first.jsonl")))
        assert os.path.samefile(exe, copy), exe
        own = code_byte(target.pid, copy, offset)
        assert own != 0xCC
        log = KernelLog()
        names = function_names(copy)[:PLACES - 1] + [hex(offset)]
        aid = subprocess.run([TEST_AIDS, "uprobe-close", copy, str(target.pid), "direct"],
                             input="\n".join(names) + "\n", capture_output=True, text=True,
                             timeout=120)
        assert aid.returncode == -signal.SIGKILL, aid.stderr
        time.sleep(1)
        leaked = code_byte(target.pid, copy, offset) == 0xCC
        lines = log.leaks()
        if not leaked:
            pytest.skip(f"this kernel finished the plain close at slot_tp_call ({lines} "
                        "leak lines): no leaked breakpoint there to take away")
        traced(str(tmp_path / "second.jsonl"))
        assert code_byte(target.pid, copy, offset) == own
        assert target.poll() is None, "the target died"
    finally:
        target.kill()
        target.wait()
