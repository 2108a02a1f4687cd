"""The target dies: SIGKILL at random points, a segfault in native code, os._exit, an
uncaught exception. The trace ends as the reference would have it, with the signal
named and the frames left open unwound. Figures are printed
(`pytest -s`). Shared helpers: faults_lib.py; the fork server and the full trace the
killed ones are compared with: conftest.py."""
import os
import random
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import EVMBPF, FULL_MATRIX, HOST_PYTHON, REF_WORKLOADS, RUN_WORKLOAD, proc_stat
from faults_lib import (FAULT_MODEL, FULL_FORWARDS, ROWS, check_killed_trace, read_jsonl,
                        Tracer)

pytestmark = pytest.mark.root


# ---------------------------------------------------------------- the target dies


def cpu_ticks_since(pid, start):
    """The process's CPU seconds (user + system) since `start` (None: since it began)."""
    try:
        fields = proc_stat(pid)
    except OSError:
        return float("inf")  # gone: nothing to wait for
    now = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return now if start is None else now - start


def test_sigkill_random_points(server, full_trace, tmp_path):
    """SIGKILL (what the OOM killer sends) at random points inside forwards: 20 trials in
    the default run, 50 with EVMBPF_FULL_MATRIX=1, EVMBPF_KILL_TRIALS=N to choose."""
    full, _ = full_trace
    seed = int(os.environ.get("EVMBPF_FAULT_SEED", time.time_ns() % 100000))
    rng = random.Random(seed)
    full_run = FULL_MATRIX
    trials = int(os.environ.get("EVMBPF_KILL_TRIALS", "50" if full_run else "20"))
    started = time.monotonic()
    figures = []
    for trial in range(trials):
        out = str(tmp_path / f"kill{trial}.jsonl")
        pid, go, _ = server.fork(FULL_FORWARDS, ROWS)
        tracer = Tracer(pid, out)
        delay = rng.uniform(0.0, 0.5)
        open(go, "w").close()
        # the delay counts from the forwards running (50 ms of the target's CPU), not from
        # the go: the first module call's hold (its module tree read) takes as long as a
        # loaded machine makes it, and a kill there is outside every forward
        start = cpu_ticks_since(pid, None)
        deadline = time.monotonic() + 60
        while cpu_ticks_since(pid, start) < 0.05 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        status = server.reap(pid)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        assert tracer.wait() == 0, tracer.err
        tracer.assert_probes_gone()
        events, _ = read_jsonl(out)
        try:
            n, depth = check_killed_trace(events, full, "SIGKILL")
        except AssertionError as exc:
            raise AssertionError(f"trial {trial} (seed {seed}, delay {delay:.3f}): {exc}")
        figures.append((delay, n, depth))
        os.unlink(out)
    took = time.monotonic() - started
    inside = sum(1 for f in figures if f[2])
    print(f"\nSIGKILL: {trials} trials in {took:.0f} s (seed {seed}); {inside} died inside a "
          f"forward (stack depth {min(f[2] for f in figures)}-{max(f[2] for f in figures)}); "
          f"events before the kill {min(f[1] for f in figures)}-{max(f[1] for f in figures)}; "
          f"0 events lost, 0 drops")
    assert inside >= trials * 0.8


@pytest.mark.parametrize("pairs", [False, True], ids=["", "leaf-pairs"])
@pytest.mark.parametrize("how,signame,rc", [("segv", "SIGSEGV", 128 + 11),
                                            ("exit", "exit", 3)])
def test_target_dies_in_native_code_or_os_exit(evmbpf, how, signame, rc, pairs, tmp_path):
    """A segfault in native code (ctypes.string_at(0)) or os._exit(3) inside
    blocks.1.inner during forward 3 (launch mode); the prefix is the clean run's. Also
    with one record a leaf call (EVMBPF_LEAF_PAIRS=1): blocks.1.inner dies before its
    first child, its enter kept back, sent by the thread's exit record."""
    env = dict(os.environ, FAULT_FORWARDS="6")
    env.pop("EVMBPF_LEAF_PAIRS", None)
    if pairs:
        env["EVMBPF_LEAF_PAIRS"] = "1"
    clean, died = str(tmp_path / "clean.jsonl"), str(tmp_path / "died.jsonl")
    r = subprocess.run([EVMBPF, "--out", clean, "--", HOST_PYTHON, RUN_WORKLOAD, FAULT_MODEL],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    env["FAULT_DIE"] = how
    r = subprocess.run([EVMBPF, "--out", died, "--", HOST_PYTHON, RUN_WORKLOAD, FAULT_MODEL],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == rc, r.stderr
    full, _ = read_jsonl(clean)
    events, _ = read_jsonl(died)
    n, depth = check_killed_trace(events, full, signame)
    unwound = [e["module"] for e in events if e["event"] == "unwound"]
    # the 4th forward: the first block went through, the second died in its inner module
    assert unwound == ["<root>", "blocks.1", "blocks.1.inner"]
    assert events[-1]["forward"] == 4
    print(f"\n{how}: {n} events kept, {depth} frames unwound, evmbpf rc {r.returncode}")


def test_uncaught_exception_error_event(evmbpf, tmp_path):
    out = str(tmp_path / "t.jsonl")
    env = dict(os.environ, FAULT_FORWARDS="6", FAULT_DIE="raise")
    r = subprocess.run([EVMBPF, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD, FAULT_MODEL],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1, r.stderr
    events, _ = read_jsonl(out)
    error = next(e for e in events if e["event"] == "error")
    assert error["exc_type"] == "RuntimeError"
    assert error["message"] == "inner failed on purpose"
    assert error["module"] == "blocks.1.inner" and error["forward"] == 4
    tb = error["traceback"]
    assert tb[0] == "Traceback (most recent call last):\n"
    assert tb[-1] == "RuntimeError: inner failed on purpose\n"
    assert any("fault_model.py" in line and "in forward" in line for line in tb)
    assert any('raise RuntimeError("inner failed on purpose")' in line for line in tb)
    # the frames the exception left stay on the stack, as the in-process tracer leaves them
    unwound = [e for e in events if e["event"] == "unwound"]
    assert [e["module"] for e in unwound] == ["<root>", "blocks.1", "blocks.1.inner"]
    assert {e["reason"] for e in unwound} == {"session ended"}
    # the reference workload too
    out2 = str(tmp_path / "raises.jsonl")
    r = subprocess.run([EVMBPF, "--out", out2, "--", HOST_PYTHON, RUN_WORKLOAD,
                        os.path.join(REF_WORKLOADS, "raises.py")],
                       capture_output=True, text=True, timeout=120)
    events, _ = read_jsonl(out2)
    error = next(e for e in events if e["event"] == "error")
    assert error["exc_type"] == "RuntimeError" and error["traceback"][-1] == \
        "RuntimeError: CUDA out of memory (simulated)\n"
