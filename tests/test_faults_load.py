"""Load: a streaming soak (the collector's memory stays flat; the 30-minute one with
EVMBPF_SOAK_SECONDS, e.g. EVMBPF_SOAK_SECONDS=1800 pytest -s -k soak
tests/test_faults_load.py), the ring buffer overloaded (drops counted in the trace), the
exit record itself dropped. Figures are printed
(`pytest -s`). Shared helpers: faults_lib.py; the fork server and the full trace the
killed ones are compared with: conftest.py."""
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, RUN_WORKLOAD)
from faults_lib import (FAULT_MODEL, FULL_FORWARDS, MODULES_PER_FORWARD, ROWS, read_jsonl,
                        Tracer)

pytestmark = pytest.mark.root


# ---------------------------------------------------------------- load

def soak(tmp_path, seconds):
    out = str(tmp_path / "soak.jsonl")
    env = dict(os.environ, FAULT_SECONDS=str(seconds))
    proc = subprocess.Popen([EVMBPF, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD,
                             FAULT_MODEL], stderr=subprocess.PIPE, text=True, env=env)
    rss = []
    errors = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()))
    reader.start()
    start = time.monotonic()
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as handle:
                kb = next(int(line.split()[1]) for line in handle if line.startswith("VmRSS"))
            rss.append((round(time.monotonic() - start), kb))
        except (OSError, StopIteration):
            pass
        time.sleep(1)
    reader.join()
    err = errors[0]
    assert proc.returncode == 0, err
    forwards = int(re.search(r"forwards (\d+)", err).group(1))
    size = os.path.getsize(out)
    counts = {}
    with open(out, "rb") as handle:
        for line in handle:
            assert line.endswith(b"\n")
            event = json.loads(line)["event"]
            counts[event] = counts.get(event, 0) + 1
    os.unlink(out)
    # evmbpf's own lines say where and when records were lost (a ring that filled while
    # the collector was off its CPU or stalled on the disk: 1 record in 9.5 M, rarely)
    assert "dropped" not in counts, (counts, err[-2000:])
    assert counts.get("forward") == forwards, (counts, err[-2000:])
    assert counts.get("enter") == counts.get("exit") == forwards * MODULES_PER_FORWARD, \
        (counts, err[-2000:])
    # growth: what the RSS rose to above its first reading after the warm-up (a sample
    # taken while evmbpf frees its rings and objects at the end reads lower: not growth)
    steady = [kb for t, kb in rss if t >= min(10, seconds / 3)]
    growth = max(steady) - steady[0]
    print(f"\nsoak {seconds} s: {forwards} forwards, {counts['enter'] * 2 + forwards} events "
          f"({(counts['enter'] * 2 + forwards) / seconds:.0f}/s), {size / 1e6:.0f} MB, 0 drops; "
          f"evmbpf RSS (s, KiB): {rss[::max(1, len(rss) // 12)]}; growth after warm-up "
          f"{growth} KiB")
    assert growth < 4096, rss


def test_soak_streaming(evmbpf, tmp_path):
    soak(tmp_path, int(os.environ.get("EVMBPF_SOAK_SHORT_SECONDS", "60")))


@pytest.mark.slow
@pytest.mark.skipif("EVMBPF_SOAK_SECONDS" not in os.environ,
                    reason="the long soak runs with EVMBPF_SOAK_SECONDS=1800")
def test_soak_long(evmbpf, tmp_path):
    soak(tmp_path, int(os.environ["EVMBPF_SOAK_SECONDS"]))


def test_ring_buffer_overload(evmbpf, tmp_path):
    """A 1 MiB ring and a consumer stalled for 1.5 s (hidden test knob
    EVMBPF_TEST_STALL_MS): records are dropped, counted, written as `dropped`, and the
    forwards after the stall are whole again."""
    out = str(tmp_path / "t.jsonl")
    env = dict(os.environ, FAULT_SECONDS="4", EVMBPF_TEST_STALL_MS="1500")
    r = subprocess.run([EVMBPF, "--ringbuf-mb", "1", "--out", out, "--", HOST_PYTHON,
                        RUN_WORKLOAD, FAULT_MODEL], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    events, _ = read_jsonl(out)
    dropped = [e for e in events if e["event"] == "dropped"]
    # where they were lost (one event per collector pass that saw drops), and at the end
    assert dropped and all(d["count"] > 0 and d["where"] == "ring buffer" for d in dropped)
    assert "records were dropped" in r.stderr
    forwards = int(re.search(r"forwards (\d+)", r.stderr).group(1))
    # recovery: the last 100 forwards are whole
    by_forward = {}
    for e in events:
        if e["event"] in ("enter", "exit"):
            by_forward.setdefault(e["forward"], []).append(e)
    last = sorted(by_forward)[-100:]
    assert all(len(by_forward[f]) == 2 * MODULES_PER_FORWARD for f in last)
    assert not [e for e in events if e.get("orphan") and e["forward"] in last]
    traced = len([e for e in events if e["event"] == "forward"])
    print(f"\noverload: {sum(d['count'] for d in dropped)} records dropped and counted; {traced} of "
          f"{forwards} forwards seen; the last 100 forwards whole")


def test_exit_record_dropped_still_names_the_signal(server, tmp_path):
    """--pid: evmbpf is not the target's parent and cannot wait for it; its exit status
    comes in a ring buffer record, which a full ring can drop (a small record usually
    still fits, so the loss is forced: EVMBPF_TEST_LOSE_EXIT, tests only). The trace
    must still end with the signal's error, from the status the BPF side keeps."""
    out = str(tmp_path / "t.jsonl")
    pid, go, _ = server.fork(FULL_FORWARDS, ROWS)
    tracer = Tracer(pid, out, env=dict(os.environ, EVMBPF_TEST_LOSE_EXIT="1"))
    open(go, "w").close()
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    status = server.reap(pid)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert tracer.wait() == 0, tracer.err
    tracer.assert_probes_gone()
    assert "no exit record came" in tracer.err, tracer.err
    events, _ = read_jsonl(out)
    errors = [e for e in events if e["event"] == "error"]
    assert errors and errors[-1]["exc_type"] == "SIGKILL", events[-5:]
    assert events[-1]["event"] == "unwound" and events[-1]["reason"] == "process exited"
