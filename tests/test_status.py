"""The status line while tracing (stderr a terminal: a pty here) and the summary line at
the end (in every case), against the trace file they describe; -q silences both."""
import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, RUN_WORKLOAD, load,
                            without_machine_notes)

pytestmark = pytest.mark.root

WORKLOAD = os.path.join(OWN_WORKLOADS, "fault_model.py")
STATUS = re.compile(r"(\d+) events? \((\d+)/s\), (\d+) forwards?, phase (\S+), (\d+) dropped"
                    r"(?:, ([\d.]+ [kMGT]?B)|, last (\d+) kept in memory)?")
SUMMARY = re.compile(r"evmbpf: (\d+) events?(?: \(the last (\d+) written\))?, (\d+) forwards?, "
                     r"(\d+) dropped(?:, ([\d.]+ [kMGT]?B))? in ([\d.]+) s to (.+)")


def command(out, seconds, evmbpf_args=()):
    return [EVMBPF, "--out", out, *evmbpf_args, "--", HOST_PYTHON, RUN_WORKLOAD, WORKLOAD,
            "--phase", "status_check"], dict(os.environ, FAULT_SECONDS=str(seconds))


def run_on_pty(cmd, env, cols, until=None):
    """cmd with its stderr on a pty of `cols` columns; all that was written there.
    until=(seen, path): path is created once seen(what was written so far) is true (the
    workload, run with FAULT_UNTIL=path, then stops)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave)
    os.close(slave)
    data, deadline = b"", time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the pty is gone
                break
            if not chunk:
                break
            data += chunk
            if until and until[0](data.decode(errors="replace")):
                open(until[1], "w").close()
                until = None
        elif p.poll() is not None:
            break
    os.close(master)
    assert p.wait(timeout=60) == 0, data.decode(errors="replace")
    return data.decode()


def human(n):
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def check_summary(line, out):
    """The summary line says what is in the file."""
    m = SUMMARY.fullmatch(line)
    assert m, line
    events = load(out, marks=True)  # every line of the file, the closing mark too
    assert int(m.group(1)) == len(events)
    assert int(m.group(3)) == sum(e["event"] == "forward" for e in events)
    assert int(m.group(4)) == sum(e.get("count", 0) for e in events if e["event"] == "dropped")
    assert m.group(5) == human(os.path.getsize(out))
    assert m.group(7) == out
    return m


def busy_redraws(screen):
    """How many status lines counted events: the forwards ran through them."""
    return sum(bool(m) and int(m.group(1)) > 0 for m in
               (STATUS.search(seg) for seg in screen.split("\r")))


def test_status_line_on_a_terminal(tmp_path):
    """The workload runs until three lines with events were drawn (at most 120 s): on a
    slow machine the forwards must not end before the line has redrawn twice."""
    out = str(tmp_path / "t.jsonl")
    stop = str(tmp_path / "stop")
    cmd, env = command(out, 120)
    env["FAULT_UNTIL"] = stop
    screen = run_on_pty(cmd, env, cols=200, until=(lambda s: busy_redraws(s) >= 3, stop))
    # a line is redrawn in place: each redraw starts with \r and clears to the end
    redraws = [seg[:-len("\x1b[K")] for seg in screen.split("\r")
               if seg.endswith("\x1b[K") and seg != "\x1b[K"]
    statuses = [STATUS.fullmatch(r) for r in redraws]
    assert redraws and all(statuses), redraws
    counts = [int(m.group(1)) for m in statuses]
    assert counts == sorted(counts) and counts[-1] > 0, counts
    # a rate while events come; at least two redraws while the forwards run
    assert all(int(b.group(2)) > 0 for a, b in zip(statuses, statuses[1:])
               if b.group(1) != a.group(1)), redraws
    assert sum(int(m.group(1)) > 0 for m in statuses) >= 2, redraws
    # run() is in phase(...); before the first module call there is no phase yet
    assert {m.group(4) for m in statuses if int(m.group(1))} == {"status_check"}, redraws
    assert all(m.group(4) == "-" for m in statuses if not int(m.group(1))), redraws
    assert all(m.group(6) for m in statuses), redraws  # the file's size
    # cleared at the end, then the summary on a line of its own
    tail = screen.rsplit("\r\x1b[K", 1)[1]
    summary = [line for line in tail.replace("\r\n", "\n").split("\n")
               if line.startswith("evmbpf: ")]
    assert len(summary) == 1, tail
    m = check_summary(summary[0], out)
    assert int(m.group(1)) >= counts[-1]


def test_status_line_fits_a_narrow_terminal(tmp_path):
    out = str(tmp_path / "t.jsonl")
    cmd, env = command(out, 2.5, ["--tail", "100"])
    screen = run_on_pty(cmd, env, cols=40)
    redraws = [seg[:-3] for seg in screen.split("\r") if seg.endswith("\x1b[K") and seg != "\x1b[K"]
    assert redraws, screen
    assert all(len(r) <= 39 and re.match(r"\d+ events \(", r) for r in redraws), redraws
    summary = [piece.replace("\x1b[K", "") for piece in re.split(r"\r\n|\n|\r", screen)]
    summary = [line for line in summary if line.startswith("evmbpf: ")][-1]
    m = SUMMARY.fullmatch(summary)
    assert m and m.group(2) == "100", summary
    # the last 100, and the dropped event that counts the rest (and, where breakpoints do
    # not fire, the closing line that says what was not observable)
    assert len([e for e in load(out) if e["event"] != "unobservable"]) == 101


def idle_python(out, seconds, evmbpf_args=()):
    """A Python that makes no module call: quick to start, and long enough for a line."""
    return [EVMBPF, "--out", out, *evmbpf_args, "--", HOST_PYTHON, "-c",
            f"import time; time.sleep({seconds})"]


def test_quiet_on_a_terminal(tmp_path):
    out = str(tmp_path / "t.jsonl")
    screen = run_on_pty(idle_python(out, 1.6, ["-q"]), os.environ, cols=200)
    assert "\x1b[K" not in screen and "event" not in screen, repr(screen)
    assert "attached to" in screen  # only the status and summary lines go
    assert load(out)[0]["event"] == "header"


def test_summary_without_a_terminal(tmp_path):
    """Not a terminal (a pipe): no status line, no escape codes, the summary line last."""
    out = str(tmp_path / "t.jsonl")
    cmd, env = command(out, 1)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "\x1b" not in r.stderr, repr(r.stderr)
    lines = [line for line in without_machine_notes(r.stderr).splitlines()
             if line.startswith("evmbpf: ")]
    assert len(lines) == 1, r.stderr
    check_summary(lines[0], out)
    # the header's version is --version's (the one EVMBPF_VERSION)
    version = subprocess.run([EVMBPF, "--version"], capture_output=True, text=True).stdout
    assert load(out)[0]["tracer"]["version"] == version.split()[1]
    r = subprocess.run(idle_python(str(tmp_path / "q.jsonl"), 0.1, ["--quiet"]),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "evmbpf: " not in without_machine_notes(r.stderr), r.stderr
    assert "attached to" in r.stderr


def test_summary_to_stdout(tmp_path):
    """--out -: the trace on stdout, the summary (without a size) on stderr."""
    cmd, env = command("-", 0.3)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = SUMMARY.fullmatch(r.stderr.splitlines()[-1])
    assert m and m.group(7) == "stdout" and m.group(5) is None, r.stderr
    assert int(m.group(1)) == len(r.stdout.splitlines())
