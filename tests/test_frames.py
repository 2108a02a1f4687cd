"""The running thread's Python frames on every CPython 3.9-3.14: --phase rules and the
model of a mid-forward attach, in each cell of the matrix that has them.

evmbpf reads the frames under a module call from the thread state (3.9-3.11: the
runtime's current thread state; 3.12+: the GIL's last holder), through per-version
offsets (user/collector/target/pyoffsets.c). 3.9/3.10 code objects carry no qualified name, so a method's
class is found from its first local's type: `Harness.score` below is only reachable
that way, being called on a subclass."""
import os
import subprocess
import time

import pytest

from evmbpf_testlib import (EVMBPF, OWN_WORKLOADS, compare_traces, load, python_under,
                            target_of, wait_for_line)

pytestmark = pytest.mark.root

RULES = ["--phase", "model_forward=rules_any:Harness.score", "--phase", "generate=*:generate_*"]
# (cell, python): pyenv CPythons run the stand-in torch, chroots Debian's torch.
CELLS = [("pyenv", "3.9"), ("pyenv", "3.10"), ("pyenv", "3.12"), ("pyenv", "3.13"),
         ("chroot", "bullseye"), ("chroot", "trixie"), ("chroot", "sid")]


@pytest.mark.parametrize("kind,name", CELLS, ids=[f"{k}-{n}" for k, n in CELLS])
def test_rules_name_phases_on_every_version(evmbpf, kind, name, tmp_path):
    """The host marks its phases (reference) or not (evmbpf, with rules): same trace."""
    target = target_of(kind, name, tmp_path)
    workload = os.path.join(OWN_WORKLOADS, "rules_any.py")
    ref = str(tmp_path / "ref.jsonl")
    marked = target.env, dict(target.env or os.environ, PHASES_BY_MARKERS="1")
    target.env = marked[1]
    result = target.reference(workload, ref)
    assert result.returncode == 0, result.stderr[-3000:]
    target.env = marked[0]
    got = str(tmp_path / "got.jsonl")
    result = target.launch(workload, got, evmbpf_args=RULES)
    assert result.returncode == 0, result.stderr
    events = load(got)
    assert [e["phase"] for e in events if e["event"] == "forward"] == [
        "other", "model_forward", "model_forward", "generate"], result.stderr
    compare_traces(load(ref), events, kwargs=target.kwargs)


@pytest.mark.parametrize("kind,name", CELLS, ids=[f"{k}-{n}" for k, n in CELLS])
def test_markers_on_every_version(evmbpf, kind, name, tmp_path):
    """The host's phase() markers, nested, left by exceptions, re-entered in a hook:
    the same phases as the reference's, event for event (3.9/3.10 look `__enter__` up
    by identifier and keep a generator's state in its frame; 3.14 through LOAD_SPECIAL)."""
    target = target_of(kind, name, tmp_path)
    workload = os.path.join(OWN_WORKLOADS, "phases_any.py")
    ref = str(tmp_path / "ref.jsonl")
    result = target.reference(workload, ref)
    assert result.returncode == 0, result.stderr[-3000:]
    got = str(tmp_path / "got.jsonl")
    result = target.launch(workload, got)
    assert result.returncode == 0, result.stderr
    events = load(got)
    assert {e["phase"] for e in events if e["event"] == "enter"} == {
        "other", "generate", "model_forward", "signal_collection", "scoring"}
    compare_traces(load(ref), events, kwargs=target.kwargs)


MID_CELLS = [("pyenv", "3.9"), ("pyenv", "3.12"), ("pyenv", "3.13"), ("chroot", "sid")]


@pytest.mark.parametrize("kind,name", MID_CELLS, ids=[f"{k}-{n}" for k, n in MID_CELLS])
def test_attach_mid_forward_on_every_version(evmbpf, kind, name, tmp_path):
    """Attached while the model's second layer runs: that layer and the model end with
    `orphan` exits, the rest of that forward is written under the model's own names
    (forward 0, depth from the attach), then whole forwards equal to the reference's."""
    target = target_of(kind, name, tmp_path)
    workload = os.path.join(OWN_WORKLOADS, "midforward_any.py")
    ref = str(tmp_path / "ref.jsonl")
    plain_env = target.env
    target.env = dict(plain_env or os.environ, MIDFORWARD_PAUSE="0")
    assert target.reference(workload, ref).returncode == 0
    flag, resume = tmp_path / "paused", tmp_path / "resume"
    # paused until evmbpf says it is attached (60 s at most), however long loading takes
    target.env = dict(plain_env or os.environ, MIDFORWARD_FLAG=target.guest(str(flag)),
                      MIDFORWARD_RESUME=target.guest(str(resume)), MIDFORWARD_PAUSE="60")
    proc = subprocess.Popen(target.cmd(workload), env=target.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the workload never paused"
            time.sleep(0.02)
        pid = python_under(proc.pid, "midforward_any.py")
        assert pid, "no Python process running the workload"
        out = str(tmp_path / "got.jsonl")
        tracer = subprocess.Popen([EVMBPF, "-v", "--pid", str(pid), "--out", out],
                                  stderr=subprocess.PIPE, text=True)
        err = wait_for_line(tracer.stderr, "attached to", 60)
        resume.touch()
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
        err += tracer.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert tracer.returncode == 0, err
    assert "attached in the middle of a forward" in err, err
    assert "2 modules were running on 1 threads at the attach" in err, err
    events = [e for e in load(out) if e["event"] != "header"]
    first = [(e["event"], e["module"], e["type"], e["depth"], e["forward"], e["call"],
              e.get("orphan")) for e in events[:8]]
    assert first == [
        ("exit", "layers.1", None, 0, 0, None, True),  # returned after the attach
        ("enter", "layers.2", "Identity", 0, 0, 1, None),
        ("exit", "layers.2", "Identity", 0, 0, 1, None),
        ("enter", "layers.3", "Identity", 0, 0, 2, None),
        ("exit", "layers.3", "Identity", 0, 0, 2, None),
        ("enter", "head", "Identity", 0, 0, 3, None),
        ("exit", "head", "Identity", 0, 0, 3, None),
        ("exit", "<root>", None, 0, 0, None, True)], err
    whole = [dict(e, call=None) for e in load(ref)
             if e.get("forward", 0) >= 2 and e["event"] != "header"]
    ours = [dict(e, forward=e["forward"] + 1, call=None) for e in events[8:]]
    assert whole and len(whole) == len(ours)
    compare_traces(whole, ours, kwargs=target.kwargs)


OFFSET_CELLS = [("pyenv", v) for v in ("3.9", "3.10", "3.11", "3.12", "3.13")] + \
    [("chroot", c) for c in ("bullseye", "trixie", "sid")]


@pytest.mark.parametrize("kind,name", OFFSET_CELLS, ids=[f"{k}-{n}" for k, n in OFFSET_CELLS])
def test_offset_table_matches_live_interpreter(kind, name, tmp_path):
    """user/collector/target/pyoffsets.c against a live interpreter of each version
    (scripts/check-pyoffsets.py: objects, frames, the thread state, the GIL's holder)."""
    target = target_of(kind, name, tmp_path)
    script = os.path.join(os.path.dirname(OWN_WORKLOADS), "..", "scripts", "check-pyoffsets.py")
    result = subprocess.run([*target.prefix, target.python, target.guest(os.path.realpath(script))],
                            capture_output=True, text=True, env=target.env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checks passed" in result.stdout
