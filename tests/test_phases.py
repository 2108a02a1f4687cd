"""Phases rebuilt from the host's own markers, and from --phase rules."""
import glob
import json
import os
import re
import subprocess
import time
from contextlib import contextmanager

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, PYENV, REF_WORKLOADS,
                            REFERENCE, TEST_AIDS, compare_traces, load, run_launch,
                            run_reference, host_kwargs, wait_for_line, Attached, chroot_dir)

pytestmark = pytest.mark.root
KWARGS = host_kwargs()


@pytest.mark.parametrize("name", ["phases_more.py"])
def test_markers_match_reference(evmbpf, tmp_path, name):
    workload = os.path.join(OWN_WORKLOADS, name)
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    run_reference(workload, ref)
    result = run_launch(workload, got)
    assert result.returncode == 0, result.stderr
    events = load(got)
    assert {e["phase"] for e in events if e["event"] == "enter"} >= {
        "other", "generate", "model_forward", "signal_collection", "scoring"}
    compare_traces(load(ref), events, kwargs=KWARGS)


def test_markers_attached_by_pid(evmbpf, tmp_path):
    workload = os.path.join(OWN_WORKLOADS, "phases_more.py")
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    run_reference(workload, ref)
    run = Attached(workload, got)
    run.release()
    run.finish()
    compare_traces(load(ref), load(got), kwargs=KWARGS)


def program_runs(pid):
    """Run counts of the BPF programs process pid holds, by name (bpf_stats must be on)."""
    counts = {}
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as handle:
                info = dict(line.split(":", 1) for line in handle.read().splitlines() if ":" in line)
        except OSError:
            continue
        if "prog_id" in info and "run_cnt" in info:
            counts[int(info["prog_id"])] = int(info["run_cnt"])
    shown = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True,
                                      text=True, check=True).stdout)
    names = {p["id"]: p.get("name") for p in shown}
    return {names.get(i, str(i)): n for i, n in counts.items()}


def wait_for_file(path, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.02)


STATS = "/proc/sys/kernel/bpf_stats_enabled"


@contextmanager
def stepped_under_stats(workload, tmp_path):
    """A workload of tests/workloads that waits at its steps (steps/goN, steps/doneN),
    with kernel.bpf_stats_enabled on (as it was after), and `evmbpf --pid -v` on it, once
    it has said it is attached: (steps, out, target, tracer, what it said until then).
    Both are killed after the block where still running."""
    steps, out = tmp_path / "steps", str(tmp_path / "t.jsonl")
    steps.mkdir()
    with open(STATS) as handle:
        stats_were = handle.read().strip()
    target = subprocess.Popen([HOST_PYTHON, os.path.join(OWN_WORKLOADS, workload),
                               REFERENCE, str(steps)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    tracer = None
    try:
        wait_for_line(target.stdout, "ready", 60)
        with open(STATS, "w") as handle:
            handle.write("1")
        tracer = subprocess.Popen([EVMBPF, "--pid", str(target.pid), "--out", out, "-v"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        log = wait_for_line(tracer.stderr, "attached to", 120)
        yield steps, out, target, tracer, log
    finally:
        with open(STATS, "w") as handle:
            handle.write(stats_were)
        for proc in (target, tracer):
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_marker_probe_waits_for_the_hosts_import(evmbpf, tmp_path):
    """The phase markers' probe traps at every `with` and, on 3.11-3.13, at every
    isinstance() against a class with a metaclass: it is placed only once the host imports
    evalmetry.debug (the target held at that import), and markers after it are followed."""
    with stepped_under_stats("markers_late.py", tmp_path) as (steps, out, target, tracer, _):
        (steps / "go1").touch()
        wait_for_file(str(steps / "done1"), target)
        before = program_runs(tracer.pid)
        markers = [name for name in before if name.startswith("marker_enter")]
        assert before.get("call_enter", 0) >= 200, before
        # the probe is not placed: no marker program of this Python was attached yet
        assert not any(before[name] for name in markers), before
        (steps / "go2").touch()
        wait_for_file(str(steps / "done2"), target)
        after = program_runs(tracer.pid)
        assert any(after.get(name, 0) for name in after if name.startswith("marker_enter")), after
        assert target.wait(timeout=60) == 0, target.stderr.read()
        assert tracer.wait(timeout=60) == 0
        log = tracer.stderr.read()
        assert "phase markers followed from here" in log, log
    enters = [e for e in load(out) if e["event"] == "enter"]
    assert len(enters) == 201, len(enters)
    assert {e["phase"] for e in enters[:-1]} == {"other"}  # the reference's outside any
    assert enters[-1]["phase"] == "late"


def test_marker_probe_not_run_per_module_call(evmbpf, tmp_path):
    """A host that imported evalmetry.debug (the probe placed at the attach) and marks no
    phase inside its forwards: its module calls and isinstance() checks against
    torch.Tensor run the marker program not once (the probe is on the eval loop's `with`
    lookups, not on _PyObject_LookupSpecial, which isinstance() calls too on 3.11); a
    `with phase()` after them is followed."""
    with stepped_under_stats("markers_idle.py", tmp_path) as (steps, out, target, tracer, log):
        assert "phase markers: the probe goes on the eval loop's" in log, log
        before = program_runs(tracer.pid)
        markers = [name for name in before if name.startswith("marker_enter")]
        assert markers, before  # loaded and placed: evalmetry.debug was imported
        (steps / "go1").touch()
        wait_for_file(str(steps / "done1"), target)
        during = program_runs(tracer.pid)
        calls = during["call_enter"] - before.get("call_enter", 0)
        runs = sum(during[name] - before[name] for name in markers)
        assert calls >= 600, (before, during)  # 200 x (Sequential, Linear, ReLU)
        assert runs == 0, (runs, calls)
        (steps / "go2").touch()
        wait_for_file(str(steps / "done2"), target)
        after = program_runs(tracer.pid)
        assert sum(after[name] - during[name] for name in markers) >= 1, (during, after)
        assert target.wait(timeout=60) == 0, target.stderr.read()
        assert tracer.wait(timeout=60) == 0
    enters = [e for e in load(out) if e["event"] == "enter"]
    assert len(enters) == 603, len(enters)
    assert {e["phase"] for e in enters[:-3]} == {"other"}
    assert {e["phase"] for e in enters[-3:]} == {"marked"}


def test_rules_name_phases_like_markers(evmbpf, tmp_path):
    """A host without markers, named by rules, gives the phases the marked host gives."""
    workload = os.path.join(OWN_WORKLOADS, "phases_rules.py")
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    env = dict(os.environ, PHASES_BY_MARKERS="1")
    run_reference(workload, ref, env=env)
    result = run_launch(workload, got, evmbpf_args=[
        "--phase", "model_forward=phases_rules:score",
        "--phase", "generate=*:generate_*"])
    assert result.returncode == 0, result.stderr
    events = load(got)
    assert [e["phase"] for e in events if e["event"] == "forward"] == [
        "other", "model_forward", "model_forward", "generate"]
    compare_traces(load(ref), events, kwargs=KWARGS)


def test_markers_beat_rules(evmbpf, tmp_path):
    workload = os.path.join(OWN_WORKLOADS, "phases_rules.py")
    got = str(tmp_path / "got.jsonl")
    env = dict(os.environ, PHASES_BY_MARKERS="1")
    result = run_launch(workload, got, env=env,
                        evmbpf_args=["--phase", "ruled=*:score", "--phase", "ruled=*:run"])
    assert result.returncode == 0, result.stderr
    phases = [e["phase"] for e in load(got) if e["event"] == "forward"]
    assert phases == ["ruled", "model_forward", "model_forward", "generate"]


def test_bad_phase_rules_are_refused(evmbpf, tmp_path):
    for bad in ["", "=x", "name=", "name", "name=mod:"]:
        result = subprocess.run([EVMBPF, "--phase", bad, "--out", str(tmp_path / "x"), "--",
                                 "true"], capture_output=True, text=True)
        assert result.returncode == 2, (bad, result.stderr)
        assert "--phase" in result.stderr and len(result.stderr.splitlines()) == 1


THREADS = '''
import threading, torch
from torch import nn
from evalmetry.debug import phase

model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
other = nn.Sequential(nn.Linear(4, 4)).eval()
barrier = threading.Barrier(2)

def marked():
    with phase("model_forward"):
        for _ in range(20):
            barrier.wait()
            model(torch.ones(1, 4))

def plain():
    for _ in range(20):
        barrier.wait()
        model(torch.ones(1, 4))

with torch.no_grad():
    a = threading.Thread(target=marked)
    b = threading.Thread(target=plain)
    a.start(); b.start(); a.join(); b.join()
'''


def test_markers_are_per_thread(evmbpf, tmp_path):
    """A marker entered on one thread does not name another thread's work."""
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    got = str(tmp_path / "got.jsonl")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(REF_WORKLOADS))
    result = subprocess.run([EVMBPF, "--out", got, "--", HOST_PYTHON, str(script)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    events = [e for e in load(got) if e["event"] in ("enter", "exit")]
    by_tid = {}
    for e in events:
        by_tid.setdefault(e["tid"], set()).add(e["phase"])
    assert sorted(map(sorted, by_tid.values())) == [["model_forward"], ["other"]]
    assert len(events) == 2 * 20 * 2 * 3


def interpreters():
    """The interpreters' ELF files here: the host's, the pyenv libpythons, the chroots'
    (those built), the host's shared libpython; with the lookup `with` calls."""
    found = [HOST_PYTHON, *glob.glob("/usr/lib/x86_64-linux-gnu/libpython3.*.so.1.0"),
             *glob.glob(os.path.join(PYENV, "versions", "3.*", "lib", "libpython3.*.so.1.0"))]
    for name, files in (("bullseye", ["usr/bin/python3.9"]), ("trixie", ["usr/bin/python3.13"]),
                        ("sid", ["usr/bin/python3.14",
                                 "usr/lib/x86_64-linux-gnu/libpython3.14.so.1.0"])):
        try:
            root = chroot_dir(name)
        except (OSError, subprocess.SubprocessError):
            continue
        found += [os.path.join(root, f) for f in files if os.path.exists(os.path.join(root, f))]
    out = []
    for path in found:
        path = os.path.realpath(path)
        minor = re.search(r"python3\.(\d+)", path)
        if minor and int(minor.group(1)) >= 9 and path not in [p for p, _ in out]:
            out.append((path, "_PyObject_LookupSpecialMethod" if int(minor.group(1)) >= 14
                        else "_PyObject_LookupSpecial"))
    return out


def objdump_function(path, name):
    """objdump's instruction addresses of a function, and its calls' (address, callee)."""
    syms = subprocess.run(["readelf", "-sW", path], capture_output=True, text=True,
                          check=True).stdout
    start, size = next((int(f[1], 16), int(f[2])) for f in map(str.split, syms.splitlines())
                       if len(f) >= 8 and f[7] == name and f[3] == "FUNC")
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={start}",
                           f"--stop-address={start + size}", path], capture_output=True,
                          text=True, check=True).stdout
    insns = [int(m.group(1), 16) for m in re.finditer(r"^\s+([0-9a-f]+):\t", text, re.M)]
    calls = [(int(m.group(1), 16), m.group(2)) for m in
             re.finditer(r"^\s+([0-9a-f]+):\tcall\s+[0-9a-f]+ <([^>@+]+)", text, re.M)]
    return insns, calls


def test_eval_loop_call_sites_decoded_exactly():
    """The marker probe goes on the eval loop's call instructions: a uprobe that is not on
    an instruction's first byte would corrupt the target. On every interpreter here,
    x86insn.c's walk of _PyEval_EvalFrameDefault finds objdump's instruction boundaries,
    each one, and callsites.c finds exactly the calls objdump shows to the lookup (direct,
    or through its PLT entry)."""
    targets = interpreters()
    assert targets
    for path, lookup in targets:
        walk = subprocess.run([TEST_AIDS, "x86-walk", path, "_PyEval_EvalFrameDefault", lookup],
                              capture_output=True, text=True, check=True).stdout.split()
        assert "refused" not in walk, path
        insns, calls = objdump_function(path, "_PyEval_EvalFrameDefault")
        mine = [int(w, 16) for w in walk[:walk.index("site") if "site" in walk else None]]
        assert mine == insns, path
        sites = [int(walk[i + 1], 16) for i, w in enumerate(walk) if w == "site"]
        assert sites == [at for at, callee in calls if callee == lookup], path
