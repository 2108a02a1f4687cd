"""Processes: forks are not traced without --follow, an exec ends the trace, a pid that
exits while evmbpf attaches, a target its user stopped stays stopped. Figures are printed
(`pytest -s`). Shared helpers: faults_lib.py; the fork server and the full trace the
killed ones are compared with: conftest.py."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, RUN_WORKLOAD, Attached, code_byte,
                            proc_state, slot_tp_call_place, wait_for_line)
from faults_lib import (open_stack, read_jsonl)

pytestmark = pytest.mark.root


# ---------------------------------------------------------------- processes

def test_fork_children_not_traced(evmbpf, tmp_path):
    """os.fork() children and DataLoader workers (num_workers=2) call the same model:
    none of their calls may reach the trace."""
    out = str(tmp_path / "t.jsonl")
    r = subprocess.run([EVMBPF, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD,
                        os.path.join(OWN_WORKLOADS, "fault_forks.py")],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    plan = json.loads(re.search(r"forks (\{.*\})", r.stderr).group(1))
    events, _ = read_jsonl(out)
    modules = [e for e in events if "tid" in e]
    tids = {e["tid"] for e in modules}
    assert tids == {plan["main_tid"]}, (tids, plan)
    assert not tids & set(plan["children"])
    forwards = [e for e in events if e["event"] == "forward"]
    assert len(forwards) == plan["parent_forwards"], (len(forwards), plan)
    assert not open_stack(modules)[plan["main_tid"]]
    print(f"\nfork: {len(plan['children'])} children ({plan['child_forwards']} forwards "
          f"among them) untraced; {len(forwards)} parent forwards traced")


@pytest.mark.parametrize("mode", ["launch", "pid"])
def test_an_untraced_fork_keeps_no_breakpoint(evmbpf, mode, tmp_path, monkeypatch):
    """A child forked by the traced process, not traced (no --follow), got a copy of its
    parent's code with the breakpoints in it. A uprobe_multi link for the parent's pid runs
    nothing in the child, and the kernel left them there: the child trapped twice at each
    call of a Python class (1,049 ns a call against 50 untraced, on a KVM guest). evmbpf
    takes them away at the fork (probes_sweep): while the child still lives, its code at
    slot_tp_call is the interpreter's own again and the parent's is still the breakpoint;
    the parent's 5 forwards are traced, none of the child's."""
    folder = tmp_path / "forks"
    folder.mkdir()
    monkeypatch.setenv("FORK_DIR", str(folder))
    out = str(tmp_path / "t.jsonl")
    workload = os.path.join(OWN_WORKLOADS, "fork_untraced.py")
    if mode == "launch":
        tracer = subprocess.Popen([EVMBPF, "-v", "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD,
                                   workload], stderr=subprocess.PIPE, text=True)
        seen = wait_for_line(tracer.stderr, "slot_tp_call at", 120)
        pid = int(re.search(r"attached to (\d+)", seen).group(1))
    else:
        run = Attached(workload, out, evmbpf_args=["-v"])
        tracer, pid = run.tracer, run.pid
        seen = wait_for_line(tracer.stderr, "slot_tp_call at", 60)
        run.release()
    exe, offset = slot_tp_call_place(seen)
    try:
        deadline = time.monotonic() + 120
        while not os.listdir(folder):
            assert time.monotonic() < deadline, "the child never ran"
            time.sleep(0.05)
        child = int(os.listdir(folder)[0].split("-")[1])
        deadline = time.monotonic() + 10
        while code_byte(child, exe, offset) == 0xCC:
            assert time.monotonic() < deadline, "the fork kept its parent's breakpoint"
            time.sleep(0.05)
        assert code_byte(pid, exe, offset) == 0xCC, "the parent's probe went too"
    finally:
        (folder / "done").touch()
    _, err = tracer.communicate(timeout=120)
    if mode == "pid":
        assert run.target.wait(timeout=60) == 0, run.target.stderr.read()
    assert tracer.returncode == 0, err
    events, _ = read_jsonl(out)
    assert len([e for e in events if e["event"] == "forward"]) == 5
    assert {e["tid"] for e in events if "tid" in e} == {pid}
    assert not [e for e in events if e["event"] in ("unwound", "error", "dropped")]


@pytest.mark.parametrize("mode", ["launch", "pid"])
def test_exec_ends_the_trace(evmbpf, mode, tmp_path):
    out = str(tmp_path / "t.jsonl")
    workload = os.path.join(OWN_WORKLOADS, "fault_exec.py")
    if mode == "launch":
        r = subprocess.run([EVMBPF, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD, workload],
                           capture_output=True, text=True, timeout=180)
        rc, err = r.returncode, r.stderr
    else:
        run = Attached(workload, out)
        run.release()
        run.finish()
        assert run.target_rc == 0, run.target_err
        rc, err = run.tracer_rc, run.tracer_err + run.target_err
    assert rc == 0, err
    assert "exec'd another program" in err
    assert "after exec: 5 forwards" in err
    events, _ = read_jsonl(out)
    forwards = [e for e in events if e["event"] == "forward"]
    assert len(forwards) == 3
    assert not [e for e in events if e["event"] in ("unwound", "error", "dropped")]


def test_pid_exits_while_attaching(evmbpf, tmp_path):
    """A process that exits while evmbpf attaches (and stays an unreaped zombie): a clear
    error or a clean end, never a hang."""
    outcomes = {}
    for trial, delay in enumerate([0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6]):
        target = subprocess.Popen([HOST_PYTHON, "-c",
                                   f"import time; time.sleep({delay})"])
        time.sleep(0.03)
        out = str(tmp_path / f"t{trial}.jsonl")
        t0 = time.monotonic()
        r = subprocess.run([EVMBPF, "--pid", str(target.pid), "--out", out],
                           capture_output=True, text=True, timeout=120)  # a hang fails here
        took = time.monotonic() - t0
        target.wait()
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        if r.returncode:
            assert len(lines) == 1 and lines[0].startswith("evmbpf: "), r.stderr
            # what happened, not what failed because of it
            assert f"process {target.pid} exited while evmbpf was" in lines[0], lines[0]
            assert not os.path.exists(out)
            outcomes.setdefault("refused", []).append(lines[0])
        else:
            read_jsonl(out)
            outcomes.setdefault("clean end", []).append(round(took, 2))
    print(f"\nexits while attaching: {outcomes}")


def test_stopped_target_stays_stopped(evmbpf, tmp_path):
    """--pid of a process its user has stopped (SIGSTOP, ^Z): evmbpf reads it as it is
    and must not continue it; it runs on once its user continues it."""
    target = subprocess.Popen([HOST_PYTHON, "-c", "import time; time.sleep(1.5)"])
    time.sleep(0.3)
    os.kill(target.pid, signal.SIGSTOP)

    deadline = time.monotonic() + 10
    while proc_state(target.pid) != "T":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    out = str(tmp_path / "t.jsonl")
    tracer = subprocess.Popen([EVMBPF, "--pid", str(target.pid), "--out", out],
                              stderr=subprocess.PIPE, text=True)
    wait_for_line(tracer.stderr, "attached to", 60)
    time.sleep(0.5)
    # stopped still: "T", or "t" while evmbpf has it seized (its group-stop kept)
    assert proc_state(target.pid) in "tT", "evmbpf continued a process its user had stopped"
    os.kill(target.pid, signal.SIGCONT)
    assert target.wait(timeout=30) == 0
    assert tracer.wait(timeout=30) == 0, tracer.stderr.read()
    read_jsonl(out)
