"""--numeric and --stop-on-nonfinite against the reference's numeric mode, on real
CPython + real PyTorch: stats read from outside while the thread that owns the tensor
is held at the probe, compared event for event (tests/numeric_compare.py says how
close is equal), in launch mode, --pid and --tail; the stop at the first NaN; every
hold released when evmbpf or the target is killed in the middle of one."""
import json
import os
import signal
import subprocess
import sys

import pytest

from evmbpf_testlib import (EVMBPF, FULL_MATRIX, HOST_PYTHON, OWN_WORKLOADS, RUN_WORKLOAD, Attached,
                            chroot_ensure, chroot_target, load, run_launch, run_reference,
                            host_kwargs, wait_for_line)
from numeric_compare import compare_numeric, count_stats

pytestmark = pytest.mark.root

VALUES = os.path.join(OWN_WORKLOADS, "numeric_values.py")
NONFINITE = os.path.join(OWN_WORKLOADS, "nonfinite.py")
VALUES_17 = os.path.join(OWN_WORKLOADS, "numeric_values_torch17.py")
KWARGS = host_kwargs()
# The cells past the first few take minutes on a loaded 2-CPU machine (a BPF load each):
# behind the matrix's flag, like test_matrix.py's slow cells.
full = pytest.mark.skipif(not FULL_MATRIX, reason="slow: EVMBPF_FULL_MATRIX=1 runs it")


@pytest.fixture(scope="module")
def ref_values(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ref") / "values.jsonl")
    r = run_reference(VALUES, out, extra=["--numeric"])
    assert r.returncode == 0, r.stderr
    return load(out)


def check_header(events, stop=False):
    config = events[0]["config"]
    assert config["numeric"] is True
    assert config["stop_on_nonfinite"] is stop


def read_stats(path):
    with open(path) as handle:
        return json.load(handle)


def test_numeric_launch_matches_reference(evmbpf, ref_values, tmp_path):
    out, stats = str(tmp_path / "t.jsonl"), str(tmp_path / "stats.json")
    r = run_launch(VALUES, out, evmbpf_args=["--numeric", "--stats", stats])
    assert r.returncode == 0, r.stderr
    # small tensors are read by the probe itself (no hold), the large ones while held
    counters = read_stats(stats)
    assert counters["tensor_bytes"] > 100 and counters["holds"] >= 1, counters
    got = load(out)
    check_header(got)
    assert count_stats(got) > 100  # the workload's tensors, all of them with stats
    compare_numeric(ref_values, got, kwargs=KWARGS)
    assert "without stats" not in r.stderr, r.stderr
    # streamed: the enter line has no stats, its input_numeric follows with them
    for index, event in enumerate(got):
        if event["event"] == "enter":
            assert count_stats([event]) == 0
            follow = got[index + 1]
            assert follow["event"] == "input_numeric" and follow["call"] == event["call"]


def test_numeric_held_path_matches_reference(evmbpf, ref_values, tmp_path):
    """Every tensor read from its held thread (the probe reads none): the same stats."""
    out, stats = str(tmp_path / "t.jsonl"), str(tmp_path / "stats.json")
    env = dict(os.environ, EVMBPF_NUMERIC_PROBE_BYTES="0")
    r = run_launch(VALUES, out, evmbpf_args=["--numeric", "--stats", stats], env=env)
    assert r.returncode == 0, r.stderr
    counters = read_stats(stats)
    assert counters["tensor_bytes"] == 0 and counters["holds"] > 50, counters
    got = load(out)
    assert count_stats(got) > 100
    compare_numeric(ref_values, got, kwargs=KWARGS)


@full
def test_numeric_pid_matches_reference(evmbpf, ref_values, tmp_path):
    out = str(tmp_path / "t.jsonl")
    run = Attached(VALUES, out, evmbpf_args=["--numeric"])
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    assert run.target_rc == 0, run.target_err
    got = load(out)
    check_header(got)
    compare_numeric(ref_values, got, kwargs=KWARGS)
    assert "without stats" not in run.tracer_err, run.tracer_err


def test_numeric_tail_matches_reference(evmbpf, tmp_path):
    """Tail mode: the buffered enter carries the stats the frame's list gained."""
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "t.jsonl")
    assert run_reference(VALUES, ref, extra=["--numeric", "--tail", "25"]).returncode == 0
    r = run_launch(VALUES, out, evmbpf_args=["--numeric", "--tail", "25"])
    assert r.returncode == 0, r.stderr
    ref_events, got = load(ref), load(out)
    enters = [e for e in got if e["event"] == "enter"]
    assert enters and any("stats" in a for e in enters for a in e["args"])
    compare_numeric(ref_events, got, kwargs=KWARGS)


def stopped(pid):
    with open(f"/proc/{pid}/status") as handle:
        return any(line.startswith("State:") and "T" in line.split()[1] for line in handle)


def check_traceback(ref, got):
    """The error's traceback: the held thread's frames read from outside. The workload's
    own frames (file, line, function, source line and on 3.11/3.12 the ^^^ line) and the
    exception's line equal the reference's; torch's _call_impl frames are at the call
    without hooks, and the reference's own frames exist only in-process."""
    error = next(e for e in got if e["event"] == "error")
    want = next(e for e in ref if e["event"] == "error")
    assert error["traceback"][-1] == want["traceback"][-1]
    assert error["traceback"][-1].startswith("evalmetry.debug.NonFiniteOutput: block.log ")

    def own(tb):
        return [item for item in tb if "/workloads/" in item.splitlines()[0]]
    assert len(own(want["traceback"])) == 3
    assert own(error["traceback"]) == own(want["traceback"])
    # the innermost frame is the culprit's caller, at the call that returned the NaN
    assert error["traceback"][-2].startswith(own(want["traceback"])[-1])


def test_stop_on_nonfinite_launch(evmbpf, tmp_path):
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "t.jsonl")
    r = run_reference(NONFINITE, ref, extra=["--stop-on-nonfinite"])
    assert r.returncode != 0 and "NonFiniteOutput" in r.stderr
    tracer = subprocess.Popen([EVMBPF, "--stop-on-nonfinite", "--out", out, "--",
                               HOST_PYTHON, RUN_WORKLOAD, NONFINITE],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = wait_for_line(tracer.stderr, "kill -CONT", 120)
    pid = int(said.rsplit("kill -CONT ", 1)[1].split()[0])
    assert "block.log produced a non-finite output" in said
    assert stopped(pid)
    got = load(out)
    check_header(got, stop=True)
    compare_numeric(load(ref), got, kwargs=KWARGS)
    assert got[-1]["event"] == "unwound" and got[-1]["reason"] == "session ended"
    check_traceback(load(ref), got)
    os.kill(pid, signal.SIGCONT)
    stdout, _ = tracer.communicate(timeout=60)
    assert "work done" in stdout  # the target ran to its end
    assert tracer.returncode == 3


@full
def test_stop_on_nonfinite_pid(evmbpf, tmp_path):
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "t.jsonl")
    run_reference(NONFINITE, ref, extra=["--stop-on-nonfinite"])
    run = Attached(NONFINITE, out, evmbpf_args=["--stop-on-nonfinite"])
    run.release()
    _, err = run.tracer.communicate(timeout=120)
    assert run.tracer.returncode == 3, err
    assert f"kill -CONT {run.pid}" in err
    assert stopped(run.pid)
    compare_numeric(load(ref), load(out), kwargs=KWARGS)
    check_traceback(load(ref), load(out))
    os.kill(run.pid, signal.SIGCONT)
    stdout, _ = run.target.communicate(timeout=60)
    assert run.target.returncode == 0 and "work done" in stdout


def test_evmbpf_killed_while_holding_leaves_target_running(evmbpf, tmp_path):
    out = str(tmp_path / "t.jsonl")
    env = dict(os.environ, EVMBPF_TEST_NUMERIC_HOLD_MS="5000")
    run = Attached(NONFINITE, out, evmbpf_args=["--numeric"], env=None)
    run.tracer.kill()
    run.tracer.wait()
    # again, with a hold in place when evmbpf is killed
    tracer = subprocess.Popen([EVMBPF, "--pid", str(run.pid), "--out", out, "--force",
                               "--numeric"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    wait_for_line(tracer.stderr, "attached to", 60)
    run.release()
    wait_for_line(tracer.stderr, "holding thread", 60)
    tracer.kill()
    tracer.wait()
    stdout, err = run.target.communicate(timeout=60)
    assert run.target.returncode == 0, err
    assert "work done" in stdout


@full
def test_target_killed_while_held_leaves_a_complete_trace(evmbpf, tmp_path):
    out = str(tmp_path / "t.jsonl")
    env = dict(os.environ, EVMBPF_TEST_NUMERIC_HOLD_MS="3000")
    tracer = subprocess.Popen([EVMBPF, "--numeric", "--out", out, "--", HOST_PYTHON,
                               RUN_WORKLOAD, NONFINITE], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    said = wait_for_line(tracer.stderr, "holding thread", 120)
    pid = int(said.rsplit("holding thread ", 1)[1].split()[0])
    os.kill(pid, signal.SIGKILL)
    tracer.communicate(timeout=60)
    assert tracer.returncode == 128 + signal.SIGKILL
    got = load(out)
    kinds = [e["event"] for e in got]
    assert kinds[0] == "header" and "error" in kinds
    error = got[kinds.index("error")]
    assert error["exc_type"] == "SIGKILL"
    assert all(k == "unwound" for k in kinds[kinds.index("error") + 1:])


def test_debugger_attached_is_refused(evmbpf, tmp_path):
    out = str(tmp_path / "t.jsonl")
    target = subprocess.Popen([HOST_PYTHON, "-c", "import time; time.sleep(60)"])
    # a stand-in debugger: a process that PTRACE_SEIZEs the target and waits
    debugger = subprocess.Popen([sys.executable, "-c", (
        "import ctypes, sys, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"assert libc.ptrace(0x4206, {target.pid}, 0, 0) == 0\n"
        "print('seized', flush=True)\ntime.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert debugger.stdout.readline().strip() == "seized"
        r = subprocess.run([EVMBPF, "--pid", str(target.pid), "--numeric", "--out", out],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1
        assert f"already traced by process {debugger.pid}" in r.stderr
        assert len(r.stderr.strip().splitlines()[-1]) < 300
        assert not os.path.exists(out)
    finally:
        debugger.kill()
        target.kill()
        debugger.wait()
        target.wait()


@full
@pytest.mark.parametrize("chroot", ["trixie", "sid"])
def test_numeric_chroot_matches_reference(evmbpf, chroot, tmp_path):
    """torch 2.6 (Python 3.13) and torch 2.14 (Python 3.14): their StorageImpl layouts."""
    err = chroot_ensure(chroot)
    if err:
        pytest.skip(f"the {chroot} chroot cannot be built here: {err}")
    target = chroot_target(chroot).with_outdir(str(tmp_path))
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "t.jsonl")
    assert target.reference(VALUES, ref, extra=["--numeric"]).returncode == 0
    r = target.launch(VALUES, out, evmbpf_args=["--numeric"])
    assert r.returncode == 0, r.stderr
    got = load(out)
    assert count_stats(got) > 100
    compare_numeric(load(ref), got, kwargs=target.kwargs)
    assert "without stats" not in r.stderr, r.stderr


@full
def test_numeric_bullseye_matches_reference(evmbpf, tmp_path):
    """torch 1.7 (Python 3.9): its StorageImpl measured; the reference's numeric mode runs
    there with the three torch functions it lacks given by the workload's shim."""
    err = chroot_ensure("bullseye")
    if err:
        pytest.skip(f"the bullseye chroot cannot be built here: {err}")
    target = chroot_target("bullseye").with_outdir(str(tmp_path))
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "t.jsonl")
    r = target.reference(VALUES_17, ref, extra=["--numeric"])
    assert r.returncode == 0, r.stderr
    r = target.launch(VALUES_17, out, evmbpf_args=["--numeric"])
    assert r.returncode == 0, r.stderr
    got = load(out)
    assert count_stats(got) > 100
    compare_numeric(load(ref), got, kwargs=target.kwargs)
    assert "without stats" not in r.stderr, r.stderr


def _all_stats(events):
    found = []
    def walk(v):
        if isinstance(v, dict):
            if "stats" in v:
                found.append(v["stats"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(events)
    return found


def test_numeric_two_pids_match_reference(evmbpf, ref_values, tmp_path):
    """--numeric --pid A --pid B: each process's threads held apart (one is continued only
    once its own records are read), each trace equal to the reference's."""
    tmp = str(tmp_path)
    go = os.path.join(tmp, "go")
    jobs = [subprocess.Popen([HOST_PYTHON, RUN_WORKLOAD, VALUES, "--wait-for", go],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    pids = [int(j.stdout.readline().split("pid=")[1]) for j in jobs]
    out, stats = os.path.join(tmp, "t-%p.jsonl"), os.path.join(tmp, "stats.json")
    tracer = subprocess.Popen([EVMBPF, "--numeric", "--pid", str(pids[0]), "--pid",
                               str(pids[1]), "--out", out], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    wait_for_line(tracer.stderr, f"attached to {pids[0]}", 120)
    wait_for_line(tracer.stderr, f"attached to {pids[1]}", 120)
    open(go, "w").close()
    for j in jobs:
        j.communicate(timeout=300)
        assert j.returncode == 0
    err = tracer.communicate(timeout=120)[1]
    assert tracer.returncode == 0, err
    assert "without stats" not in err, err
    for pid in pids:
        got = load(os.path.join(tmp, f"t-{pid}.jsonl"))
        check_header(got)
        assert count_stats(got) > 100
        compare_numeric(ref_values, got, kwargs=KWARGS)


def test_numeric_follow_is_refused(evmbpf, tmp_path):
    r = subprocess.run([EVMBPF, "--numeric", "--follow", "--out", str(tmp_path / "t-%p.jsonl"),
                        "--", "true"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--follow" in r.stderr, r.stderr
